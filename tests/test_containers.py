"""Ranks of one host in different pid namespaces, as containers that share a network
namespace but not a pid namespace (a Kubernetes pod without shareProcessNamespace, two
`docker run --network container:` siblings): 8 plain C ranks (bench/scale/scale.c
through the C ABI), each started under `unshare --pid --fork --mount-proc`, so none can
open another's /proc/PID/fd. They must still share memory (the segment is handed over
an abstract unix socket), with no "keeps tcp" warning, and all_reduce exactly, also in
buffers from goncclMemAlloc (whose zero-copy path needs /proc and is left out).

Needs root and unshare; skipped otherwise (a failure under GONCCL_REQUIRE=netns).
"""

import glob
import json
import os
import shutil
import subprocess
import sys

import pytest

import _harness

SCALE = os.path.join(_harness.REPO_ROOT, "bench", "scale", "scale.py")


def _why_not() -> str | None:
    if os.geteuid() != 0:
        return "needs root for unshare --pid"
    if shutil.which("unshare") is None:
        return "needs unshare (util-linux)"
    return None


pytestmark = [pytest.mark.requires("netns"), pytest.mark.skipif(_why_not() is not None, reason=_why_not() or "")]


@pytest.mark.timeout(120)
def test_ranks_in_separate_pid_namespaces_share_memory(package_dir, tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    out = tmp_path / "scale.json"
    env = dict(os.environ, GONCCL_DEBUG="INFO", GONCCL_DEBUG_SUBSYS="INIT,SHM",
               GONCCL_DEBUG_FILE=str(logs / "rank.%h.%p.log"))
    proc = subprocess.run([sys.executable, SCALE, "-np", "8", "--pid-namespaces", "--alloc", "--loop", "2",
                           "--lib", os.path.join(package_dir, "libgonccl.so"), "--timeout", str(_harness.scaled(60)),
                           "--json", str(out)], capture_output=True, text=True, timeout=_harness.scaled(60) + 60, env=env)
    print(proc.stdout)
    assert proc.returncode == 0, f"bench/scale/scale.py --pid-namespaces failed:\n{proc.stdout}\n{proc.stderr[-3000:]}"
    (row,) = json.loads(out.read_text())
    assert not row.get("failed") and row["exact"], f"8 ranks in separate pid namespaces:\n{proc.stdout}"
    text = "".join(open(f).read() for f in glob.glob(str(logs / "*.log")))
    assert "keeps tcp" not in text, f"a pair fell back to TCP:\n{text[-4000:]}"
    inits = [line for line in text.splitlines() if "init done in" in line]
    assert len(inits) == 8, f"expected 8 INIT lines:\n{text[-4000:]}"
    assert all(":shm(" in line and ":tcp(" not in line for line in inits), "\n".join(inits)

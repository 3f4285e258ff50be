"""Many ranks on one host stay cheap: 128 plain C processes (bench/scale/scale.c, no
torch) join one communicator through the C ABI and all_reduce 8 bytes and 1 MiB, in
ordinary memory and in buffers from goncclMemAlloc (the zero-copy path's memory), twice
each. Every result must be exact, and no rank may hold more than 64 fds at the end: an
operation that talks to every peer instead of its algorithm's few (one link, and its
fds, per peer: some 260 fds per rank at 128 ranks) fails here, as the zero-copy
path's all-pairs descriptor exchange once did (it also took seconds per operation,
and at 256 ranks never finished). The figures (bench/scale/scale.py's table) are
printed for the record; speed is `make bench-scale`'s business, not an assert's.
"""

import json
import os
import subprocess
import sys

import pytest

import _harness

RANKS = 128
FDS_MAX = 64
SCALE = os.path.join(_harness.REPO_ROOT, "bench", "scale", "scale.py")


@pytest.mark.timeout(240)
def test_128_ranks_one_host(package_dir, tmp_path):
    lib = os.path.join(package_dir, "libgonccl.so")
    out = tmp_path / "scale.json"
    limit = _harness.scaled(150)
    proc = subprocess.run([sys.executable, SCALE, "-np", str(RANKS), "--alloc", "--lib", lib, "--timeout", str(limit),
                           "--json", str(out)], capture_output=True, text=True, timeout=limit + 60)
    print(proc.stdout)
    assert proc.returncode == 0, f"bench/scale/scale.py failed:\n{proc.stdout}\n{proc.stderr[-3000:]}"
    (row,) = json.loads(out.read_text())
    assert not row.get("failed"), f"{RANKS} ranks did not all finish: {proc.stdout}"
    assert row["exact"], f"a rank's result was wrong: {proc.stdout}"
    assert row["fds_after_max"] <= FDS_MAX, (
        f"a rank held {row['fds_after_max']} fds after its operations (at most {FDS_MAX}): an operation "
        f"connected to more peers than its algorithm needs:\n{proc.stdout}")

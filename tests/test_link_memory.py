"""What links between hosts hold in memory under load: 2 hosts (network namespaces on a
veth, scripts/two-hosts.sh) x 8 ranks, each a plain C process (tests/capi/alltoall_soak.c,
no torch) running all-to-alls of 8 MiB per rank back to back, every result checked.
Every rank's connections to the other host are resumable sessions, which keep what they
sent until the peer acknowledges it: by reference while a collective owns the buffer,
as copies within GONCCL_LINK_BUFFER_MB otherwise (an all-to-all's sends are copied
where unacknowledged when each returns). The peak resident set of every rank must stay
under RSS_LIMIT_MIB, whatever the length of the run (docs/fault-tolerance.md gives the
figures): before sessions kept references, a busy session held up to 21 MiB and kept
it, and 8 peers on the other host could make that 170 MiB a rank.

SOAK_SECONDS (default 8) sets the length; `make soak-links` runs the 30 s of the
design. Needs root and `ip netns`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

import _harness
from test_two_hosts import SCRIPT, _script, _why_not

PREFIX = "gnclm"
PER_HOST = 8
BYTES = 8 << 20
RSS_LIMIT_MIB = 128
SECONDS = float(os.environ.get("SOAK_SECONDS", "8"))

pytestmark = [pytest.mark.requires("netns"), pytest.mark.skipif(_why_not() is not None, reason=_why_not() or "")]


@pytest.fixture(scope="module")
def soak_binary(package_dir, tmp_path_factory):
    gcc = shutil.which("gcc")
    assert gcc, "gcc is needed to build the soak rank"
    out = str(tmp_path_factory.mktemp("soak") / "alltoall_soak")
    argv = [gcc, "-std=c11", "-D_DEFAULT_SOURCE", "-Wall", "-O1", f"-I{os.path.join(package_dir, 'include')}",
            f"-I{os.path.join(_harness.TESTS_DIR, 'capi')}", os.path.join(_harness.TESTS_DIR, "capi", "alltoall_soak.c"),
            "-o", out, f"-L{package_dir}", "-lgonccl", f"-Wl,-rpath,{package_dir}"]
    _harness.run_processes([argv], timeout=120, names=["gcc"]).assert_ok("compiling tests/capi/alltoall_soak.c")
    return out


@pytest.fixture(scope="module")
def hosts():
    prefix = f"{PREFIX}{os.getpid()}h"
    try:
        _script(prefix, "up")
        yield prefix
    finally:
        _script(prefix, "down", check=False)
        left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert prefix not in left, f"two-hosts.sh down left namespaces behind:\n{left}"


def test_link_memory_stays_bounded(hosts, soak_binary, tmp_path):
    n = 2 * PER_HOST
    idf = str(tmp_path / "id")
    argvs, envs = [], []
    for r in range(n):
        argvs.append([SCRIPT, "run", str(r // PER_HOST), soak_binary, str(r), str(n), idf, str(SECONDS), str(BYTES)])
        envs.append(dict(os.environ, GONCCL_2H_PREFIX=hosts, GONCCL_SOCKET_IFNAME="=gnc", GONCCL_NSOCKS_PERTHREAD="2",
                         GONCCL_SOCKET_NTHREADS="1"))
    run = _harness.run_processes(argvs, timeout=SECONDS + 180, envs=envs, cwd=str(tmp_path),
                                 names=[f"rank {r} (host {r // PER_HOST})" for r in range(n)], grace=20)
    run.assert_ok("the all-to-all soak")
    reports = [json.loads(p.stdout.strip().splitlines()[-1]) for p in run.procs]
    hwm = max(r["hwm_kib"] for r in reports) / 1024
    print(f"\n{n} ranks, {SECONDS:g} s, {reports[0]['iterations']} all-to-alls of {BYTES >> 20} MiB a rank: "
          f"peak RSS {min(r['hwm_kib'] for r in reports) / 1024:.0f}-{hwm:.0f} MiB, "
          f"final {max(r['rss_kib'] for r in reports) / 1024:.0f} MiB, fds <= {max(r['fds'] for r in reports)}")
    assert all(r["wrong"] == 0 for r in reports), f"wrong results: {reports}"
    assert reports[0]["iterations"] >= 2, f"too few all-to-alls to say anything: {reports}"
    assert hwm <= RSS_LIMIT_MIB, f"a rank's peak resident set {hwm:.0f} MiB > {RSS_LIMIT_MIB} MiB: {reports}"

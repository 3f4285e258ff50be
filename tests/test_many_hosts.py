"""Many hosts on one machine: 8 network namespaces on one bridge (bench/scale/hosts.py),
8 plain C ranks in each (bench/scale/scale.c through the C ABI, no torch), 64 ranks in
one communicator. Ranks of a host share memory, hosts talk TCP over the bridge, so the
hierarchical algorithms, connections made on demand and resumable links between many
hosts meet here. Every result must be exact and every rank must finish, all within a
minute (scaled by GONCCL_TEST_TIME_SCALE); the figures are printed for the record, speed
is `make bench-many-hosts`' business. Then 4 IPv6-only hosts of 2 ranks, plain and over
TLS.

Needs root, `ip netns` and nsenter; skipped otherwise (a failure under
GONCCL_REQUIRE=netns). The namespaces are removed whatever happens.
"""

import json
import os
import subprocess
import sys

import pytest

import _harness

sys.path.insert(0, os.path.join(_harness.REPO_ROOT, "bench", "scale"))
import hosts as hosts_mod  # noqa: E402

SCALE = os.path.join(_harness.REPO_ROOT, "bench", "scale", "scale.py")
HOSTS, PER_HOST = 8, 8
FDS_MAX = 64

pytestmark = [pytest.mark.requires("netns"),
              pytest.mark.skipif(hosts_mod.why_not() is not None, reason=hosts_mod.why_not() or "")]


def _leftover() -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith("gncs")]


@pytest.mark.timeout(180)
def test_eight_hosts_of_eight_ranks(package_dir, tmp_path):
    lib = os.path.join(package_dir, "libgonccl.so")
    out = tmp_path / "hosts.json"
    limit = _harness.scaled(60)
    before = set(_leftover())
    proc = subprocess.run([sys.executable, SCALE, "--hosts", str(HOSTS), "-np", str(HOSTS * PER_HOST), "--loop", "3",
                           "--lib", lib, "--timeout", str(limit), "--json", str(out)],
                          capture_output=True, text=True, timeout=limit + 60)
    print(proc.stdout)
    assert set(_leftover()) <= before, f"scale.py left namespaces behind: {set(_leftover()) - before}"
    assert proc.returncode == 0, f"bench/scale/scale.py --hosts failed:\n{proc.stdout}\n{proc.stderr[-3000:]}"
    (row,) = json.loads(out.read_text())
    assert not row.get("failed"), f"{HOSTS} hosts x {PER_HOST} ranks did not all finish:\n{proc.stdout}"
    assert row["exact"], f"a rank's result was wrong:\n{proc.stdout}"
    assert row["wall_s"] <= limit, f"{HOSTS} x {PER_HOST} ranks took {row['wall_s']:.1f} s (at most {limit}):\n{proc.stdout}"
    assert row["fds_after_max"] <= FDS_MAX, f"a rank held {row['fds_after_max']} fds (at most {FDS_MAX}):\n{proc.stdout}"


def _certs(d) -> dict:
    """A CA and one certificate signed by it (every host uses it), made with openssl."""
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    for args in (["req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "1", "-subj", "/CN=test CA"],
                 ["req", *ec, "-keyout", "host.key", "-out", "host.csr", "-subj", "/CN=host"],
                 ["x509", "-req", "-in", "host.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                  "-days", "1", "-out", "host.pem"]):
        res = subprocess.run(["openssl", *args], cwd=d, capture_output=True, text=True, timeout=30)
        assert res.returncode == 0, f"openssl {' '.join(args)}:\n{res.stderr}"
    return dict(GONCCL_TLS="1", GONCCL_TLS_CERT=str(d / "host.pem"), GONCCL_TLS_KEY=str(d / "host.key"),
                GONCCL_TLS_CA=str(d / "ca.pem"))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
def test_ipv6_only_hosts(package_dir, tmp_path, tls):
    """4 IPv6-only hosts (fd79::/64, no IPv4 address but loopback's) x 2 C ranks: the
    bootstrap, the links between hosts and, with GONCCL_TLS=1, TLS, all over IPv6."""
    lib = os.path.join(package_dir, "libgonccl.so")
    out = tmp_path / "hosts.json"
    env = dict(os.environ) | (_certs(tmp_path) if tls else {})
    proc = subprocess.run([sys.executable, SCALE, "--hosts", "4", "--ipv6", "-np", "8", "--loop", "2", "--lib", lib,
                           "--timeout", str(_harness.scaled(60)), "--json", str(out)],
                          capture_output=True, text=True, timeout=_harness.scaled(60) + 60, env=env)
    print(proc.stdout)
    assert proc.returncode == 0, f"bench/scale/scale.py --hosts --ipv6 failed:\n{proc.stdout}\n{proc.stderr[-3000:]}"
    (row,) = json.loads(out.read_text())
    assert not row.get("failed") and row["exact"], f"4 IPv6 hosts x 2 ranks:\n{proc.stdout}"

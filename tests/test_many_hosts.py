"""Many hosts on one machine: 8 network namespaces on one bridge (bench/scale/hosts.py),
8 plain C ranks in each (bench/scale/scale.c through the C ABI, no torch), 64 ranks in
one communicator. Ranks of a host share memory, hosts talk TCP over the bridge, so the
hierarchical algorithms, connections made on demand and resumable links between many
hosts meet here. Every result must be exact and every rank must finish, all within a
minute (scaled by GONCCL_TEST_TIME_SCALE); the figures are printed for the record, speed
is `make bench-many-hosts`' business. Then 4 IPv6-only hosts of 2 ranks, plain and over
TLS; and a host lost among 16 (its ranks killed, or its link cut for good), which every
other rank must notice within 30 s, naming one of its ranks, before the survivors shrink
to a group without it and go on exactly.

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


LOST_HOSTS, LOST_PER_HOST, LOST = 16, 2, 11  # 16 hosts x 2 ranks; host 11 (ranks 22, 23) is lost


@pytest.mark.timeout(240)
@pytest.mark.parametrize("how", ["kill", "cut"])
def test_lost_host_among_many(package_dir, tmp_path, how):
    """A host lost while 16 hosts x 2 C ranks all_reduce 1 MiB in a loop: its ranks
    SIGKILLed, or its link cut for good (`ip link set gnh down`: nothing is closed, only
    heartbeats and the failed reconnects can tell). Every other rank fails within 30 s of
    the fault (heartbeat timeout 5 s, reconnect window 2 s), naming a rank of that host,
    and then shrinks: the 30 survivors make a new communicator without that host's ranks
    (SCALE_SHRINK, as torch's shrink_group does on gonccl), on which 3 all_reduces of
    1 MiB must be exact. With the cut, the lost host's own ranks fail too, each naming a
    rank of another, and take no part; they stay 5 s before they abort and exit. A
    survivor keeps its old communicator until its new one is done: one that left at
    once would be taken for lost by the peers that had not heard of the loss yet."""
    import re
    import time

    sys.path.insert(0, os.path.dirname(SCALE))
    import scale

    exe = str(tmp_path / "scale")
    scale.build(os.path.join(package_dir, "libgonccl.so"), exe)
    n = LOST_HOSTS * LOST_PER_HOST
    lost = set(range(LOST * LOST_PER_HOST, (LOST + 1) * LOST_PER_HOST))
    survivors = sorted(set(range(n)) - lost)
    started = tmp_path / "started"
    env = dict(os.environ, SCALE_LOOP="1000000", SCALE_LOOP_STARTED=str(started),
               GONCCL_SOCKET_IFNAME="=" + hosts_mod.IFNAME, GONCCL_HEARTBEAT_TIMEOUT_MS="5000",
               GONCCL_LINK_RETRY_MS="2000", SCALE_HOLD_MS="5000", SCALE_SHRINK=",".join(map(str, sorted(lost))))
    procs, logs, outs, ended = [], [], [], {}
    with hosts_mod.Hosts(LOST_HOSTS, prefix="gncs") as hosts:
        try:
            for r in range(n):
                logs.append(open(tmp_path / f"rank{r}.err", "w+"))
                outs.append(open(tmp_path / f"rank{r}.out", "w+"))
                procs.append(subprocess.Popen(hosts.wrap(r // LOST_PER_HOST, [exe, str(r), str(n), str(tmp_path / "id")]),
                                              stdout=outs[-1], stderr=logs[-1], env=env, start_new_session=True))
            deadline = time.time() + _harness.scaled(90)
            while not started.exists() and time.time() < deadline and all(p.poll() is None for p in procs):
                time.sleep(0.1)
            assert started.exists(), "the loop never started: " + "; ".join(
                f"rank {r} exit {p.returncode}" for r, p in enumerate(procs) if p.poll() is not None)
            time.sleep(1)
            fault_at = time.time()
            if how == "kill":
                for pid in hosts.pids(LOST):
                    os.kill(pid, 9)
            else:
                subprocess.run(["ip", "-n", hosts.names[LOST], "link", "set", hosts_mod.IFNAME, "down"], check=True)
            expect = set(range(n)) - (lost if how == "kill" else set())
            deadline = fault_at + _harness.scaled(60)
            while time.time() < deadline and len(ended) < len(expect):
                for r in expect - set(ended):
                    if procs[r].poll() is not None:
                        ended[r] = time.time() - fault_at
                time.sleep(0.05)
        finally:
            for p in procs:
                if p.poll() is None:
                    os.killpg(p.pid, 9)
                p.wait()
    problems, misnamed, rows = [], [], {}
    for r in sorted(expect):
        logs[r].seek(0)
        err = logs[r].read()
        logs[r].close()
        outs[r].seek(0)
        out = outs[r].read()
        outs[r].close()
        named = {int(m) for m in re.findall(r"lost rank (\d+)", err)}
        want = lost if r not in lost else set(range(n)) - lost
        if r not in ended:
            problems.append(f"rank {r} still ran 60 s after the fault")
            continue
        if r in lost:  # the cut host's own: fails, holds 5 s, aborts
            if ended[r] > _harness.scaled(30):
                problems.append(f"rank {r} failed {ended[r]:.1f} s after the fault (at most 30)")
            if procs[r].returncode == 0:
                problems.append(f"rank {r} exited 0 after the fault: {err[-600:]}")
        else:
            lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
            if procs[r].returncode != 0 or not lines:
                problems.append(f"rank {r} did not go on after the shrink (exit {procs[r].returncode}): {err[-600:]}")
                continue
            rows[r] = row = lines[-1]
            if row["t_error"] - fault_at > _harness.scaled(30):
                problems.append(f"rank {r} failed {row['t_error'] - fault_at:.1f} s after the fault (at most 30)")
            if (row["new_rank"], row["new_size"]) != (survivors.index(r), len(survivors)) or not row["exact"]:
                problems.append(f"rank {r} after the shrink: {row}")
        if not named & want:
            misnamed.append(f"rank {r} names no rank of {'the lost host' if r not in lost else 'another host'}: "
                            f"{err[-600:]}")
    assert not problems, f"{len(problems)} problems ({how}):\n" + "\n".join(problems[:12])
    assert not misnamed, f"{len(misnamed)} ranks misname the loss ({how}):\n" + "\n".join(misnamed[:12])
    assert len(rows) == len(survivors)
    print(f"{how}: survivors' error after {max(w['t_error'] for w in rows.values()) - fault_at:.2f} s (max), "
          f"the group of {len(survivors)} ready after {max(w['t_ready'] for w in rows.values()) - fault_at:.2f} s, "
          f"{rows[survivors[0]]['ops']} all_reduces of 1 MiB on it in {max(w['ops_s'] for w in rows.values()):.2f} s")

"""Two hosts x two ranks on one machine: scripts/two-hosts.sh makes two network
namespaces joined by a veth pair; ranks 0, 1 run in host 0 and ranks 2, 3 in host 1.
gonccl's host identity includes the namespace, so the ranks of one host talk through
shared memory and the two hosts over TCP, with 2 connections per peer here
(GONCCL_NSOCKS_PERTHREAD=2), as a real 2-node job would.

* collectives: all_reduce, all_gather, send/recv across the hosts and broadcast
  (every root) of 1 to ~1M elements, each rank checking the result against plain
  torch, and rank 0's INIT log showing shm to rank 1 and tcp to ranks 2 and 3 over 2
  connections each; again with GONCCL_TLS=1 (each host's certificate signed by a CA
  the test makes with the openssl CLI), the log showing TLS on every TCP link;
* IPv6: the collectives on IPv6-only hosts (ULA addresses), plain and over TLS;
* ports: with GONCCL_PORT_RANGE of 8 ports, every listener in either namespace is in
  the range (but torch's store);
* windows: one-sided windows (workers/window_worker.py): puts into a peer on the same
  host are copies into its mapped window, into one on the other host frames over TCP;
  map_remote_tensor works for the former and is refused, saying why, for the latter;
* ddp: the lecture's examples/ddp_example.py (its model narrowed and its loop cut to
  3 steps so 4 ranks fit in the time on 2 cores), with bit-identical final weights;
* faults: during a loop of all_reduce, host 1's link is cut (`ip link set gnc down`:
  nothing is closed, only heartbeats can tell) or host 1's ranks are SIGKILLed; every
  surviving rank raises DistBackendError within 30 s of the fault (the group timeout is
  120 s), naming a rank of the other host; the kill again over TLS.

Needs root and `ip netns`; skipped otherwise. The namespaces are removed and every
rank killed whatever happens (the fixture's finalizer; stale namespaces left by a
killed run are removed at the next start).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

import pytest

import _harness

SCRIPT = os.path.join(_harness.REPO_ROOT, "scripts", "two-hosts.sh")
PREFIX = "gnct"  # namespaces gnct<pid>h0, gnct<pid>h1
TIMEOUT = 240  # up to 6 ranks importing torch on 2 loaded cores (scaled by GONCCL_TEST_TIME_SCALE)


def _why_not() -> str | None:
    if os.geteuid() != 0:
        return "needs root to create network namespaces"
    if shutil.which("ip") is None:
        return "needs iproute2 (the ip command)"
    probe = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"`ip netns` does not work here: {probe.stderr.strip()}"
    return None


pytestmark = [pytest.mark.requires("netns"), pytest.mark.skipif(_why_not() is not None, reason=_why_not() or "")]


def _script(prefix: str, *args: str, check: bool = True, ipv6: bool = False) -> subprocess.CompletedProcess:
    env = dict(os.environ, GONCCL_2H_PREFIX=prefix, GONCCL_2H_IPV6="1" if ipv6 else "0")
    res = subprocess.run([SCRIPT, *args], env=env, capture_output=True, text=True, timeout=60)
    if check and res.returncode != 0:
        raise AssertionError(f"two-hosts.sh {' '.join(args)} failed ({res.returncode}):\n{res.stdout}\n{res.stderr}")
    return res


def _remove_stale() -> None:
    """Namespaces of earlier runs whose pytest died without cleaning up."""
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
    for name in names:
        if name.startswith(PREFIX) and name[-2:] in ("h0", "h1"):
            pid = name[len(PREFIX):-2].removesuffix("v6")
            if pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
                subprocess.run(["ip", "netns", "del", name], capture_output=True)


@pytest.fixture(scope="module")
def hosts():
    _remove_stale()
    prefix = f"{PREFIX}{os.getpid()}h"
    try:
        _script(prefix, "up")
        _script(prefix, "up")  # idempotent
        yield prefix
    finally:
        _script(prefix, "down", check=False)
        left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert prefix not in left, f"two-hosts.sh down left namespaces behind:\n{left}"


@pytest.fixture(scope="module")
def hosts6():
    """Two IPv6-only hosts (fd77::1 and fd77::2, no IPv4 address but loopback's)."""
    _remove_stale()
    prefix = f"{PREFIX}{os.getpid()}v6h"
    try:
        _script(prefix, "up", ipv6=True)
        yield prefix
    finally:
        _script(prefix, "down", check=False, ipv6=True)
        left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert prefix not in left, f"two-hosts.sh down left namespaces behind:\n{left}"


class TwoHostRun(_harness.WorkerRun):
    """A WorkerRun whose ranks 0, 1 run in host 0 and 2, 3 in host 1, each as
    `two-hosts.sh run I python two_hosts_worker.py ...` (which execs, so the harness
    kills the rank itself)."""

    def __init__(self, prefix: str, report_dir: str, args: list[str], extra_env: dict | None = None,
                 during=None, per_host: int = 2, host_env: list[dict] | None = None, master_addr: str = "10.77.0.1"):
        ws = 2 * per_host
        self.worker, self.world_size, self.report_dir = "two_hosts_worker.py", ws, report_dir
        port = self.port = _harness.free_port()
        argvs, envs = [], []
        for rank in range(ws):
            argvs.append([SCRIPT, "run", str(rank // per_host),
                          *_harness.worker_argv("two_hosts_worker.py", report_dir, *args)])
            envs.append(_harness.rank_env(rank, ws, port, extra=dict(
                MASTER_ADDR=master_addr, LOCAL_RANK=str(rank % per_host), LOCAL_WORLD_SIZE=str(per_host),
                GONCCL_2H_PREFIX=prefix, GONCCL_SOCKET_IFNAME="=gnc", GLOO_SOCKET_IFNAME="gnc",
                GONCCL_SOCKET_NTHREADS="1", GONCCL_NSOCKS_PERTHREAD="2",
                GONCCL_DEBUG="INFO", GONCCL_DEBUG_SUBSYS="INIT,NET") | (extra_env or {})
                | (host_env[rank // per_host] if host_env else {})))
        if during is not None:  # a thread that strikes while the ranks run
            import threading
            threading.Thread(target=during, daemon=True).start()
        self.run = _harness.run_processes(argvs, timeout=TIMEOUT, envs=envs, cwd=report_dir,
                                          names=[f"rank {r} (host {r // per_host})" for r in range(ws)], grace=15)
        self.reports = []
        for r in range(ws):
            try:
                with open(os.path.join(report_dir, f"report_rank{r}.json")) as f:
                    self.reports.append(json.load(f))
            except (OSError, ValueError):
                self.reports.append({"sections": {}, "order": [], "finished": False})


def _openssl(*args: str, cwd: str) -> None:
    res = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, f"openssl {' '.join(args)} failed:\n{res.stderr}"


@pytest.fixture(scope="module")
def tls_env(tmp_path_factory) -> list[dict]:
    """A CA and one certificate per host (CN host0, host1), made with the openssl CLI
    as docs/security.md tells users to; the GONCCL_TLS environment of each host."""
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command to make certificates")
    d = str(tmp_path_factory.mktemp("tls"))
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    _openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "1", "-subj", "/CN=test CA", cwd=d)
    envs = []
    for h in (0, 1):
        _openssl("req", *ec, "-keyout", f"host{h}.key", "-out", f"host{h}.csr", "-subj", f"/CN=host{h}", cwd=d)
        _openssl("x509", "-req", "-in", f"host{h}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                 "-days", "1", "-out", f"host{h}.pem", cwd=d)
        envs.append(dict(GONCCL_TLS="1", GONCCL_TLS_CERT=os.path.join(d, f"host{h}.pem"),
                         GONCCL_TLS_KEY=os.path.join(d, f"host{h}.key"), GONCCL_TLS_CA=os.path.join(d, "ca.pem")))
    return envs


@pytest.mark.timeout(TIMEOUT + 60)
@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
def test_collectives_across_two_hosts(hosts, tmp_path, request, tls):
    host_env = request.getfixturevalue("tls_env") if tls else None
    wr = TwoHostRun(hosts, str(tmp_path), ["collectives"], host_env=host_env)
    for name in ("all_reduce", "all_gather", "send_recv", "broadcast"):
        wr.section(name)
    wr.run.assert_ok(f"2 hosts x 2 ranks: collectives{' over TLS' if tls else ''}")
    log0 = wr.run.procs[0].stderr
    assert "1:shm(" in log0 and "2:tcp(" in log0 and "3:tcp(" in log0, (
        f"rank 0 should use shm to rank 1 and tcp to ranks 2, 3:\n{log0[-4000:]}")
    for peer in (2, 3):
        assert f"rank {peer}: 2 tcp connections" in log0, f"rank 0's link to rank {peer} is not striped:\n{log0[-4000:]}"
        on_tls = f"rank {peer}: TLS 1.3 on its 3 connections, peer certificate CN=host1" in log0
        assert on_tls == tls, f"rank 0's link to rank {peer}: TLS {'expected' if tls else 'unexpected'}:\n{log0[-4000:]}"
    if tls:
        assert f"TLS 1.3: certificate {host_env[0]['GONCCL_TLS_CERT']} (CN=host0" in log0, log0[-4000:]


@pytest.mark.timeout(TIMEOUT + 60)
@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
def test_collectives_across_two_ipv6_hosts(hosts6, tmp_path, request, tls):
    """The collectives on IPv6-only hosts: torch's store, gonccl's bootstrap, links and
    TLS all over fd77::/64. Plain, the interface is found without GONCCL_SOCKET_IFNAME
    (the first up one but loopback, and its global address)."""
    host_env = request.getfixturevalue("tls_env") if tls else None
    extra = {} if tls else {"GONCCL_SOCKET_IFNAME": ""}
    wr = TwoHostRun(hosts6, str(tmp_path), ["collectives"], host_env=host_env, master_addr="fd77::1", extra_env=extra)
    for name in ("all_reduce", "all_gather", "send_recv", "broadcast"):
        wr.section(name)
    wr.run.assert_ok(f"2 IPv6-only hosts x 2 ranks: collectives{' over TLS' if tls else ''}")
    for r in range(4):
        log = wr.run.procs[r].stderr
        assert f"interface gnc:fd77::{r // 2 + 1} port" in log, f"rank {r} is not on gnc's IPv6 address:\n{log[-4000:]}"
    log0 = wr.run.procs[0].stderr
    assert "1:shm(" in log0 and "2:tcp(" in log0 and "3:tcp(" in log0, log0[-4000:]
    if tls:
        assert "rank 2: TLS 1.3 on its 3 connections, peer certificate CN=host1" in log0, log0[-4000:]


@pytest.mark.timeout(TIMEOUT + 60)
@pytest.mark.parametrize("per_host,algo", [(1, ""), (2, "allreduce:hier"), (3, "allreduce:hier")])
def test_hierarchical_all_reduce_across_two_hosts(hosts, tmp_path, per_host, algo):
    """all_reduce (sum and avg, 1 to ~1M elements) on 2 hosts x 1-3 ranks against plain
    torch: with several ranks per host through the hierarchical algorithm (forced, and
    named in the tuning log); with one, the model must not pick it."""
    wr = TwoHostRun(hosts, str(tmp_path), ["all_reduce"], per_host=per_host,
                    extra_env=dict(GONCCL_ALGO=algo, GONCCL_DEBUG_SUBSYS="INIT,NET,TUNING"))
    wr.section("all_reduce")
    wr.run.assert_ok(f"2 hosts x {per_host} ranks: all_reduce")
    log0 = wr.run.procs[0].stderr
    if algo:
        assert ": hier [" in log0, f"rank 0 did not run the hierarchical all_reduce:\n{log0[-4000:]}"
    else:
        assert ": hier [" not in log0, f"the model picked hier with one rank per host:\n{log0[-4000:]}"


@pytest.mark.timeout(TIMEOUT + 60)
def test_windows_across_two_hosts(hosts, tmp_path):
    import torch

    if tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]) < (2, 15):
        pytest.skip("one-sided windows came in torch 2.15")
    wr = TwoHostRun(hosts, str(tmp_path), ["windows"])
    for name in ("put_signal", "map_remote", "async_all_to_all", "bad_input", "wait_timeout", "deregister"):
        wr.section(name)
    wr.run.assert_ok("2 hosts x 2 ranks: one-sided windows")


@pytest.mark.timeout(TIMEOUT + 60)
def test_ddp_example_across_two_hosts(hosts, tmp_path):
    example = os.path.join(_harness.EXAMPLES_DIR, "ddp_example.py")
    wr = TwoHostRun(hosts, str(tmp_path), ["ddp", example, "3", "512"])
    wr.section("run_example")
    wr.section("checksums")
    wr.run.assert_ok("2 hosts x 2 ranks: ddp_example")
    assert os.path.isfile(tmp_path / "trace_ddp_example.json")


@pytest.mark.timeout(TIMEOUT + 60)
def test_port_range_across_two_hosts(hosts, tmp_path):
    """GONCCL_PORT_RANGE of 8 ports on each host: while 2 hosts x 2 ranks run
    all_reduce, every TCP port listening in either namespace (sampled with ss) is one
    of the range, but torch's store on host 0; each rank's INIT log names its port."""
    import threading
    import time

    lo, hi = 29600, 29607
    seen: dict[int, set[int]] = {0: set(), 1: set()}
    done = threading.Event()

    def sample():
        while not done.is_set():
            for h in (0, 1):
                out = subprocess.run(["ip", "netns", "exec", f"{hosts}{h}", "ss", "-ltnH"],
                                     capture_output=True, text=True).stdout
                for line in out.splitlines():
                    fields = line.split()
                    if len(fields) >= 4:
                        seen[h].add(int(fields[3].rsplit(":", 1)[1]))
            time.sleep(0.1)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        wr = TwoHostRun(hosts, str(tmp_path), ["all_reduce"], extra_env=dict(GONCCL_PORT_RANGE=f"{lo}-{hi}"))
    finally:
        done.set()
        sampler.join(timeout=10)
    wr.section("all_reduce")
    wr.run.assert_ok("2 hosts x 2 ranks in a port range: all_reduce")
    for r in range(4):
        log = wr.run.procs[r].stderr
        m = re.search(r"init done in \S+; interface \S+ port (\d+);", log)
        assert m and lo <= int(m.group(1)) <= hi, f"rank {r}'s INIT log names no port in {lo}-{hi}:\n{log[-4000:]}"
    outside = {h: sorted(p for p in seen[h] - {wr.port} if not lo <= p <= hi) for h in (0, 1)}
    assert outside == {0: [], 1: []}, f"listening outside {lo}-{hi}: {outside} (seen: {seen})"
    assert len(seen[0] - {wr.port}) >= 2 and len(seen[1]) >= 2, f"ss saw too few listeners: {seen}"


def _strike(report_dir: str, action) -> None:
    """Waits for the loop to run, then records the time and runs action."""
    import time
    started = os.path.join(report_dir, "started")
    deadline = time.time() + 40
    while not os.path.exists(started) and time.time() < deadline:
        time.sleep(0.1)
    if not os.path.exists(started):
        return
    with open(os.path.join(report_dir, "fault_at"), "w") as f:
        f.write(repr(time.time()))
    action()


def _host1_pids(prefix: str) -> list[int]:
    out = subprocess.run(["ip", "netns", "pids", f"{prefix}1"], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


@pytest.mark.timeout(TIMEOUT + 60)
@pytest.mark.parametrize("how", ["cut_link", "kill_host", "kill_host_tls"])
def test_fault_across_two_hosts(hosts, tmp_path, request, how):
    report_dir = str(tmp_path)
    host_env = request.getfixturevalue("tls_env") if how.endswith("_tls") else None
    how = how.removesuffix("_tls")

    def cut():
        subprocess.run(["ip", "netns", "exec", f"{hosts}1", "ip", "link", "set", "gnc", "down"], check=True)

    def kill():
        for pid in _host1_pids(hosts):
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass

    wr = TwoHostRun(hosts, report_dir, ["fault"], extra_env={"GONCCL_HEARTBEAT_TIMEOUT_MS": "5000"},
                    during=lambda: _strike(report_dir, cut if how == "cut_link" else kill), host_env=host_env)
    try:
        assert os.path.exists(os.path.join(report_dir, "fault_at")), f"the loop never started:\n{wr.run.describe()}"
        if host_env:
            assert "TLS 1.3 on its 3 connections, peer certificate CN=host1" in wr.run.procs[0].stderr, (
                f"rank 0's links to host 1 are not TLS:\n{wr.run.procs[0].stderr[-4000:]}")
        survivors = [0, 1, 2, 3] if how == "cut_link" else [0, 1]
        for r in survivors:
            sec = wr.reports[r]["sections"].get("fault")
            assert sec is not None, f"rank {r} recorded nothing:\n{wr.run.describe()}"
            err = sec["data"].get("error")
            assert err, f"rank {r}: no error after the fault:\n{wr.run.describe()}"
            assert err["type"] == "DistBackendError", err
            assert err["after_fault_s"] is not None and err["after_fault_s"] < 30, err
            other = (2, 3) if r < 2 else (0, 1)
            assert any(f"rank {o}" in err["message"] for o in other), f"rank {r} does not name the other host: {err}"
            assert "gone: rank" in err["message"], f"rank {r} does not say which ranks are gone: {err}"
            assert not wr.run.procs[r].killed, f"rank {r} had to be killed:\n{wr.run.describe()}"
    finally:
        subprocess.run(["ip", "netns", "exec", f"{hosts}1", "ip", "link", "set", "gnc", "up"], capture_output=True)

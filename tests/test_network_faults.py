"""Network faults between two hosts (network namespaces, scripts/two-hosts.sh), 2 hosts x
2 ranks running a mixed loop of all_reduce, all_gather, broadcast and send/recv across
the hosts, every result checked against plain torch (workers/two_hosts_worker.py
chaos):

* resets: the link between the hosts goes down for 3 s, three times, and during each
  cut the TCP connections are reset (`ss -K`: in host 1, in host 0, then in both, as a
  middlebox, a conntrack flush or a NIC reset would): every result exact, no error,
  and the INFO log shows the breaks and the resumes;
* past the retry window: the link goes down with its connections reset and stays
  down longer than GONCCL_LINK_RETRY_MS: every rank fails, naming a rank of the other
  host, within the bound;
* a quiet outage: the link goes down for 12 s and nothing is reset (packets are only
  lost, as when a switch reboots), under GONCCL_LINK_RETRY_MS=20000: the sessions see
  the silence (TCP_USER_TIMEOUT) and re-dial, and the loop goes on within 2 s of the
  link coming back, every result exact; a quiet outage that outlasts the window (the
  heartbeat set far above it): every rank fails, naming a rank of the other host, soon
  after the window closes;
* a reset under TLS: resumed, and the resumed connections are TLS with the same peer
  certificate (the log says so);
* a slow link: a relay of our own (scripts/netfault-relay.py, one per host, each taking
  its host's packets to the other through a TUN device) adds 20 ms +- 10 ms each way and
  a 1 s stall every 4 s, and tbf caps the veth at 100 Mbit/s: exact, and the slowdown is
  printed;
* a corrupting relay (one bit of a TCP payload flipped every 3,000 packets, the TCP
  checksum fixed): with GONCCL_CHECKSUM=1 no wrong result reaches the caller and the log
  shows the caught records;
* a stopped rank: one rank of host 1 is SIGSTOPped for 3 s (below the heartbeat
  timeout), then continued: the loop goes on, exact;
* with GONCCL_CHAOS_ALL=1 only (a demonstration, not a check): the corrupting relay
  without checksums; what happens is printed (wrong results, no error).

Each case is bounded (the loop ends when the test says, or after its own limit; the
harness kills every rank at its timeout). Needs root and `ip netns`; skipped
otherwise, like tests/test_two_hosts.py, whose harness this uses.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest

import _harness

from test_two_hosts import SCRIPT, TIMEOUT, TwoHostRun, _host1_pids, _strike, pytestmark  # noqa: F401
from test_two_hosts import hosts, tls_env  # noqa: F401 (the fixtures, used by name)

RELAY = os.path.join(os.path.dirname(SCRIPT), "netfault-relay.py")
LONG = os.environ.get("GONCCL_CHAOS_ALL") == "1"


def _ns(prefix: str, host: int, *cmd: str) -> None:
    subprocess.run(["ip", "netns", "exec", f"{prefix}{host}", *cmd], check=True, capture_output=True, timeout=30)


def _link(prefix: str, up: bool) -> None:
    _ns(prefix, 1, "ip", "link", "set", "gnc", "up" if up else "down")


def _reset(prefix: str, host: int) -> None:
    """Resets every TCP connection of host to the other host (ss -K: the kernel drops
    them and answers with a RST, lost while the link is down)."""
    _ns(prefix, host, "ss", "-K", "dst", f"10.77.0.{2 - host}")


def _stop(report_dir: str) -> None:
    with open(os.path.join(report_dir, "stop"), "w") as f:
        f.write("1")


def _results(wr: TwoHostRun) -> list[dict]:
    out = []
    for r, rep in enumerate(wr.reports):
        sec = rep["sections"].get("chaos")
        assert sec is not None, f"rank {r} recorded nothing:\n{wr.run.describe()}"
        out.append(sec["data"]["result"])
    return out


def _assert_exact(wr: TwoHostRun, what: str) -> list[dict]:
    res = _results(wr)
    for r, x in enumerate(res):
        assert x["error"] is None, f"{what}: rank {r} failed: {x['error']}\n{wr.run.describe()}"
        assert not x["wrong"], f"{what}: rank {r} got wrong results: {x['wrong']}"
        assert x["iterations"] > 3, f"{what}: rank {r} ran {x['iterations']} iterations"
    wr.run.assert_ok(what)
    return res


def _summary(what: str, res: list[dict]) -> None:
    x = res[0]
    print(f"\n{what}: {x['iterations']} iterations in {x['seconds']:.1f} s, slowest {x['slowest_s']:.2f} s", flush=True)


@pytest.mark.timeout(TIMEOUT + 60)
def test_resets_during_cuts_are_survived(hosts, tmp_path):  # noqa: F811
    report_dir = str(tmp_path)

    def cuts():
        for host in (1, 0, None):  # None: both hosts reset their connections
            _link(hosts, False)
            time.sleep(0.3)
            for h in (0, 1) if host is None else (host,):
                _reset(hosts, h)
            time.sleep(2.7)
            _link(hosts, True)
            time.sleep(1.5)
        _stop(report_dir)

    try:
        wr = TwoHostRun(hosts, report_dir, ["chaos", "120"], during=lambda: _strike(report_dir, cuts))
    finally:
        _link(hosts, True)
    res = _assert_exact(wr, "3 cuts of 3 s with connection resets")
    _summary("resets", res)
    logs = [p.stderr for p in wr.run.procs]
    for r in (0, 1, 2, 3):
        assert re.search(r"link to rank \d \(channel \d+\) resumed after \d", logs[r]), (
            f"rank {r} logged no resume:\n{logs[r][-4000:]}")
        assert re.search(r"link to rank \d \(channel \d+\) broke", logs[r]), f"rank {r} logged no break:\n{logs[r][-4000:]}"


@pytest.mark.timeout(TIMEOUT + 60)
def test_link_down_past_retry_window_names_the_other_host(hosts, tmp_path):  # noqa: F811
    report_dir = str(tmp_path)

    def cut():
        _link(hosts, False)
        time.sleep(0.3)
        _reset(hosts, 0)
        _reset(hosts, 1)

    env = {"GONCCL_LINK_RETRY_MS": "2000", "GONCCL_HEARTBEAT_TIMEOUT_MS": "5000"}
    try:
        wr = TwoHostRun(hosts, report_dir, ["chaos", "120"], extra_env=env, during=lambda: _strike(report_dir, cut))
    finally:
        _link(hosts, True)
    for r, x in enumerate(_results(wr)):
        err = x["error"]
        assert err, f"rank {r}: no error with the link down for good:\n{wr.run.describe()}"
        assert err["type"] == "DistBackendError", err
        assert err["after_fault_s"] is not None and err["after_fault_s"] < 20, err
        other = (2, 3) if r < 2 else (0, 1)
        assert any(f"rank {o}" in err["message"] for o in other), f"rank {r} does not name the other host: {err}"
        assert not wr.run.procs[r].killed, f"rank {r} had to be killed:\n{wr.run.describe()}"
        print(f"rank {r}: failed {err['after_fault_s']:.1f} s after the cut", flush=True)


def _resumed_after(res: list[dict], up_at: float) -> float:
    """The most, over the ranks, that the iteration running when the link came back at
    up_at went on after it."""
    worst = 0.0
    for x in res:
        for t0, took in x["times"]:
            if t0 <= up_at <= t0 + took:
                worst = max(worst, t0 + took - up_at)
    return worst


@pytest.mark.timeout(TIMEOUT + 60)
def test_quiet_outage_resumes_on_time(hosts, tmp_path):  # noqa: F811
    report_dir = str(tmp_path)
    up = []

    def outage():
        _link(hosts, False)
        time.sleep(12)
        _link(hosts, True)
        up.append(time.time())
        time.sleep(4)
        _stop(report_dir)

    env = {"GONCCL_LINK_RETRY_MS": "20000"}
    try:
        wr = TwoHostRun(hosts, report_dir, ["chaos", "120"], extra_env=env, during=lambda: _strike(report_dir, outage))
    finally:
        _link(hosts, True)
    res = _assert_exact(wr, "a quiet outage of 12 s")
    assert up, "the outage did not run"
    after = _resumed_after(res, up[0])
    print(f"\nquiet outage of 12 s: the loop went on {after:.2f} s after the link came back", flush=True)
    assert max(x["slowest_s"] for x in res) > 11, f"the outage did not hold the loop up: {res[0]['slowest_s']}"
    assert after < _harness.scaled(2.0), f"the loop went on {after:.2f} s after the link came back (want < 2 s)"
    logs = [p.stderr for p in wr.run.procs]
    assert any(re.search(r"link to rank \d \(channel \d+\) broke: the link went quiet", log) for log in logs), (
        "no session saw the silence:\n" + logs[0][-4000:])


@pytest.mark.timeout(TIMEOUT + 60)
def test_quiet_outage_past_window_names_the_other_host(hosts, tmp_path):  # noqa: F811
    report_dir = str(tmp_path)

    env = {"GONCCL_LINK_RETRY_MS": "3000", "GONCCL_HEARTBEAT_TIMEOUT_MS": "60000"}
    try:
        wr = TwoHostRun(hosts, report_dir, ["chaos", "120"], extra_env=env,
                        during=lambda: _strike(report_dir, lambda: _link(hosts, False)))
    finally:
        _link(hosts, True)
    for r, x in enumerate(_results(wr)):
        err = x["error"]
        assert err, f"rank {r}: no error with the link quiet for good:\n{wr.run.describe()}"
        assert err["type"] == "DistBackendError", err
        # 2 s of silence (tcp.QuietTimeout of a 3 s window), then the 3 s window
        assert err["after_fault_s"] is not None and err["after_fault_s"] < _harness.scaled(12), err
        other = (2, 3) if r < 2 else (0, 1)
        assert any(f"rank {o}" in err["message"] for o in other), f"rank {r} does not name the other host: {err}"
        assert not wr.run.procs[r].killed, f"rank {r} had to be killed:\n{wr.run.describe()}"
        print(f"rank {r}: failed {err['after_fault_s']:.1f} s after the link went quiet", flush=True)


@pytest.mark.timeout(TIMEOUT + 60)
def test_stopped_rank_is_waited_for(hosts, tmp_path):  # noqa: F811
    report_dir = str(tmp_path)

    def pause():
        pids = _host1_pids(hosts)  # the two-hosts.sh run of ranks 2 and 3 exec'd into python
        victim = max(pids)
        os.kill(victim, signal.SIGSTOP)
        time.sleep(3)
        os.kill(victim, signal.SIGCONT)
        time.sleep(2)
        _stop(report_dir)

    wr = TwoHostRun(hosts, report_dir, ["chaos", "120"], during=lambda: _strike(report_dir, pause))
    res = _assert_exact(wr, "a rank stopped for 3 s")
    assert max(x["slowest_s"] for x in res) > 2.5, f"the stop did not hold the loop up: {res}"
    _summary("SIGSTOP", res)


@pytest.mark.timeout(TIMEOUT + 60)
def test_reset_under_tls_resumes_over_tls(hosts, tmp_path, tls_env):  # noqa: F811
    report_dir = str(tmp_path)

    def cut():
        _link(hosts, False)
        time.sleep(0.3)
        _reset(hosts, 0)
        _reset(hosts, 1)
        time.sleep(1.7)
        _link(hosts, True)
        time.sleep(1.5)
        _stop(report_dir)

    try:
        wr = TwoHostRun(hosts, report_dir, ["chaos", "120"], host_env=tls_env, during=lambda: _strike(report_dir, cut))
    finally:
        _link(hosts, True)
    res = _assert_exact(wr, "a reset under TLS")
    _summary("TLS reset", res)
    log0 = wr.run.procs[0].stderr
    assert "TLS 1.3 on its 3 connections, peer certificate CN=host1" in log0, log0[-4000:]
    resumed = re.findall(r"link to rank [23] \(channel \d+\) resumed after .*", log0)
    assert resumed, f"rank 0 logged no resume:\n{log0[-4000:]}"
    for line in resumed:
        assert "TLS 1.3, peer certificate CN=host1" in line, f"not resumed over TLS with host 1's certificate: {line}"




class Relays:
    """scripts/netfault-relay.py in both hosts (each relays what its host sends), and
    optionally tbf on both ends of the veth; stop() ends them and returns their counts."""

    def __init__(self, prefix: str, args: list[str], tbf: str | None = None):
        self.prefix, self.tbf, self.procs = prefix, tbf, []
        for h in (0, 1):
            p = subprocess.Popen(["ip", "netns", "exec", f"{prefix}{h}", sys.executable, RELAY, "--host", str(h), *args],
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            self.procs.append(p)
            line = p.stdout.readline()
            assert "relay ready" in line, f"relay in host {h} did not start: {line}{p.stdout.read() if p.poll() else ''}"
        if tbf:
            for h in (0, 1):
                _ns(prefix, h, "tc", "qdisc", "replace", "dev", "gnc", "root", "tbf", "rate", tbf, "burst", "64kb",
                    "latency", "2s")

    def stop(self) -> list[str]:
        out = []
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
            try:
                out.append(p.communicate(timeout=10)[0].strip().splitlines()[-1])
            except subprocess.TimeoutExpired:
                p.kill()
                out.append("(killed)")
        if self.tbf:
            for h in (0, 1):
                subprocess.run(["ip", "netns", "exec", f"{self.prefix}{h}", "tc", "qdisc", "del", "dev", "gnc", "root"],
                               capture_output=True)
        return out


def _mean_iteration(res: list[dict], lo: float, hi: float) -> float:
    """Rank 0's mean iteration time over iterations that started in [lo, hi)."""
    ts = [d for t, d in res[0]["times"] if lo <= t < hi]
    return sum(ts) / len(ts) if ts else float("nan")


@pytest.mark.timeout(TIMEOUT + 60)
def test_slow_stalling_link_changes_no_result(hosts, tmp_path):  # noqa: F811
    """20 ms +- 10 ms each way, a 1 s stall every 4 s, tbf at 100 Mbit/s: exact; the
    slowdown against the same loop's iterations before the relays came in."""
    report_dir = str(tmp_path)
    relays: list[Relays] = []
    marks = {}

    def slow():
        time.sleep(4)
        marks["on"] = time.time()
        relays.append(Relays(hosts, ["--delay", "20", "--jitter", "10", "--stall-every", "4", "--stall", "1000"],
                             tbf="100mbit"))
        time.sleep(10)
        marks["off"] = time.time()
        _stop(report_dir)

    try:
        wr = TwoHostRun(hosts, report_dir, ["chaos", "120"], during=lambda: _strike(report_dir, slow))
    finally:
        counts = relays[0].stop() if relays else []
    res = _assert_exact(wr, "a slow, stalling, capped link")
    before = _mean_iteration(res, 0, marks["on"])
    during = _mean_iteration(res, marks["on"] + 0.5, marks["off"])
    print(f"\nslow link: iteration {before * 1000:.0f} ms before, {during * 1000:.0f} ms through the relays "
          f"({during / before:.1f}x); relays: {counts}", flush=True)
    assert during > before, "the relays slowed nothing: are the ranks' packets going through them?"


def _corrupt_run(hosts, tmp_path, checksum: bool):  # noqa: F811
    report_dir = str(tmp_path)
    relays: list[Relays] = []

    def corrupt():
        time.sleep(1)
        relays.append(Relays(hosts, ["--corrupt-every", "3000"]))
        time.sleep(10)
        _stop(report_dir)

    env = {"GONCCL_CHECKSUM": "1" if checksum else "0", "GONCCL_DEBUG_SUBSYS": "INIT,NET"}
    try:
        wr = TwoHostRun(hosts, report_dir, ["chaos", "120"], extra_env=env, during=lambda: _strike(report_dir, corrupt))
    finally:
        counts = relays[0].stop() if relays else []
    return wr, counts


@pytest.mark.timeout(TIMEOUT + 60)
def test_corrupted_frames_never_reach_the_caller_with_checksums(hosts, tmp_path):  # noqa: F811
    wr, counts = _corrupt_run(hosts, tmp_path, True)
    flipped = sum(int(re.search(r"flipped=(\d+)", c).group(1)) for c in counts if "flipped=" in c)
    print(f"\ncorrupting relay with checksums: {counts}", flush=True)
    res = _results(wr)
    errors = {r: x["error"]["message"] for r, x in enumerate(res) if x["error"] is not None}
    if errors:  # what the links did, shown with the failure
        for r, p in enumerate(wr.run.procs):
            for line in p.stderr.splitlines():
                if " NET " in line or " WARN " in line:
                    print(f"rank {r}: {line[:400]}")
    for r, x in enumerate(res):
        assert not x["wrong"], f"rank {r}: a corrupted frame reached the caller: {x['wrong']}"
        if x["error"] is not None:  # allowed only as the named checksum failure
            assert "checksum" in x["error"]["message"], f"rank {r} failed; every rank's error: {errors}"
    assert flipped > 0, f"the relay flipped nothing: {counts}"
    logs = "".join(p.stderr for p in wr.run.procs)
    assert "frame checksum (CRC32C) mismatch" in logs, "no rank caught a corrupted record"
    assert all(x["error"] is None for x in res), [x["error"] for x in res]


# The longer case is defined only when asked for (GONCCL_CHAOS_ALL=1): a skip of a test
# that needs netns fails the run where CI requires netns (tests/conftest.py).
if LONG:

    @pytest.mark.timeout(TIMEOUT + 60)
    def test_corrupted_frames_without_checksums(hosts, tmp_path):  # noqa: F811
        """What happens without checksums: reported, not asserted either way beyond that the
        relay did corrupt frames."""
        wr, counts = _corrupt_run(hosts, tmp_path, False)
        res = _results(wr)
        wrong = sum(len(x["wrong"]) for x in res)
        errors = [x["error"]["message"][:200] for x in res if x["error"]]
        print(f"\ncorrupting relay without checksums: {counts}; {wrong} iterations with wrong results; errors: {errors}",
              flush=True)
        assert any("flipped=" in c and not c.endswith("flipped=0") for c in counts), counts

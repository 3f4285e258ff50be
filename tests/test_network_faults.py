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
* a stopped rank: one rank of host 1 is SIGSTOPped for 3 s (below the heartbeat
  timeout), then continued: the loop goes on, exact;
* a reset under TLS: resumed, and the resumed connections are TLS with the same peer
  certificate (the log says so).

Each case is bounded (the loop ends when the test says, or after its own limit; the
harness kills every rank at its timeout). Needs root and `ip netns`; skipped
otherwise, like tests/test_two_hosts.py, whose harness this uses.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time

import pytest

from test_two_hosts import TIMEOUT, TwoHostRun, _host1_pids, _strike, hosts, pytestmark, tls_env  # noqa: F401


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
def test_resets_during_cuts_are_survived(hosts, tmp_path):
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
def test_link_down_past_retry_window_names_the_other_host(hosts, tmp_path):
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


@pytest.mark.timeout(TIMEOUT + 60)
def test_stopped_rank_is_waited_for(hosts, tmp_path):
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

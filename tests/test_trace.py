"""The flight recorder finds the rank that holds a job up.

Three ranks run three all_reduces on a group with a 3 s timeout; then rank 2 skips the
fourth, so ranks 0 and 1 time out in it. With GONCCL_TRACE_DUMP_DIR set, every rank
writes its recorder there, and `python -m gonccl.trace DIR` must name rank 2 as behind
(its last op completed) and ranks 0,1 as stuck in that all_reduce. The analysis is
also checked on hand-made files: a mismatch, a missing rank, a clean run.
"""

import json
import os
import re
import subprocess
import sys

import pytest

import _harness

from gonccl import trace


@pytest.mark.timeout(240)
def test_trace_names_the_lagging_rank(tmp_path):
    dump = tmp_path / "traces"
    run = _harness.run_ranks(
        lambda r: _harness.worker_argv("trace_worker.py", "2"),
        3,
        timeout=180,
        env={"GONCCL_TRACE_DUMP_DIR": str(dump)},
        cwd=str(tmp_path),
    )
    run.assert_ok("trace_worker.py on 3 ranks")

    files = sorted(os.listdir(dump))
    by_comm = {}
    for name in files:
        with open(dump / name) as f:
            d = json.load(f)
        assert name == f"gonccl_trace_{d['comm']}_rank{d['rank']}_pid{d['pid']}.json"
        by_comm.setdefault(d["comm"], {})[d["rank"]] = d
    traced = [c for c, ranks in by_comm.items() if any(len(d["ops"]) >= 3 for d in ranks.values())]
    assert len(traced) == 1, files
    ranks = by_comm[traced[0]]
    assert sorted(ranks) == [0, 1, 2]
    for r in (0, 1):
        last = ranks[r]["ops"][-1]
        assert (last["op"], last["dtype"], last["count"], last["state"]) == ("all_reduce", "float32", 1024, "failed")
        assert last["error"], last
        assert last["started"] is not None and last["finished"] >= last["started"]
    assert ranks[2]["ops"][-1]["state"] == "completed"
    assert ranks[2]["ops"][-1]["seq"] == ranks[0]["ops"][-1]["seq"] - 1

    out = subprocess.run([sys.executable, "-m", "gonccl.trace", str(dump)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    m = re.search(r"rank 2 is behind: its last op is seq (\d+) all_reduce \(completed\); "
                  r"ranks 0,1 are stuck in seq (\d+) all_reduce\(float32, 1024\)", out.stdout)
    assert m, out.stdout
    assert int(m.group(2)) == int(m.group(1)) + 1 == ranks[0]["ops"][-1]["seq"], out.stdout
    assert "timed out" in out.stdout.lower() or "lost rank" in out.stdout, out.stdout


def _op(seq, op="all_reduce", dtype="float32", count=1024, state="completed", error="", path=None):
    o = {"seq": seq, "op": op, "dtype": dtype, "count": count, "bytes": 4 * count, "root": -1,
         "algo": "direct" if path == "device" else "ring", "state": state, "enqueued": 1.0, "started": 1.0,
         "finished": 2.0, "error": error}
    if path is not None:  # files of before the device path was recorded have no "path"
        o["path"] = path
    return o


def _write(d, comm, rank, nranks, ops):
    with open(os.path.join(d, f"gonccl_trace_{comm}_rank{rank}_pid{100 + rank}.json"), "w") as f:
        json.dump({"version": 1, "comm": comm, "rank": rank, "nranks": nranks, "pid": 100 + rank, "host": "h",
                   "reason": "test", "dumped_at": 5.0, "ops": ops}, f)


def test_trace_analysis_on_handmade_files(tmp_path):
    d = str(tmp_path)
    # Communicator a: rank 1 called a broadcast where rank 0 called an all_reduce.
    _write(d, "a", 0, 2, [_op(1), _op(2, state="failed", error="mismatch ...")])
    _write(d, "a", 1, 2, [_op(1), _op(2, op="broadcast", count=8, state="failed", error="mismatch ...")])
    # Communicator b: rank 3 left no file, ranks 0-2 are stuck at seq 7.
    for r in range(3):
        _write(d, "b", r, 4, [_op(6), _op(7, state="started")])
    # Communicator c: all is well.
    for r in range(2):
        _write(d, "c", r, 2, [_op(1), _op(2)])
    text, found = trace.report(d)
    assert found
    assert "ranks disagree at seq 2: rank 0 called all_reduce(float32, 1024); rank 1 called broadcast(float32, 8)" in text
    # rank 3 is behind (the others wait for it in seq 7), said first, not "no rank is behind"
    b = text[text.index("communicator b"):text.index("communicator c")]
    findings = [line.strip()[3:] for line in b.splitlines() if line.strip().startswith("=>")]
    assert findings[0].startswith("rank 3 left no trace file and is most likely behind: ranks 0,1,2 are stuck "
                                  "in seq 7 all_reduce(float32, 1024) waiting"), b
    assert "no rank is behind" not in b, b
    assert "every rank completed every recorded operation (up to seq 2)" in text
    assert trace.main([str(tmp_path / "nothing-here")]) == 1


def test_trace_names_the_rank_without_a_file_that_errors_name(tmp_path):
    """The usual hang after a launcher killed the late rank: rank 0's error names rank 1,
    which left no file; the tool names rank 1 first, and cites the error."""
    d = str(tmp_path)
    _write(d, "a", 0, 2, [_op(1), _op(2), _op(3, state="failed", error="all_reduce #3 (float32 x 4, sum): Timed out "
                                                                      "after 3000 ms waiting for rank 1")])
    text, _ = trace.report(d)
    findings = [line.strip()[3:] for line in text.splitlines() if line.strip().startswith("=>")]
    assert findings[0] == ("rank 1 left no trace file and is most likely behind: rank 0 is stuck in seq 3 "
                           "all_reduce(float32, 1024) waiting; rank 0's error names it (it never reached seq 3, "
                           "or hung outside gonccl, or was killed before it could write one)"), text
    assert "no rank is behind" not in text, text
    assert text.count("rank 1 left no trace file") == 1, text


def test_trace_shows_a_chunked_collective(tmp_path):
    """A collective the staged path ran in chunks is one entry (seq to last_seq): the
    table names the caller's collective and its chunks."""
    d = str(tmp_path)
    group = _op(5, count=300001, state="started")
    group.update(chunks=64, last_seq=133)
    for r in range(2):
        _write(d, "p", r, 2, [_op(4), group])
    text, _ = trace.report(d)
    assert "5 all_reduce(float32, 300001) in 64 chunks (seq 5-133) [ring]  started" in text, text
    assert "ranks 0,1 are stuck in seq 5 all_reduce(float32, 300001) in 64 chunks (seq 5-133) (started)" in text, text


def test_trace_shows_the_device_path(tmp_path):
    """Device-path ops (their work enqueued on a CUDA stream) are marked in the table and
    the diagnosis: a "started" one is on the GPU and not finished by it."""
    d = str(tmp_path)
    # Rank 1's GPU never finished seq 5 (an all_reduce of the device path); rank 0's did,
    # and rank 0 went on to seq 6.
    _write(d, "g", 0, 2, [_op(4, path="host"), _op(5, path="device"), _op(6, path="device", state="started")])
    _write(d, "g", 1, 2, [_op(4, path="host"), _op(5, path="device", state="started")])
    text, found = trace.report(d)
    assert found
    assert "5 all_reduce(float32, 1024) [direct, device path]  started (on the GPU, not finished)" in text, text
    assert "6 all_reduce(float32, 1024) [direct, device path]  started (on the GPU, not finished)" in text, text
    assert "rank 0 is behind" not in text, text
    # Both ranks stuck on the GPU at one seq, the same op: no one is behind.
    _write(d, "h", 0, 2, [_op(1, path="device", state="started")])
    _write(d, "h", 1, 2, [_op(1, path="device", state="started")])
    text, _ = trace.report(d)
    assert ("ranks 0,1 are stuck in seq 1 all_reduce(float32, 1024) (started (on the GPU, not finished)) "
            "and no rank is behind") in text, text


def _p2p(op, peer, p2p_seq, after=0, state="completed", error=""):
    o = _op(after, op=op, count=256, state=state, error=error, path="device")
    o.update(peer=peer, p2p_seq=p2p_seq)
    return o


def test_trace_shows_device_send_recv(tmp_path):
    """The device path's sends and receives stay apart from the collectives (they do not
    take their sequence numbers), and each one not finished is named with its match on
    the peer: a receive not posted, or one that is itself stuck."""
    d = str(tmp_path)
    # A pipeline of 3 stages after all_reduce 1: rank 0 sent twice to rank 1, which
    # received once; rank 1's second receive was never posted. Rank 1's send to rank 2
    # is stuck with rank 2's receive, which failed at the release.
    _write(d, "pp", 0, 3, [_op(1, path="device"), _p2p("send", 1, 1, 1), _p2p("send", 1, 2, 1, state="started")])
    _write(d, "pp", 1, 3, [_op(1, path="device"), _p2p("recv", 0, 1, 1), _p2p("send", 2, 1, 1, state="started")])
    _write(d, "pp", 2, 3, [_op(1, path="device"), _p2p("recv", 1, 1, 1, state="failed", error="released: timed out")])
    comms = trace.load(d)
    assert [o["seq"] for o in comms["pp"][0].ops] == [1] and len(comms["pp"][0].p2p) == 2
    text, _ = trace.report(d)
    assert "every rank completed every recorded operation (up to seq 1)" in text, text
    assert ("rank 0 is stuck in send #2 to rank 1 (float32, 256) (started (on the GPU, not finished)); "
            "rank 1 never posted the matching recv (its last is #1)") in text, text
    assert ("rank 1 is stuck in send #1 to rank 2 (float32, 256) (started (on the GPU, not finished)); "
            "rank 2's recv #1 from rank 1 (float32, 256) is failed") in text, text
    assert "rank 2 is stuck in recv #1 from rank 1 (float32, 256) (failed); rank 1's send #1" in text, text
    assert text.rstrip().endswith(": released: timed out"), text


@pytest.mark.timeout(150)
def test_trace_names_the_rank_torchrun_terminated(tmp_path):
    """The usual torchrun hang: rank 1 is elsewhere when rank 0 times out in all_reduce
    #3, then gets SIGTERM. Rank 1 still writes its recorder, and `gonccl.trace` names
    it as behind, first."""
    dump = tmp_path / "traces"
    run = _harness.run_ranks(lambda r: _harness.worker_argv("first_error_worker.py", "sigterm_behind"), 2,
                             timeout=90, env={"GONCCL_TRACE_DUMP_DIR": str(dump)}, cwd=str(tmp_path))
    assert not run.timed_out, run.describe()
    assert "FIRST ERROR" in run.procs[0].stdout and "rank 1" in run.procs[0].stdout, run.describe()
    assert run.procs[1].returncode == -15, run.describe()  # it still dies of the SIGTERM
    names = os.listdir(dump)
    assert any("_rank1_" in n for n in names), (names, run.describe())
    text, found = trace.report(str(dump))
    assert found
    findings = [line.strip()[3:] for line in text.splitlines() if line.strip().startswith("=>")]
    assert findings[0].startswith("rank 1 is behind: its last op is seq 2 all_reduce"), text
    assert "no rank is behind" not in text, text


def test_trace_takes_a_refused_call_as_done(tmp_path):
    """A call a rank refused (its own check failed: Comm.Refuse) is no operation it can
    be stuck in: after every rank refused seq 2, a hang at seq 4 is still found at seq 4;
    and a call only rank 1 refused shows as such beside rank 0's failure."""
    d = str(tmp_path)
    refused = dict(state="refused", dtype="int8", count=0, error="refused here: all_reduce: bad dtype")
    for r in range(2):
        _write(d, "a", r, 2, [_op(1), _op(2, **refused), _op(3)] +
               ([_op(4, state="started")] if r == 0 else []))
    _write(d, "b", 0, 2, [_op(1), _op(2, op="all_gather", count=4, state="failed",
                                      error="rank 1 refused all_gather #2: all_gather: output tensor 0 has 5 elements")])
    _write(d, "b", 1, 2, [_op(1), _op(2, op="all_gather", **refused)])
    text, _ = trace.report(d)
    a = text[text.index("communicator a"):text.index("communicator b")]
    assert "rank 1 is behind: its last op is seq 3" in a, a
    assert "seq 2" not in a.split("=>", 1)[1], a
    b = text[text.index("communicator b"):]
    assert ("ranks disagree at seq 2: rank 0 called all_gather(float32, 4); "
            "rank 1 called all_gather, refused by this rank's own check") in b, b
    assert "rank 0 failed: rank 1 refused all_gather #2" in b, b

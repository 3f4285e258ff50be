"""Failures on the device path (GONCCL_DEVICE_PATH=1) through the C ABI, against the
fake CUDA driver: tests/capi/cuda_devfault_test.c, one process per rank.

A count mismatch makes every rank's goncclCommGetAsyncError turn goncclMismatch with a
message naming the other rank and the count; a rank SIGKILLed with an all_reduce on its
stream makes the survivors' turn goncclRemoteError naming it; goncclCommAbort releases
a stream waiting on a peer that never came; a rank SIGKILLed before sending what a peer's
goncclRecv waits for makes that peer's turn goncclRemoteError naming it; a send and its
receive of different sizes make every rank's turn goncclMismatch naming both. In every case the survivors' stream drains
(it is not left waiting on a flag) and the process exits by itself, well within the
harness's timeout, which kills every rank (a hang fails the test). Before the device
path's watcher (cuda/devfault.go) each case hung until that timeout.
"""

import json
import os

import pytest

import _harness
import test_cuda_capi as base
from gonccl import trace

SOURCE = os.path.join(_harness.TESTS_DIR, "capi", "cuda_devfault_test.c")
RUN_TIMEOUT = 60


@pytest.fixture(scope="module")
def devfault_binary(package_dir, tmp_path_factory):
    fake = base._build_fake(tmp_path_factory, "fakecuda_devfault", [])
    return fake, base._build_test(tmp_path_factory, SOURCE, fake, package_dir, [])


# A rank's released stream still runs the copies and kernels that read its peers'
# scratch, after a peer was killed or, once the ranks gave up, exited: the scratch is
# memory that outlives its maker (cuMemCreate, shared as a file descriptor), so those
# reads see memory that is there; the fake faults on any read of memory that went with a
# dead process (as legacy IPC memory goes with its exporter's context on a GPU).


def _run(devfault_binary, nranks, case, tmp_path, extra=None):
    fake, binary = devfault_binary
    env = base._env(fake, {"GONCCL_DEVICE_PATH": "1", **(extra or {})})
    id_file = str(tmp_path / "unique_id")
    return _harness.run_processes(
        [[binary, str(r), str(nranks), id_file, case] for r in range(nranks)],
        timeout=RUN_TIMEOUT,
        envs=[env] * nranks,
        cwd=str(tmp_path),
        names=[f"rank {r}" for r in range(nranks)],
        grace=RUN_TIMEOUT,
    )


@pytest.mark.timeout(RUN_TIMEOUT + 60)
def test_count_mismatch_names_rank_and_count(devfault_binary, tmp_path):
    run = _run(devfault_binary, 3, "count", tmp_path)
    run.assert_ok("a count mismatch on the device path")
    for r, proc in enumerate(run.procs):
        assert f"rank {r}: stream drained" in proc.stdout, proc.describe()
        # Every rank names the mismatch, seen by its own watcher or told by a peer's
        # ("rank N reports: ..."): none ends at the timeout.
        assert f"rank {r}: named the mismatch" in proc.stdout, proc.describe()
        assert "ranks called mismatched collectives" in proc.stdout, proc.describe()


@pytest.mark.timeout(RUN_TIMEOUT + 60)
def test_killed_rank_is_named(devfault_binary, tmp_path):
    run = _run(devfault_binary, 3, "kill", tmp_path)
    assert not run.timed_out, run.describe()
    victim = run.procs[2]
    assert victim.returncode != 0 and "enqueued, dying" in victim.stdout, victim.describe()
    for r, proc in enumerate(run.procs[:2]):
        assert proc.returncode == 0, proc.describe()
        assert "rank 2" in proc.stdout and f"rank {r}: stream drained" in proc.stdout, proc.describe()


@pytest.mark.timeout(RUN_TIMEOUT + 60)
def test_killed_sender_is_named(devfault_binary, tmp_path):
    # Before device-path send/recv were watched, the receiver's stream waited for ever.
    run = _run(devfault_binary, 2, "p2pkill", tmp_path)
    assert not run.timed_out, run.describe()
    victim = run.procs[1]
    assert victim.returncode != 0 and "enqueued, dying" in victim.stdout, victim.describe()
    proc = run.procs[0]
    assert proc.returncode == 0, proc.describe()
    assert "rank 1" in proc.stdout and "rank 0: stream drained" in proc.stdout, proc.describe()


@pytest.mark.timeout(RUN_TIMEOUT + 60)
@pytest.mark.parametrize("case", ["p2psize", "p2psizechunks", "a2avsize"])
def test_p2p_size_mismatch_names_both_sizes(devfault_binary, tmp_path, case):
    # Before the sizes were compared (core/devp2psize.go), "p2psize" handed rank 0
    # truncated data with no error at all, and "p2psizechunks" waited until the
    # communicator's timeout, which named no size; "a2avsize" (an alltoallv whose
    # sendcounts and recvcounts disagree) was as silent as "p2psize".
    run = _run(devfault_binary, 3, case, tmp_path)
    run.assert_ok(f"a send/recv size mismatch on the device path ({case})")
    for r, proc in enumerate(run.procs):
        assert f"rank {r}: named the sizes" in proc.stdout, proc.describe()
        assert f"rank {r}: stream drained" in proc.stdout, proc.describe()


@pytest.mark.timeout(RUN_TIMEOUT + 60)
def test_abort_releases_waiting_stream(devfault_binary, tmp_path):
    run = _run(devfault_binary, 2, "abort", tmp_path)
    run.assert_ok("goncclCommAbort with a device op waiting")
    assert "rank 0: stream drained after abort" in run.procs[0].stdout, run.procs[0].describe()


@pytest.mark.timeout(RUN_TIMEOUT + 60)
def test_stalled_send_in_flight_recorder(devfault_binary, tmp_path):
    """Rank 0's device-path send to rank 1, which never posts the receive: rank 0's
    flight recorder shows it on the GPU, not finished (a dump while it hangs), then
    failed once the watcher times it out (the dump at the failure and at abort), and
    python -m gonccl.trace names it and the missing receive."""
    dump = tmp_path / "trace"
    run = _run(devfault_binary, 2, "p2pstall", tmp_path, {"GONCCL_TRACE_DUMP_DIR": str(dump)})
    run.assert_ok("a send whose receive is never posted")
    assert "rank 0: send on the GPU, dumped" in run.procs[0].stdout, run.procs[0].describe()
    with open(tmp_path / "p2pstall_rank0.json") as f:
        during = [o for o in json.load(f)["ops"] if trace.is_p2p(o)]
    assert len(during) == 1, during
    o = during[0]
    assert (o["op"], o["peer"], o["p2p_seq"], o["dtype"], o["count"], o["bytes"]) == (
        "send", 1, 1, "float32", 2 << 20, 8 << 20), o
    assert (o["path"], o["state"], o["finished"]) == ("device", "started", None), o
    ranks = trace.load(str(dump))
    assert len(ranks) == 1, ranks
    ranks = next(iter(ranks.values()))
    assert sorted(ranks) == [0, 1], ranks
    assert ranks[1].p2p == [], ranks[1].p2p
    (o,) = ranks[0].p2p
    assert (o["op"], o["peer"], o["p2p_seq"], o["state"]) == ("send", 1, 1, "failed"), o
    assert o["error"].startswith("released: ") and "rank 1" in o["error"], o
    text, _ = trace.report(str(dump))
    assert "rank 0 is stuck in send #1 to rank 1 (float32, 2097152)" in text, text
    assert "rank 1 never posted the matching recv (none recorded)" in text, text

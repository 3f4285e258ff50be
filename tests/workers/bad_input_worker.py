"""One rank of the bad-input test (2 ranks): every misuse raises a clear Python
exception at once, and nothing hangs.

usage: bad_input_worker.py REPORT_DIR        (env: RANK, WORLD_SIZE=2, MASTER_*)

Local misuse (wrong layout, dtype, sizes, unsupported op) must raise on the calling
rank before anything is sent, so the ranks stay in step and the process group keeps
working. Mismatches between ranks (sizes, dtypes, collectives) must fail on every rank
within seconds with a DistBackendError that says what went wrong, far sooner than the
process group's 30 s timeout; a collective the peer never joins fails when the group's
timeout passes. Near the end the default group is broken by a mismatch and main returns
without destroying it: the process must still exit promptly (the test checks how long
exiting took). Last, rank 1 exits while rank 0 waits on a collective with it: rank 0
must get an error naming rank 1, not wait for the timeout.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
import warnings
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.distributed import ReduceOp

from _common import Checker, scaled

RANK = int(os.environ["RANK"])
WS = int(os.environ["WORLD_SIZE"])
PEER = 1 - RANK
CK: Checker
G_DEAD = None
PG_TIMEOUT = scaled(40)  # seconds
FAST = scaled(15)  # seconds: an error "within a few seconds" must come sooner than this


def expect_error(what: str, fn, *, types=(Exception,), words=(), any_words=(), fast: float = FAST) -> str:
    """Runs fn, which must raise one of `types` promptly with a message containing
    every string in `words` (case-insensitive) and at least one of `any_words`.
    Records and returns the message."""
    t0 = time.monotonic()
    try:
        fn()
    except Exception as e:  # noqa: BLE001
        took = time.monotonic() - t0
        msg = f"{type(e).__name__}: {e}"
        low = str(e).lower()
        CK.check(isinstance(e, types), f"{what}: raised {type(e).__name__}, expected one of "
                                       f"{[t.__name__ for t in types]}: {msg[:400]}")
        missing = [w for w in words if w.lower() not in low]
        CK.check(not missing, f"{what}: the message does not mention {missing}: {msg[:600]}")
        if any_words:
            CK.check(any(w.lower() in low for w in any_words),
                     f"{what}: the message mentions none of {list(any_words)}: {msg[:600]}")
        CK.check(took < fast, f"{what}: took {took:.1f} s to raise")
        CK.data(what, {"error": msg[:2000], "seconds": round(took, 3)})
        return msg
    CK.check(False, f"{what}: no exception was raised")
    return ""


def check_group_still_works(group=None, what="") -> None:
    t = torch.full((16,), float(RANK + 1))
    dist.all_reduce(t, group=group)
    CK.check(bool((t == 3.0).all()), f"{what}: the process group no longer works: all_reduce gave {t}")


def sec_non_contiguous() -> None:
    # Where Gloo accepts a non-contiguous tensor gonccl does too, and is right
    # (test_ops_reference checks every op); where Gloo refuses, gonccl refuses clearly.
    t = torch.arange(24, dtype=torch.float32).reshape(4, 6).t()
    assert not t.is_contiguous()
    before = t.clone()
    dist.all_reduce(t)
    CK.check(torch.equal(t, before * WS), "all_reduce of a non-contiguous tensor gave a wrong result")
    if RANK == 0:
        expect_error("send(non-contiguous)", lambda: dist.send(t, dst=1), words=("contiguous",))
    else:
        expect_error("recv(non-contiguous)", lambda: dist.recv(t, src=0), words=("contiguous",))
    expect_error("all_to_all_single(non-contiguous input)",
                 lambda: dist.all_to_all_single(torch.zeros(24), torch.zeros(24, 2)[:, 0]),
                 words=("contiguous",))
    check_group_still_works(what="after non-contiguous inputs")


def sec_sparse() -> None:
    s = torch.sparse_coo_tensor(torch.tensor([[0, 2]]), torch.tensor([1.0, 2.0]), (4,))
    # all_reduce takes sparse COO tensors (SUM, as Gloo; see test_contract.py), no other op.
    expect_error("all_reduce(sparse, MAX)", lambda: dist.all_reduce(s, op=dist.ReduceOp.MAX), words=("sparse", "SUM"))
    expect_error("broadcast(sparse)", lambda: dist.broadcast(s, src=0), words=("sparse",))
    check_group_still_works(what="after sparse inputs")


def sec_dtype() -> None:
    # float8 moves but does not reduce; the error names the dtype, the group lives on.
    for dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        name = str(dtype)
        t = torch.zeros(8, dtype=dtype)
        expect_error(f"all_reduce({name})", lambda: dist.all_reduce(t), types=(TypeError,), words=(name,))
    t = torch.zeros(8, dtype=torch.bool)
    expect_error("all_reduce(torch.bool, AVG)", lambda: dist.all_reduce(t, op=ReduceOp.AVG), words=("bool",))
    # complex with an op that has no complex meaning is torch's own error, but it must
    # not reach the wire either
    c = torch.zeros(4, dtype=torch.complex64)
    expect_error("all_reduce(complex64, MAX)", lambda: dist.all_reduce(c, op=ReduceOp.MAX), words=("complex",))
    check_group_still_works(what="after unsupported dtypes")


def sec_all_gather_sizes() -> None:
    x = torch.arange(4, dtype=torch.float32)
    short = [torch.zeros(4) for _ in range(WS - 1)]
    expect_error("all_gather(output list too short)", lambda: dist.all_gather(short, x),
                 words=(str(WS), str(WS - 1)), any_words=("output", "tensor list", "list"))
    long = [torch.zeros(4) for _ in range(WS + 1)]
    expect_error("all_gather(output list too long)", lambda: dist.all_gather(long, x),
                 words=(str(WS), str(WS + 1)), any_words=("output", "tensor list", "list"))
    wrong = [torch.zeros(4) for _ in range(WS)]
    wrong[WS - 1] = torch.zeros(5)
    expect_error("all_gather(one output of the wrong size)", lambda: dist.all_gather(wrong, x),
                 words=("5", "4"), any_words=("size", "element", "numel", "shape", "mismatch"))
    wrong_dtype = [torch.zeros(4) for _ in range(WS)]
    wrong_dtype[0] = torch.zeros(4, dtype=torch.float64)
    expect_error("all_gather(one output of another dtype)", lambda: dist.all_gather(wrong_dtype, x),
                 any_words=("dtype", "type"))
    expect_error("all_gather_into_tensor(output too small)",
                 lambda: dist.all_gather_into_tensor(torch.zeros(4 * WS - 1), x),
                 words=(str(4 * WS - 1),), any_words=("size", "element", "numel", "world_size", "mismatch"))
    expect_error("all_gather_into_tensor(output too large)",
                 lambda: dist.all_gather_into_tensor(torch.zeros(4 * WS + 4), x),
                 words=(str(4 * WS + 4),), any_words=("size", "element", "numel", "world_size", "mismatch"))
    check_group_still_works(what="after wrong all_gather outputs")


def sec_size_overflow() -> None:
    # Split sizes whose sum overflows int64 are refused, naming the problem. The old
    # code added them up unchecked (undefined behaviour in C++): 2**62 + 2**62 wrapped to
    # -2**63 and the message said the splits "add up to -9223372036854775808"; with 3
    # or more ranks the sum could wrap back to the right total.
    x, y = torch.zeros(2), torch.zeros(2)
    expect_error("all_to_all_single(input split sizes that overflow)",
                 lambda: dist.all_to_all_single(y, x, output_split_sizes=[1] * WS, input_split_sizes=[2**62] * WS),
                 types=(ValueError,), words=("input split sizes add up to more than", "dim 0 (2)"))
    expect_error("all_to_all_single(output split sizes that overflow)",
                 lambda: dist.all_to_all_single(y, x, output_split_sizes=[2**62] * WS, input_split_sizes=[1] * WS),
                 types=(ValueError,), words=("output split sizes add up to more than", "dim 0 (2)"))
    check_group_still_works(what="after overflowing split sizes")


def sec_unsupported_ops() -> None:
    # Every c10d operation exists now; what remains unsupported is a reduce op that
    # has no meaning for the dtype, which must name both.
    for op, name in ((ReduceOp.BAND, "BAND"), (ReduceOp.BOR, "BOR"), (ReduceOp.BXOR, "BXOR")):
        t = torch.ones(4, dtype=torch.float32)
        expect_error(f"all_reduce(float32, op={name})", lambda: dist.all_reduce(t, op=op),
                     types=(TypeError,), words=(name, "float32"))
    check_group_still_works(what="after unsupported ops")


def mismatch(what: str, group, fn) -> None:
    """fn() issues a collective that differs between the ranks: both must get a
    DistBackendError within FAST seconds naming the other rank."""
    msg = expect_error(what, fn, types=(dist.DistBackendError,), words=(f"rank {PEER}",))
    CK.data(f"{what}: mismatch named", "mismatch" in msg.lower())


def sec_mismatch_size() -> None:
    g = dist.new_group(backend="gonccl", timeout=timedelta(seconds=PG_TIMEOUT))
    check_group_still_works(g, "fresh subgroup")
    n = 1024 if RANK == 0 else 2048
    t = torch.ones(n)
    mismatch("all_reduce 1024 vs 2048 elements", g, lambda: dist.all_reduce(t, group=g))
    t0 = time.monotonic()
    dist.destroy_process_group(g)
    took = time.monotonic() - t0
    CK.check(took < FAST, f"destroy_process_group of the failed group took {took:.1f} s")
    check_group_still_works(what="default group after a subgroup's mismatch")


def sec_mismatch_dtype() -> None:
    g = dist.new_group(backend="gonccl", timeout=timedelta(seconds=PG_TIMEOUT))
    check_group_still_works(g, "fresh subgroup")
    t = torch.ones(1024, dtype=torch.float32 if RANK == 0 else torch.int32)
    mismatch("all_reduce float32 vs int32", g, lambda: dist.all_reduce(t, group=g))
    dist.destroy_process_group(g)


def sec_mismatch_collective() -> None:
    g = dist.new_group(backend="gonccl", timeout=timedelta(seconds=PG_TIMEOUT))
    check_group_still_works(g, "fresh subgroup")
    t = torch.ones(1000)
    if RANK == 0:
        mismatch("all_reduce vs broadcast", g, lambda: dist.all_reduce(t, group=g))
    else:
        mismatch("all_reduce vs broadcast", g, lambda: dist.broadcast(t, src=0, group=g))
    dist.destroy_process_group(g)


def sec_mismatch_large() -> None:
    # Large messages (the pipelined bandwidth algorithms): 1M vs 2M floats.
    g = dist.new_group(backend="gonccl", timeout=timedelta(seconds=PG_TIMEOUT))
    t = torch.ones((1 << 20) * (1 + RANK))
    mismatch("all_reduce 1M vs 2M elements", g, lambda: dist.all_reduce(t, group=g))
    dist.destroy_process_group(g)


def sec_timeout() -> None:
    # A collective the peer never joins fails when the group's timeout (3 s) passes.
    g = dist.new_group(backend="gonccl", timeout=timedelta(seconds=3))
    check_group_still_works(g, "fresh subgroup")
    if RANK == 0:
        t0 = time.monotonic()
        expect_error("all_reduce that rank 1 never joins (timeout 3 s)", lambda: dist.all_reduce(torch.ones(8), group=g),
                     types=(dist.DistBackendError,), any_words=("timeout", "timed out", "deadline"))
        took = time.monotonic() - t0
        CK.check(took >= 2.5, f"the timed-out all_reduce failed after {took:.1f} s, before the 3 s timeout")
    dist.barrier()  # rank 1 waits here (on the default group) meanwhile
    t0 = time.monotonic()
    dist.destroy_process_group(g)
    took = time.monotonic() - t0
    CK.check(took < FAST, f"destroy_process_group of the timed-out group took {took:.1f} s")
    check_group_still_works(what="default group after a subgroup timed out")


def sec_abort() -> None:
    # DESIGN.md: "abort unblocks everything". Rank 0 has an op pending that rank 1 never
    # joins (timeout 30 s): aborting the group, or destroying it, must fail that op at
    # once and return promptly.
    from torch.distributed.distributed_c10d import _abort_process_group

    for how in ("_abort_process_group", "destroy_process_group"):
        g = dist.new_group(backend="gonccl", timeout=timedelta(seconds=PG_TIMEOUT))
        check_group_still_works(g, "fresh subgroup")
        if RANK == 0:
            t = torch.ones(1 << 16)
            w = dist.all_reduce(t, group=g, async_op=True)
            time.sleep(0.5)
            CK.check(not w.is_completed(), f"{how}: the all_reduce rank 1 never joined completed")
            t0 = time.monotonic()
            if how == "_abort_process_group":
                _abort_process_group(g)
            else:
                dist.destroy_process_group(g)
            took = time.monotonic() - t0
            CK.check(took < FAST, f"{how} with an op pending took {took:.1f} s")
            expect_error(f"wait() on an op pending when the group was closed by {how}", lambda: w.wait(),
                         types=(dist.DistBackendError,))
        dist.barrier()  # rank 1 waits here meanwhile
        if RANK == 1:  # (rank 0's group is gone: aborting also unregisters it)
            t0 = time.monotonic()
            dist.destroy_process_group(g)
            took = time.monotonic() - t0
            CK.check(took < FAST, f"destroy_process_group after {how} took {took:.1f} s on rank {RANK}")
    check_group_still_works(what="default group after aborted subgroups")


def sec_ctrl_c() -> None:
    # DESIGN.md: long waits are sliced with the GIL released "so Ctrl-C and timeouts
    # work". Rank 0 blocks in an all_reduce rank 1 never joins and gets SIGINT 1 s in:
    # KeyboardInterrupt must interrupt the wait, long before the group's timeout (the
    # time is counted from the signal, which a loaded machine may send late).
    group_timeout = scaled(60)
    g = dist.new_group(backend="gonccl", timeout=timedelta(seconds=group_timeout))
    check_group_still_works(g, "fresh subgroup")
    # Python's own Ctrl-C handler, as a user at a terminal has it: a rank started in the
    # background by a shell without job control inherits SIGINT ignored (CI rehearsals
    # launched with `(... &)` failed here: the signal never arrived).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if RANK == 0:
        outcome, ended = "nothing", None
        sent = []

        def interrupt():
            sent.append(time.monotonic())
            os.kill(os.getpid(), signal.SIGINT)

        timer = threading.Timer(1.0, interrupt)
        try:
            try:
                timer.start()
                dist.all_reduce(torch.ones(8), group=g)
                outcome = "all_reduce returned"
            except KeyboardInterrupt:
                outcome = "KeyboardInterrupt"
            except Exception as e:  # noqa: BLE001
                outcome = f"{type(e).__name__}: {str(e)[:300]}"
            ended = time.monotonic()
            time.sleep(0.5)  # a KeyboardInterrupt still pending fires here at the latest
        except KeyboardInterrupt:
            if ended is None:
                ended = time.monotonic()
        timer.cancel()
        took = ended - sent[0] if sent and ended is not None else -1.0
        CK.data("ctrl_c", {"outcome": outcome, "seconds_after_signal": round(took, 2)})
        limit = scaled(10)
        CK.check(outcome == "KeyboardInterrupt" and 0 <= took < limit,
                 f"SIGINT into a blocked all_reduce: got {outcome!r} {took:.1f} s after the signal; expected "
                 f"KeyboardInterrupt within {limit:.0f} s, before the group's {group_timeout:.0f} s timeout "
                 "(DESIGN.md: waits sliced so Ctrl-C works)")
    dist.barrier()  # rank 1 waits here meanwhile
    t0 = time.monotonic()
    dist.destroy_process_group(g)
    took = time.monotonic() - t0
    CK.check(took < FAST, f"destroy_process_group of the interrupted group took {took:.1f} s")
    check_group_still_works(what="default group after an interrupted subgroup op")


def sec_mismatch_default_then_exit() -> None:
    n = 1024 if RANK == 0 else 2048
    t = torch.ones(n)
    mismatch("default group: all_reduce 1024 vs 2048 elements", None, lambda: dist.all_reduce(t))
    # A later op on the failed group must fail too, at once, not hang.
    expect_error("all_reduce on the failed default group", lambda: dist.all_reduce(torch.ones(4)),
                 types=(dist.DistBackendError,))


def sec_peer_exited() -> None:
    # Rank 1 returns from main now (its interpreter exits, leaving G_DEAD behind);
    # rank 0's all_reduce on G_DEAD must fail, naming rank 1, instead of waiting out
    # the 30 s timeout.
    if RANK == 0:
        expect_error("all_reduce while the peer exits", lambda: dist.all_reduce(torch.ones(8), group=G_DEAD),
                     types=(dist.DistBackendError,), words=("rank 1",), fast=scaled(20))
    else:
        CK.skip("rank 1 is the peer that exits; rank 0 checks")


def main() -> None:
    global CK
    CK = Checker(sys.argv[1], RANK)
    assert WS == 2, "this worker is written for 2 ranks"
    with CK.section("init"):
        dist.init_process_group("gonccl", timeout=timedelta(seconds=PG_TIMEOUT))
        global G_DEAD
        G_DEAD = dist.new_group(backend="gonccl", timeout=timedelta(seconds=PG_TIMEOUT))
        check_group_still_works(G_DEAD, "subgroup for the peer_exited section")
    with CK.section("non_contiguous"):
        sec_non_contiguous()
    with CK.section("sparse"):
        sec_sparse()
    with CK.section("dtype"):
        sec_dtype()
    with CK.section("all_gather_sizes"):
        sec_all_gather_sizes()
    with CK.section("size_overflow"):
        sec_size_overflow()
    with CK.section("unsupported_ops"):
        sec_unsupported_ops()
    with CK.section("mismatch_size"):
        sec_mismatch_size()
    with CK.section("mismatch_dtype"):
        sec_mismatch_dtype()
    with CK.section("mismatch_collective"):
        sec_mismatch_collective()
    with CK.section("mismatch_large"):
        sec_mismatch_large()
    with CK.section("timeout"):
        sec_timeout()
    with CK.section("abort"):
        sec_abort()
    with CK.section("ctrl_c"):
        sec_ctrl_c()
    with CK.section("mismatch_default_then_exit"):
        sec_mismatch_default_then_exit()
    with CK.section("peer_exited"):
        sec_peer_exited()
    # Leave the broken default group for interpreter exit to clean up.
    warnings.simplefilter("ignore")
    print(f"EXITING AT {time.time():.3f}", flush=True)
    CK.finish()


if __name__ == "__main__":
    main()

"""shrink_group on gonccl (tests/test_shrink.py). One scenario per run, named by argv[2]:

  kill VICTIMS...   ranks VICTIMS (original numbering) SIGKILL themselves in the middle of
                    an all_reduce loop, one after another: after each death the
                    survivors catch the error, call dist.shrink_group on the default
                    group and check every collective on the new group against a
                    reference. So `kill 2` on 3 ranks shrinks once; `kill 3 1` on 4
                    ranks shrinks twice in a row.
  stop VICTIM       VICTIM SIGSTOPs itself (hung: alive, connections open, silent); the
                    survivors learn of it from the heartbeat (the test sets
                    GONCCL_HEARTBEAT_TIMEOUT_MS), shrink, and the new rank 0 SIGKILLs
                    the stopped process once the new group is ready.
  healthy VICTIM    nobody dies: the ranks other than VICTIM shrink a healthy group,
                    VICTIM leaves on its own.

Each victim writes the time of its death to <report_dir>/killed_<rank>, so the test
can measure kill -> survivors' error -> new group ready. The store must outlive every
victim: the test passes a file:// init method when the store host (rank 0) dies.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

from _common import Checker, exact_mismatch

RANK = int(os.environ["RANK"])
WS = int(os.environ["WORLD_SIZE"])
CK: Checker


def inputs(rank: int, n: int, salt: int, dtype=torch.int64) -> torch.Tensor:
    """A rank's deterministic input: values any rank can recompute."""
    return ((torch.arange(n, dtype=torch.int64) * (rank + 3) + salt * 7 + rank * 1000) % 1013 - 500).to(dtype)


def expect_exact(what: str, got: torch.Tensor, want: torch.Tensor) -> None:
    bad = exact_mismatch(got, want)
    CK.check(bad is None, lambda: f"{what} on the shrunken group: {bad}")


def every_collective(tag: str, salt: int) -> None:
    """Every kind of collective on the (new) default group, checked exactly."""
    r, n = dist.get_rank(), dist.get_world_size()
    count = 1000 + salt
    mine = inputs(r, count, salt)
    everyone = [inputs(q, count, salt) for q in range(n)]

    for op, ref in (
        (dist.ReduceOp.SUM, lambda xs: torch.stack(xs).sum(0)),
        (dist.ReduceOp.MAX, lambda xs: torch.stack(xs).amax(0)),
        (dist.ReduceOp.PRODUCT, lambda xs: torch.stack(xs).prod(0)),
    ):
        t = mine.clone()
        dist.all_reduce(t, op=op)
        expect_exact(f"{tag} all_reduce {op}", t, ref(everyone))
    f = mine.to(torch.float32)
    dist.all_reduce(f, op=dist.ReduceOp.AVG)
    want = torch.stack([x.to(torch.float64) for x in everyone]).mean(0).to(torch.float32)
    CK.check(torch.allclose(f, want, rtol=1e-6, atol=1e-5), f"{tag} all_reduce AVG differs")

    root = n - 1
    t = mine.clone()
    dist.broadcast(t, src=root)
    expect_exact(f"{tag} broadcast from {root}", t, everyone[root])

    t = mine.clone()
    dist.reduce(t, dst=root, op=dist.ReduceOp.SUM)
    if r == root:
        expect_exact(f"{tag} reduce to {root}", t, torch.stack(everyone).sum(0))

    out = [torch.empty_like(mine) for _ in range(n)]
    dist.all_gather(out, mine)
    for q in range(n):
        expect_exact(f"{tag} all_gather[{q}]", out[q], everyone[q])
    flat = torch.empty(n * count, dtype=mine.dtype)
    dist.all_gather_into_tensor(flat, mine)
    expect_exact(f"{tag} all_gather_into_tensor", flat, torch.cat(everyone))

    big = torch.cat([inputs(r, count, salt + q) for q in range(n)])
    part = torch.empty(count, dtype=mine.dtype)
    dist.reduce_scatter_tensor(part, big)
    expect_exact(
        f"{tag} reduce_scatter_tensor", part, torch.stack([inputs(q, count, salt + r) for q in range(n)]).sum(0)
    )
    outs = [torch.empty(count, dtype=mine.dtype)]
    dist.reduce_scatter(outs[0], [inputs(r, count, salt + q) for q in range(n)])
    expect_exact(f"{tag} reduce_scatter", outs[0], torch.stack([inputs(q, count, salt + r) for q in range(n)]).sum(0))

    gl = [torch.empty_like(mine) for _ in range(n)] if r == 0 else None
    dist.gather(mine, gather_list=gl, dst=0)
    if r == 0:
        for q in range(n):
            expect_exact(f"{tag} gather[{q}]", gl[q], everyone[q])
    got = torch.empty(count, dtype=mine.dtype)
    dist.scatter(got, scatter_list=[inputs(q, count, salt + 50) for q in range(n)] if r == root else None, src=root)
    expect_exact(f"{tag} scatter", got, inputs(r, count, salt + 50))

    send = torch.cat([inputs(r, 7, salt + q) for q in range(n)])
    recv = torch.empty(7 * n, dtype=send.dtype)
    dist.all_to_all_single(recv, send)
    expect_exact(f"{tag} all_to_all_single", recv, torch.cat([inputs(q, 7, salt + r) for q in range(n)]))

    # Point to point around the ring.
    nxt, prv = (r + 1) % n, (r - 1) % n
    got = torch.empty(count, dtype=mine.dtype)
    ops = [dist.P2POp(dist.isend, mine, nxt), dist.P2POp(dist.irecv, got, prv)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    expect_exact(f"{tag} send/recv ring", got, everyone[prv])
    dist.barrier()


def lose(victim: int, orig_ranks: list[int], step: int, sig: int = signal.SIGKILL) -> list[int]:
    """The current group loses orig rank `victim` (signal sig in an all_reduce loop:
    SIGKILL, or SIGSTOP for a hung rank); the survivors shrink. Returns the new group's
    members in original numbering."""
    me = orig_ranks.index(ORIG)
    vr = orig_ranks.index(victim)  # the victim's rank in the current group
    t = torch.ones(1 << 14)
    err = None
    for i in range(10**6):
        if ORIG == victim and i == 20:
            with open(os.path.join(REPORT_DIR, f"pid_{victim}"), "w") as f:
                f.write(str(os.getpid()))
            with open(os.path.join(REPORT_DIR, f"killed_{victim}"), "w") as f:
                f.write(f"{time.time():.6f}")
            os.kill(os.getpid(), sig)
        try:
            dist.all_reduce(t)
        except Exception as e:  # noqa: BLE001 - checked below
            err = e
            break
        t.fill_(1.0)
    t_err = time.time()
    CK.check(isinstance(err, dist.DistBackendError), f"step {step}: the loop raised {type(err).__name__}: {err}")
    CK.check(f"rank {vr}" in str(err), f"step {step}: the error does not name rank {vr}: {str(err)[:1500]}")
    new = dist.shrink_group([vr])
    t_ready = time.time()
    if sig == signal.SIGSTOP and new.rank() == 0:  # the hung process is of no more use
        with open(os.path.join(REPORT_DIR, f"pid_{victim}")) as f:
            os.kill(int(f.read()), signal.SIGKILL)
    survivors = [o for o in orig_ranks if o != victim]
    CK.check(
        new.size() == len(survivors) and dist.get_world_size() == len(survivors),
        f"step {step}: new group size {new.size()}, world size {dist.get_world_size()}, want {len(survivors)}",
    )
    want_rank = survivors.index(ORIG)
    CK.check(
        new.rank() == want_rank and dist.get_rank() == want_rank,
        f"step {step}: rank {me} became {new.rank()} (get_rank {dist.get_rank()}), want {want_rank}",
    )
    CK.data(
        f"step{step}",
        {
            "error": str(err)[:2000],
            "t_error": t_err,
            "t_ready": t_ready,
            "new_rank": new.rank(),
            "new_size": new.size(),
        },
    )
    return survivors


def main() -> None:
    global CK, ORIG, REPORT_DIR
    REPORT_DIR = sys.argv[1]
    scenario, args = sys.argv[2], [int(a) for a in sys.argv[3:]]
    ORIG = RANK
    CK = Checker(REPORT_DIR, RANK)
    init = os.environ.get("SHRINK_INIT_METHOD", "env://")
    dist.init_process_group("gonccl", init_method=init, rank=RANK, world_size=WS, timeout=timedelta(seconds=60))
    with CK.section("before"):
        every_collective("before", 0)
    members = list(range(WS))
    if scenario == "kill":
        for step, victim in enumerate(args):
            with CK.section(f"shrink{step}"):
                members = lose(victim, members, step)
                every_collective(f"after shrink {step}", step + 1)
    elif scenario == "stop":
        with CK.section("shrink0"):
            members = lose(args[0], members, 0, signal.SIGSTOP)
            every_collective("after shrink of a hung rank", 1)
    elif scenario == "healthy":
        victim = args[0]
        with CK.section("shrink0"):
            if RANK == victim:
                CK.data("left", True)
            else:
                t0 = time.time()
                new = dist.shrink_group([victim])
                CK.data(
                    "step0", {"t_error": t0, "t_ready": time.time(), "new_rank": new.rank(), "new_size": new.size()}
                )
                want = [o for o in members if o != victim].index(RANK)
                CK.check(new.rank() == want and new.size() == WS - 1, f"healthy shrink: rank {new.rank()}/{new.size()}")
                every_collective("after healthy shrink", 1)
    else:
        raise SystemExit(f"unknown scenario {scenario!r}")
    with CK.section("end"):
        if dist.is_initialized():
            dist.destroy_process_group()
        CK.check(not dist.is_initialized(), "destroy_process_group() left the default group")
    CK.finish()


if __name__ == "__main__":
    main()

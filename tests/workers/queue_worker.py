"""One rank of the queue test (tests/test_queue.py): many more asynchronous operations
issued before the first wait than the communicator queues (GONCCL_QUEUE_DEPTH), so that
issuing must block until room is made (back-pressure) instead of deadlocking.

usage: queue_worker.py MODE N      (env: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)

MODE
  allreduce          N async all_reduces issued by one thread on the default group,
                     each on its own small tensor, then every one waited for
  allreduce-threads  4 threads issue N async all_reduces each on 2 groups (threads 0, 2
                     on group A, 1, 3 on group B); the two threads of a group take turns
                     (op k of a group is issued by thread k % 2 of it), so that every rank
                     issues the same sequence on each group
  p2p                N isend/irecv pairs with the other rank from one thread
  p2p-threads        4 threads, N pairs each, on 2 groups, each thread with its own tag

Every result is checked exactly; the first few mismatches are printed and the rank
exits 1. The process group's timeout is short, so a hang ends as an error here, not
only at the harness's timeout.
"""

from __future__ import annotations

import sys
import threading
import time
from datetime import timedelta

import torch
import torch.distributed as dist

import gonccl  # noqa: F401  (registers the backend)


def value(op: int, rank: int, thread: int = 0) -> int:
    return op * 1000 + thread * 10 + rank + 1


def check(what: str, got: list[int], want: list[int]) -> list[str]:
    bad = [f"{what} #{i}: got {g}, want {w}" for i, (g, w) in enumerate(zip(got, want)) if g != w]
    if len(got) != len(want):
        bad.append(f"{what}: {len(got)} results, want {len(want)}")
    return bad


def all_reduce_ops(group, n: int, thread: int, world: int, turn=None) -> list[str]:
    """Issues n async all_reduces on group, then waits for them all and checks them.
    turn, if given, is (condition, state, index, stride): op k is issued only when
    state["next"] == k, by the thread whose index == k % stride."""
    rank = dist.get_rank()
    tensors, works = [], []
    for k in range(n):
        t = torch.tensor([value(k, rank, thread)], dtype=torch.int64)
        if turn is None:
            works.append(dist.all_reduce(t, group=group, async_op=True))
        else:
            cond, state, index, stride = turn
            op = k * stride + index
            with cond:
                cond.wait_for(lambda: state["next"] == op)
            # Issued outside the condition's lock: the call may block (queue full)
            # while the other thread waits for its turn.
            works.append(dist.all_reduce(t, group=group, async_op=True))
            with cond:
                state["next"] += 1
                cond.notify_all()
        tensors.append(t)
    for w in works:
        w.wait()
    got = [int(t.item()) for t in tensors]
    want = [sum(value(k, r, thread) for r in range(world)) for k in range(n)]
    return check(f"thread {thread} all_reduce", got, want)


def p2p_ops(group, n: int, thread: int) -> list[str]:
    rank = dist.get_rank()
    peer = 1 - rank
    recvs, works = [], []
    for k in range(n):
        s = torch.tensor([value(k, rank, thread)], dtype=torch.int64)
        r = torch.zeros(1, dtype=torch.int64)
        works.append(dist.isend(s, peer, group=group, tag=thread))
        works.append(dist.irecv(r, peer, group=group, tag=thread))
        recvs.append(r)
    for w in works:
        w.wait()
    got = [int(r.item()) for r in recvs]
    want = [value(k, peer, thread) for k in range(n)]
    return check(f"thread {thread} recv", got, want)


def threaded(groups, n: int, body) -> list[str]:
    errors: list[str] = []
    lock = threading.Lock()

    def run(thread: int) -> None:
        try:
            bad = body(groups[thread % 2], thread)
        except Exception as e:  # noqa: BLE001 - reported below
            bad = [f"thread {thread}: {type(e).__name__}: {e}"]
        with lock:
            errors.extend(bad)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def main() -> int:
    mode, n = sys.argv[1], int(sys.argv[2])
    dist.init_process_group("gonccl", timeout=timedelta(seconds=60))
    world = dist.get_world_size()
    start = time.monotonic()
    if mode == "allreduce":
        errors = all_reduce_ops(None, n, 0, world)
    elif mode == "allreduce-threads":
        groups = [dist.new_group(), dist.new_group()]
        conds = [threading.Condition(), threading.Condition()]
        states = [{"next": 0}, {"next": 0}]

        def body(group, thread):
            g = thread % 2
            return all_reduce_ops(group, n, thread, world, (conds[g], states[g], thread // 2, 2))

        errors = threaded(groups, n, body)
    elif mode == "p2p":
        errors = p2p_ops(None, n, 0)
    elif mode == "p2p-threads":
        groups = [dist.new_group(), dist.new_group()]
        errors = threaded(groups, n, lambda group, thread: p2p_ops(group, n, thread))
    else:
        raise SystemExit(f"unknown mode {mode}")
    took = time.monotonic() - start
    print(f"rank {dist.get_rank()}: {mode} x {n}: {took:.1f} s, {len(errors)} errors", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    if errors:
        print("\n".join(errors[:20]), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

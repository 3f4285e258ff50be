"""The collectives worker's sections on groups and the process around them
(collectives_worker.py runs them): subgroups and ops in flight on two communicators,
collectives from two threads, create/destroy cycles without fd leaks, collectives under
faulthandler and a SIGALRM handler, and destroy_process_group.
"""

from __future__ import annotations

import os
import threading
import time

import torch
import torch.distributed as dist

from _collectives_common import CK, RANK, WS


def sec_subgroups() -> None:
    tri = WS * (WS + 1) / 2
    g2 = dist.new_group(backend="gonccl")
    CK.check(dist.get_backend(g2) == "gonccl", f"backend of new_group(backend='gonccl') is {dist.get_backend(g2)}")
    t = torch.full((5,), float(RANK + 1))
    dist.all_reduce(t, group=g2)
    CK.check(bool((t == tri).all()), f"all_reduce on a second gonccl group gave {t}")
    # Ops in flight on two communicators at once.
    a = torch.full((1 << 18,), 1.0)
    b = torch.full((1 << 18,), 2.0 * (RANK + 1))
    wa = dist.all_reduce(a, async_op=True)
    wb = dist.all_reduce(b, group=g2, async_op=True)
    wb.wait()
    wa.wait()
    CK.check(bool((a == WS).all()), f"default-group all_reduce interleaved with another group: {a[:4]}")
    CK.check(bool((b == 2 * tri).all()), f"second-group all_reduce interleaved with the default: {b[:4]}")
    if WS >= 3:
        members = list(range(1, WS))
        sub = dist.new_group(ranks=members, backend="gonccl")
        if RANK in members:
            CK.check(dist.get_rank(sub) == RANK - 1 and dist.get_world_size(sub) == len(members),
                     f"subgroup rank/size {dist.get_rank(sub)}/{dist.get_world_size(sub)}")
            t = torch.tensor([float(RANK)])
            dist.all_reduce(t, group=sub)
            CK.check(t.item() == sum(members), f"subgroup {members} all_reduce gave {t.item()}")
            x = torch.full((7,), float(RANK))
            dist.broadcast(x, src=members[-1], group=sub)  # src is a global rank
            CK.check(bool((x == members[-1]).all()), f"subgroup broadcast from global rank {members[-1]} gave {x}")
            outs = [torch.zeros(1, dtype=torch.int64) for _ in members]
            dist.all_gather(outs, torch.tensor([RANK]), group=sub)
            CK.check([int(o) for o in outs] == members, f"subgroup all_gather gave {outs}")
            dist.destroy_process_group(sub)
        else:
            # Meanwhile rank 0 works alone on a 1-rank gonccl group of its own.
            pass
    dist.barrier()
    t0 = time.monotonic()
    dist.destroy_process_group(g2)
    took = time.monotonic() - t0
    CK.check(took < 20, f"destroy_process_group(subgroup) took {took:.1f} s")
    t = torch.full((3,), float(RANK + 1))
    dist.all_reduce(t)
    CK.check(bool((t == tri).all()), f"default group after destroying a subgroup gave {t}")


def sec_threads() -> None:
    # Two Python threads, each issuing blocking collectives on its own communicator:
    # a wait that held the GIL (or serialized communicators) would deadlock here.
    groups = [dist.new_group(backend="gonccl"), dist.new_group(backend="gonccl")]
    errors: list[str] = []

    def loop(i: int) -> None:
        try:
            for k in range(25):
                t = torch.full((1 << 15,), float(RANK + i + k))
                dist.all_reduce(t, group=groups[i])
                want = WS * (i + k) + WS * (WS - 1) / 2
                if not bool((t == want).all()):
                    errors.append(f"thread {i} iteration {k}: got {t[:3]}, want {want}")
        except Exception as e:  # noqa: BLE001
            errors.append(f"thread {i}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=120)
    CK.check(not any(th.is_alive() for th in threads), "collectives from two threads did not finish in 120 s")
    CK.check(not errors, lambda: f"collectives from two threads: {errors[:5]}")
    for g in groups:
        dist.destroy_process_group(g)


def sec_signals() -> None:
    # DESIGN.md "Signals": Go shares the process's signals with Python. With
    # faulthandler enabled after the Go runtime started and a Python SIGALRM handler
    # firing every millisecond (as pytest-timeout or a profiler would), collectives
    # must neither fail (EINTR), nor crash, nor give wrong results.
    import faulthandler
    import signal

    faulthandler.enable()
    hits = [0]

    def on_alarm(signum, frame):
        hits[0] += 1

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, 0.001, 0.001)
    try:
        for k in range(120):
            n = [1, 1000, 1 << 16, 1 << 20][k % 4]
            t = torch.full((n,), float(RANK + k))
            dist.all_reduce(t)
            want = WS * k + WS * (WS - 1) / 2
            CK.check(bool((t == want).all()), lambda: f"all_reduce #{k} ({n} elements) under SIGALRM gave {t[:3]}")
            if k % 5 == 0:
                dist.barrier()
                outs = [torch.zeros(n) for _ in range(WS)]
                dist.all_gather(outs, t)
                CK.check(all(bool((o == want).all()) for o in outs), f"all_gather #{k} under SIGALRM")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0, 0)
        signal.signal(signal.SIGALRM, old)
        faulthandler.disable()
    CK.data("alarms", hits[0])
    CK.check(hits[0] > 0, "the SIGALRM handler never ran (the test did not test anything)")


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def sec_group_churn() -> None:
    # Creating and destroying communicators must not leak sockets or other fds.
    def once() -> None:
        g = dist.new_group(backend="gonccl")
        t = torch.full((1000,), float(RANK))
        dist.all_reduce(t, group=g)
        CK.check(bool((t == WS * (WS - 1) / 2).all()), f"all_reduce on a short-lived group gave {t[:3]}")
        dist.destroy_process_group(g)

    once()
    dist.barrier()
    before = open_fds()
    for _ in range(6):
        once()
    dist.barrier()
    time.sleep(0.5)
    after = open_fds()
    CK.data("fds", [before, after])
    CK.check(after - before <= 4, f"6 create/destroy cycles of a gonccl group leaked {after - before} fds "
                                  f"({before} -> {after})")


def sec_shutdown() -> None:
    t0 = time.monotonic()
    dist.destroy_process_group()
    took = time.monotonic() - t0
    CK.data("destroy_seconds", took)
    CK.check(took < 20, f"destroy_process_group() took {took:.1f} s")
    CK.check(not dist.is_initialized(), "still initialized after destroy_process_group()")

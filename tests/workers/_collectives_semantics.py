"""The collectives worker's sections on what a call promises besides its values
(collectives_worker.py runs them): barrier really holds every rank, async works and
their futures (wait, then, is_completed, out-of-order waits, many ops in flight, a
tensor only its Work keeps alive), and in-place and view semantics.
"""

from __future__ import annotations

import gc
import time

import torch
import torch.distributed as dist
from torch.distributed import ReduceOp

from _collectives_common import CK, RANK, WS
from _common import exact_mismatch


def sec_barrier() -> None:
    dist.barrier()
    for _ in range(20):
        dist.barrier()
    w = dist.barrier(async_op=True)
    CK.check(w.wait() is True, "barrier work.wait() did not return True")
    CK.check(w.is_completed(), "barrier work not completed after wait()")
    if WS > 1:
        # The last to arrive marks its arrival in the store just before it enters; every
        # rank released by the barrier must find the mark. It arrives 0.5 s late, so that
        # a barrier that does not wait is caught, but the check does not depend on timing.
        store = dist.distributed_c10d._get_default_store()
        for late, how in ((0, "barrier"), (WS - 1, "async barrier")):
            key = f"barrier_entered_{how}"
            dist.barrier()
            t0 = time.monotonic()
            if RANK == late:
                time.sleep(0.5)
                store.set(key, "1")
            if how == "barrier":
                dist.barrier()
            else:
                dist.barrier(async_op=True).wait()
            CK.data(f"held {how}", round(time.monotonic() - t0, 3))
            if RANK != late:
                CK.check(store.check([key]), f"{how} released rank {RANK} before rank {late} entered it")


def sec_async() -> None:
    tri = WS * (WS - 1) / 2  # sum of ranks
    # Several ops in flight at once, waited for in reverse order.
    ts = [torch.full((1000 * (k + 1),), float(RANK + k)) for k in range(8)]
    works = [dist.all_reduce(t, async_op=True) for t in ts]
    for k in reversed(range(8)):
        CK.check(works[k].wait() is True, f"work {k}.wait() did not return True")
        CK.check(works[k].is_completed(), f"work {k} not completed after wait()")
        want = torch.full_like(ts[k], k * WS + tri)
        bad = exact_mismatch(ts[k], want)
        CK.check(bad is None, lambda: f"async all_reduce {k}: {bad}")
    # The future's value is the output tensor itself.
    t = torch.arange(10, dtype=torch.float64) * (RANK + 1)
    w = dist.all_reduce(t, async_op=True)
    val = w.get_future().wait()
    CK.check(isinstance(val, list) and len(val) == 1, f"future value {val!r} is not [tensor]")
    CK.check(val[0].data_ptr() == t.data_ptr(), "future value is not the all_reduce'd tensor")
    bad = exact_mismatch(t, torch.arange(10, dtype=torch.float64) * (WS * (WS + 1) / 2))
    CK.check(bad is None, lambda: f"all_reduce via get_future().wait(): {bad}")
    # The future completes just before the Work itself (Gloo does the same), so
    # is_completed() may lag a moment behind the future.
    CK.check(poll_completed(w, 5.0), "work never is_completed() after its future completed (5 s)")
    res = w.result()
    CK.check(len(res) == 1 and res[0].data_ptr() == t.data_ptr(), "work.result() is not [the tensor]")
    # A callback chained on the future sees the reduced value.
    t = torch.ones(10) * (RANK + 1)
    fut = dist.all_reduce(t, async_op=True).get_future().then(lambda f: float(f.value()[0].sum()))
    got = fut.wait()
    CK.check(got == 10 * WS * (WS + 1) / 2, f"future.then callback saw sum {got}")
    # is_completed() turns true without anyone calling wait().
    t = torch.full((1 << 18,), float(RANK))
    w = dist.all_reduce(t, async_op=True)
    deadline = time.monotonic() + 30
    while not w.is_completed() and time.monotonic() < deadline:
        time.sleep(0.002)
    CK.check(w.is_completed(), "is_completed() never became True without wait() (30 s)")
    bad = exact_mismatch(t, torch.full_like(t, tri))
    CK.check(bad is None, lambda: f"all_reduce seen through is_completed(): {bad}")
    CK.check(w.wait() is True, "wait() after completion")
    # Async broadcast, all_gather (future only: the copy-out into separate outputs must
    # be done when the future completes), all_gather_into_tensor, barrier; issued
    # together, waited out of order.
    b = torch.arange(5, dtype=torch.int32) + 100 * RANK
    x = torch.tensor([RANK, -RANK], dtype=torch.int64)
    outs = [torch.full((2,), 77, dtype=torch.int64) for _ in range(WS)]
    flat = torch.full((2 * WS,), -5, dtype=torch.int64)
    wb = dist.broadcast(b, src=WS - 1, async_op=True)
    wg = dist.all_gather(outs, x, async_op=True)
    wt = dist.all_gather_into_tensor(flat, x, async_op=True)
    wr = dist.barrier(async_op=True)
    wr.wait()
    wg.get_future().wait()
    want_blocks = [torch.tensor([r, -r], dtype=torch.int64) for r in range(WS)]
    for r in range(WS):
        bad = exact_mismatch(outs[r], want_blocks[r])
        CK.check(bad is None, lambda: f"async all_gather block {r} after future.wait(): {bad}")
    wt.wait()
    bad = exact_mismatch(flat, torch.cat(want_blocks))
    CK.check(bad is None, lambda: f"async all_gather_into_tensor: {bad}")
    wb.get_future().wait()
    bad = exact_mismatch(b, torch.arange(5, dtype=torch.int32) + 100 * (WS - 1))
    CK.check(bad is None, lambda: f"async broadcast: {bad}")
    for name, w in [("broadcast", wb), ("all_gather", wg), ("all_gather_into_tensor", wt), ("barrier", wr)]:
        CK.check(poll_completed(w, 5.0), f"async {name} never is_completed() after its wait (5 s)")


def sec_async_stress() -> None:
    # Many ops in flight at once, of mixed kinds and sizes, waited for at the end.
    sizes = [1, 1000, 1 << 16, 1 << 18, 7, 1 << 17]
    pending = []
    for k in range(60):
        n = sizes[k % len(sizes)]
        if k % 3 == 2:
            t = torch.full((n,), float(k), dtype=torch.float64) if RANK == k % WS else torch.zeros(n, dtype=torch.float64)
            pending.append(("broadcast", k, t, dist.broadcast(t, src=k % WS, async_op=True),
                            torch.full((n,), float(k), dtype=torch.float64)))
        else:
            t = torch.full((n,), float(RANK + k))
            pending.append(("all_reduce", k, t, dist.all_reduce(t, async_op=True),
                            torch.full((n,), float(WS * k + WS * (WS - 1) / 2))))
    for name, k, t, w, want in pending:
        w.wait()
        bad = exact_mismatch(t, want)
        CK.check(bad is None, lambda: f"{name} #{k} of 60 in flight: {bad}")
    # The Work keeps its tensor alive: nothing else refers to this one.
    w = dist.all_reduce(torch.full((1 << 20,), float(RANK + 1)), async_op=True)
    gc.collect()
    junk = [torch.full((1 << 20,), -7.0) for _ in range(4)]  # reuse any freed memory
    (out,) = w.get_future().wait()
    del junk
    bad = exact_mismatch(out, torch.full((1 << 20,), WS * (WS + 1) / 2))
    CK.check(bad is None, lambda: f"all_reduce of a tensor only the Work refers to: {bad}")


def poll_completed(w, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not w.is_completed() and time.monotonic() < deadline:
        time.sleep(0.001)
    return w.is_completed()


def sec_in_place() -> None:
    tri = WS * (WS + 1) / 2
    # all_reduce of a view: only the view's elements change.
    base = torch.arange(100, dtype=torch.float32) * (RANK + 1)
    big = base.clone()
    v = big[10:20]
    dist.all_reduce(v)
    want = base.clone()
    want[10:20] = torch.arange(10, 20, dtype=torch.float32) * tri
    bad = exact_mismatch(big, want)
    CK.check(bad is None, lambda: f"all_reduce of a slice: {bad}")
    # 0-dim tensor (a loss, say)
    s = torch.tensor(float(RANK + 1))
    dist.all_reduce(s)
    CK.check(s.dim() == 0 and s.item() == tri, f"0-dim all_reduce gave {s!r}, want {tri}")
    # 3-D contiguous tensor
    t3 = torch.ones(2, 3, 4, dtype=torch.int32) * (RANK + 1)
    dist.all_reduce(t3, op=ReduceOp.MAX)
    CK.check(t3.shape == (2, 3, 4) and bool((t3 == WS).all()), f"3-D all_reduce MAX gave {t3}")
    # broadcast into a view
    big = torch.zeros(50, dtype=torch.int64)
    if RANK == 0:
        big[5:15] = torch.arange(10)
    dist.broadcast(big[5:15], src=0)
    want = torch.zeros(50, dtype=torch.int64)
    want[5:15] = torch.arange(10)
    bad = exact_mismatch(big, want)
    CK.check(bad is None, lambda: f"broadcast into a slice: {bad}")
    # all_gather into consecutive views that start at an offset of a larger buffer
    buf = torch.full((WS * 10 + 7,), -1.0)
    outs = list(buf[3:3 + WS * 10].split(10))
    x = torch.arange(10, dtype=torch.float32) + 10 * RANK
    dist.all_gather(outs, x)
    want = torch.full((WS * 10 + 7,), -1.0)
    want[3:3 + WS * 10] = torch.arange(WS * 10, dtype=torch.float32)
    bad = exact_mismatch(buf, want)
    CK.check(bad is None, lambda: f"all_gather into views at an offset: {bad}")
    # all_gather into views of one buffer in reverse order (not consecutive: staged)
    buf = torch.full((WS, 10), -1.0)
    outs = list(buf.unbind(0))[::-1]
    dist.all_gather(outs, x)
    want = (torch.arange(WS * 10, dtype=torch.float32).reshape(WS, 10)).flip(0)
    bad = exact_mismatch(buf, want)
    CK.check(bad is None, lambda: f"all_gather into reversed views of one buffer: {bad}")
    # in place, list form: the input is this rank's output tensor
    buf = torch.full((WS, 10), -1.0)
    buf[RANK] = x
    dist.all_gather(list(buf.unbind(0)), buf[RANK])
    bad = exact_mismatch(buf.reshape(-1), torch.arange(WS * 10, dtype=torch.float32))
    CK.check(bad is None, lambda: f"all_gather in place (input is output[rank]): {bad}")
    # all_gather_into_tensor into a slice of a larger buffer
    buf = torch.full((WS * 10 + 7,), -1.0)
    dist.all_gather_into_tensor(buf[5:5 + WS * 10], x)
    want = torch.full((WS * 10 + 7,), -1.0)
    want[5:5 + WS * 10] = torch.arange(WS * 10, dtype=torch.float32)
    bad = exact_mismatch(buf, want)
    CK.check(bad is None, lambda: f"all_gather_into_tensor into a slice: {bad}")
    # complex64: torch reduces it as a float32 view (SUM)
    c = torch.complex(torch.arange(4, dtype=torch.float32) + RANK, -torch.arange(4, dtype=torch.float32) * (RANK + 1))
    dist.all_reduce(c)
    rsum = WS * (WS - 1) / 2
    want = torch.complex(torch.arange(4, dtype=torch.float32) * WS + rsum, -torch.arange(4, dtype=torch.float32) * tri)
    bad = exact_mismatch(c, want)
    CK.check(bad is None, lambda: f"complex64 all_reduce SUM: {bad}")
    # A parameter's .data and .grad (what DDP-style code reduces)
    p = torch.nn.Parameter(torch.ones(6) * (RANK + 1))
    p.grad = torch.ones(6) * RANK
    dist.all_reduce(p.data)
    dist.all_reduce(p.grad, op=ReduceOp.AVG)
    CK.check(bool((p.data == tri).all()), f"all_reduce of param.data gave {p.data}")
    CK.check(bool((p.grad == (WS - 1) / 2).all()), f"all_reduce AVG of param.grad gave {p.grad}")

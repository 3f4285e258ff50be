"""One rank of the collectives test: gonccl (default group) vs Gloo (a subgroup over the
same ranks) vs a torch reference computed locally from every rank's seeded input.

usage: collectives_worker.py REPORT_DIR      (env: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)

Every input is generated from a seed that depends only on (case number, rank), so each
rank can regenerate every other rank's input and compute the expected result itself:
a bug that gonccl shared with Gloo could not hide. Integer ranges are chosen so no
reduction overflows (the result is then exact and unambiguous); an integer AVG is the
sum divided by the world size, truncated (NCCL's semantics). Integers and MIN/MAX are
compared exactly; so are float SUM/AVG/PRODUCT on 1 or 2 ranks, where the correctly
rounded result is unique (this checks fp16/bf16 round-to-nearest-even bit for bit);
on 3-4 ranks floats are compared within the worst-case rounding error of any order
of operations in the dtype.

Checks are grouped in sections (see _common.Checker); the report of each rank says
which sections ran and which checks failed, and tests/test_collectives.py asserts on
it section by section.
"""

from __future__ import annotations

import gc
import hashlib
import os
import sys
import threading
import time
import warnings
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.distributed import ReduceOp

import _device
from _common import Checker, close_mismatch, exact_mismatch

DTYPES = [
    torch.float32, torch.float64, torch.float16, torch.bfloat16,
    torch.int8, torch.uint8, torch.int32, torch.int64,
]
# element count -> shape (the 1000-element case is 2-D)
SHAPES = {0: (0,), 1: (1,), 7: (7,), 1000: (8, 125)}
LARGE = (1 << 20) + 3  # float32 only; odd, so no algorithm divides it evenly
OPS = {
    "SUM": ReduceOp.SUM,
    "AVG": ReduceOp.AVG,
    "MIN": ReduceOp.MIN,
    "MAX": ReduceOp.MAX,
    "PRODUCT": ReduceOp.PRODUCT,
}
# Integer input ranges [lo, hi) per op: wide enough to need every bit of the type
# (int32 sums above 2**24 and int64 sums above 2**53 catch a float intermediate),
# narrow enough that 4 ranks cannot overflow.
INT_RANGES = {
    "SUM": {torch.int8: (-31, 32), torch.uint8: (0, 64), torch.int32: (-2**28, 2**28),
            torch.int64: (-2**60, 2**60)},
    "PRODUCT": {torch.int8: (-3, 4), torch.uint8: (0, 4), torch.int32: (-100, 101),
                torch.int64: (-30000, 30001)},
    "MIN": {torch.int8: (-128, 128), torch.uint8: (0, 256), torch.int32: (-2**31, 2**31),
            torch.int64: (-2**62, 2**62)},
}
INT_RANGES["AVG"] = INT_RANGES["SUM"]
INT_RANGES["MAX"] = INT_RANGES["MIN"]

RANK = int(os.environ["RANK"])
WS = int(os.environ["WORLD_SIZE"])
GLOO = None
CK: Checker
DIGESTS: list[tuple[str, str]] = []  # (case, sha256 of this rank's result bytes)


def numel(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def make_input(dtype, shape, kind: str, rank: int, case: int) -> torch.Tensor:
    """The input of `rank` for case number `case`: depends on nothing else."""
    g = torch.Generator().manual_seed(case * 7919 + rank * 104729 + 17)
    n = numel(shape)
    if dtype.is_floating_point:
        if kind == "PRODUCT":
            mag = torch.rand(n, generator=g, dtype=torch.float64) + 0.5
            sign = torch.where(torch.rand(n, generator=g, dtype=torch.float64) < 0.5, -1.0, 1.0)
            x = mag * sign
        else:
            x = torch.randn(n, generator=g, dtype=torch.float64) * 3.0
        return x.to(dtype).reshape(shape)
    lo, hi = INT_RANGES[kind][dtype]
    return torch.randint(lo, hi, (n,), generator=g, dtype=torch.int64).to(dtype).reshape(shape)


def sentinel(dtype, shape) -> torch.Tensor:
    """Garbage that any element a collective forgets to write will not match."""
    if dtype.is_floating_point:
        return torch.full(shape, float("nan"), dtype=dtype)
    return torch.full(shape, 77, dtype=dtype)


def reference(inputs: list[torch.Tensor], opname: str, dtype):
    """Expected all_reduce result from every rank's input.

    Returns ("exact", tensor in dtype) or ("close", float64 value, float64 tolerance).

    Floats: with at most 2 ranks a SUM, AVG or PRODUCT is one correctly rounded
    operation on two values whose exact result float64 holds, so the answer is unique:
    round-to-nearest-even of the float64 result (this is how fp16/bf16 rounding is
    checked bit for bit). With more ranks the order of operations is the
    implementation's: the tolerance is the worst-case rounding of any order in dtype
    arithmetic with unit roundoff u = eps/2, plus a margin of one rounding:
    (ws+1) * u * sum(|x_i|) for sums, (ws+1) * u * |prod| for products.
    """
    ws = len(inputs)
    if not dtype.is_floating_point:
        x = torch.stack([t.to(torch.int64) for t in inputs])
        if opname == "SUM":
            r = x.sum(0)
        elif opname == "AVG":
            # NCCL-style integer average: the sum divided by the rank count, truncated.
            r = torch.div(x.sum(0), ws, rounding_mode="trunc")
        elif opname == "PRODUCT":
            r = x.prod(0)
        elif opname == "MIN":
            r = x.min(0).values
        else:
            r = x.max(0).values
        return ("exact", r.to(dtype))
    x = torch.stack([t.double() for t in inputs])
    fi = torch.finfo(dtype)
    u, tiny = fi.eps / 2, fi.tiny
    if opname == "MIN":
        return ("exact", x.min(0).values.to(dtype))
    if opname == "MAX":
        return ("exact", x.max(0).values.to(dtype))
    if opname == "SUM":
        r = x.sum(0)
        tol = (ws + 1) * u * x.abs().sum(0) + tiny
    elif opname == "AVG":
        r = x.sum(0) / ws
        tol = (ws + 1) * u * x.abs().sum(0) / ws + 2 * u * r.abs() + tiny
    else:
        r = x.prod(0)
        tol = (ws + 1) * u * r.abs() + tiny
    if ws <= 2:
        return ("exact", r.to(dtype))
    return ("close", r, tol)


def digest(case: str, t: torch.Tensor) -> None:
    raw = t.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
    DIGESTS.append((case, hashlib.sha256(raw).hexdigest()))


def check_result(case: str, got: torch.Tensor, ref, who: str) -> None:
    if ref[0] == "exact":
        bad = exact_mismatch(got, ref[1])
        CK.check(bad is None, lambda: f"{case}: {who} != reference: {bad}")
    else:
        bad = close_mismatch(got, ref[1], ref[2])
        CK.check(bad is None, lambda: f"{case}: {who} not within tolerance of reference: {bad}")


def gloo_all_reduce(t: torch.Tensor, opname: str):
    """Gloo's all_reduce of t (in place); AVG, which Gloo lacks, as SUM / world size
    (truncated for integers). Returns (result, None) or (None, error message)."""
    try:
        dist.all_reduce(t, op=ReduceOp.SUM if opname == "AVG" else OPS[opname], group=GLOO)
    except Exception as e:  # noqa: BLE001
        return None, f"{type(e).__name__}: {e}"
    if opname == "AVG":
        if t.dtype.is_floating_point:
            return (t.double() / WS).to(t.dtype), None
        return torch.div(t.to(torch.int64), WS, rounding_mode="trunc").to(t.dtype), None
    return t, None


# --------------------------------------------------------------------------- sections

def sec_all_reduce(case_no: int) -> int:
    gloo_missing = set()
    for opname, op in OPS.items():
        for dtype in DTYPES:
            sizes = list(SHAPES.values())
            # ~1M elements: float32 for every op; the other dtypes (whose kernels
            # convert or vectorize differently) for SUM and MAX, so that the pipelined
            # bandwidth algorithm runs for every dtype too.
            if dtype == torch.float32 or opname in ("SUM", "MAX"):
                sizes.append((LARGE,))
            for shape in sizes:
                case_no += 1
                case = f"all_reduce {opname} {dtype} shape={shape}"
                inputs = [make_input(dtype, shape, opname, r, case_no) for r in range(WS)]
                ref = reference(inputs, opname, dtype)
                mine = inputs[RANK]
                t = mine.clone()
                ptr = t.data_ptr()
                dist.all_reduce(t, op=op)
                CK.check(t.data_ptr() == ptr and t.shape == mine.shape and t.dtype == dtype,
                         f"{case}: result is not in the input tensor")
                check_result(case, t, ref, "gonccl")
                digest(case, t)
                # Gloo oracle over the same ranks and inputs.
                g = mine.clone()
                val, err = gloo_all_reduce(g, opname)
                if val is None:
                    gloo_missing.add(f"{opname} {dtype}: {err.splitlines()[0][:120]}")
                    continue
                if ref[0] == "exact":
                    bad = exact_mismatch(t, val)
                    CK.check(bad is None, lambda: f"{case}: gonccl != gloo: {bad}")
                else:
                    # Both are within tol of the reference, so within 2*tol of each other.
                    bad = close_mismatch(t, val.double(), 2 * ref[2])
                    CK.check(bad is None, lambda: f"{case}: gonccl vs gloo differ by more than 2*tol: {bad}")
    CK.data("gloo_missing", sorted(gloo_missing))
    return case_no


def special_input(dtype, opname: str, rank: int, case: int) -> torch.Tensor:
    """16 seeded values with NaN, +-inf and signed zeros in known places."""
    x = make_input(dtype, (16,), opname, rank, case)
    x[rank] = float("nan")  # positions 0..ws-1: one NaN each, on one rank
    if rank == 0:
        x[8] = float("inf")
        x[10] = float("inf")
        x[12] = -0.0
    if rank == WS - 1 and WS > 1:
        x[9] = float("-inf")
        x[10] = float("-inf")  # +inf + -inf: NaN for SUM/AVG
    x[11] = -0.0
    if rank != 0:
        x[12] = 0.0
    return x


def sec_all_reduce_special(case_no: int) -> int:
    # NaN and infinities propagate as IEEE arithmetic and torch.max/min (NaN wins)
    # say, and every rank ends with the same bits (checked in identical_across_ranks).
    for opname, op in OPS.items():
        for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
            case_no += 1
            case = f"all_reduce {opname} {dtype} with NaN/inf/-0"
            inputs = [special_input(dtype, opname, r, case_no) for r in range(WS)]
            ref = reference(inputs, opname, dtype)
            t = inputs[RANK].clone()
            dist.all_reduce(t, op=op)
            check_result(case, t, ref, "gonccl")
            digest(case, t)
    return case_no


def sec_broadcast(case_no: int) -> int:
    for root in range(WS):
        for dtype in DTYPES:
            sizes = list(SHAPES.values())
            if dtype == torch.float32:
                sizes.append((LARGE,))
            for shape in sizes:
                case_no += 1
                case = f"broadcast root={root} {dtype} shape={shape}"
                src = make_input(dtype, shape, "MIN", root, case_no)
                # Non-roots start from different data (their own seeded input).
                init = src.clone() if RANK == root else make_input(dtype, shape, "MIN", RANK + 1000, case_no)
                t = init.clone()
                ptr = t.data_ptr()
                dist.broadcast(t, src=root)
                CK.check(t.data_ptr() == ptr, f"{case}: result not in the input tensor")
                bad = exact_mismatch(t, src)
                CK.check(bad is None, lambda: f"{case}: gonccl != root's data: {bad}")
                digest(case, t)
                g = init.clone()
                dist.broadcast(g, src=root, group=GLOO)
                bad = exact_mismatch(t, g)
                CK.check(bad is None, lambda: f"{case}: gonccl != gloo: {bad}")
    return case_no


def sec_all_gather(case_no: int) -> int:
    for dtype in DTYPES:
        sizes = list(SHAPES.values())
        if dtype == torch.float32:
            sizes.append((LARGE,))
        for shape in sizes:
            case_no += 1
            case = f"all_gather {dtype} shape={shape}"
            refs = [make_input(dtype, shape, "MIN", r, case_no) for r in range(WS)]
            x = refs[RANK].clone()
            # 1. separate output tensors (gonccl gathers into a staging buffer, copies out)
            outs = [sentinel(dtype, shape) for _ in range(WS)]
            dist.all_gather(outs, x)
            for r in range(WS):
                bad = exact_mismatch(outs[r], refs[r])
                CK.check(bad is None, lambda: f"{case} (separate outputs): block of rank {r}: {bad}")
                digest(f"{case} block {r}", outs[r])
            # 2. outputs that are consecutive views of one buffer (gathered in place)
            if numel(shape) > 0:
                buf = sentinel(dtype, (WS, *shape))
                views = list(buf.unbind(0))
                dist.all_gather(views, x)
                bad = exact_mismatch(buf, torch.stack(refs))
                CK.check(bad is None, lambda: f"{case} (views of one buffer): {bad}")
            bad = exact_mismatch(x, refs[RANK])
            CK.check(bad is None, lambda: f"{case}: the input was modified: {bad}")
            # 3. gloo
            gouts = [sentinel(dtype, shape) for _ in range(WS)]
            dist.all_gather(gouts, x, group=GLOO)
            for r in range(WS):
                bad = exact_mismatch(outs[r], gouts[r])
                CK.check(bad is None, lambda: f"{case}: block {r} gonccl != gloo: {bad}")
    return case_no


def sec_all_gather_into_tensor(case_no: int) -> int:
    gloo_missing = []
    for dtype in DTYPES:
        sizes = list(SHAPES.values())
        if dtype == torch.float32:
            sizes.append((LARGE,))
        for shape in sizes:
            case_no += 1
            case = f"all_gather_into_tensor {dtype} shape={shape}"
            refs = [make_input(dtype, shape, "MIN", r, case_no) for r in range(WS)]
            x = refs[RANK].clone()
            cat = torch.cat(refs)
            # concatenated along dim 0
            out = sentinel(dtype, tuple(cat.shape))
            dist.all_gather_into_tensor(out, x)
            bad = exact_mismatch(out, cat)
            CK.check(bad is None, lambda: f"{case} (concatenated): {bad}")
            digest(case, out)
            # stacked: (world_size, *shape)
            out2 = sentinel(dtype, (WS, *shape))
            dist.all_gather_into_tensor(out2, x)
            bad = exact_mismatch(out2, torch.stack(refs))
            CK.check(bad is None, lambda: f"{case} (stacked): {bad}")
            # in place: the input is this rank's block of the output
            out3 = sentinel(dtype, tuple(cat.shape))
            n0 = shape[0]
            mine = out3[RANK * n0:(RANK + 1) * n0]
            mine.copy_(x)
            dist.all_gather_into_tensor(out3, mine)
            bad = exact_mismatch(out3, cat)
            CK.check(bad is None, lambda: f"{case} (in place): {bad}")
            bad = exact_mismatch(x, refs[RANK])
            CK.check(bad is None, lambda: f"{case}: the input was modified: {bad}")
            # gloo
            gout = sentinel(dtype, tuple(cat.shape))
            try:
                dist.all_gather_into_tensor(gout, x, group=GLOO)
            except Exception as e:  # noqa: BLE001
                gloo_missing.append(f"{dtype}: {type(e).__name__}: {str(e)[:100]}")
                continue
            bad = exact_mismatch(out, gout)
            CK.check(bad is None, lambda: f"{case}: gonccl != gloo: {bad}")
    CK.data("gloo_missing", gloo_missing)
    return case_no


def sec_barrier() -> None:
    dist.barrier()
    for _ in range(20):
        dist.barrier()
    w = dist.barrier(async_op=True)
    CK.check(w.wait() is True, "barrier work.wait() did not return True")
    CK.check(w.is_completed(), "barrier work not completed after wait()")
    if WS > 1:
        # Rank 0 arrives 1.5 s late: everyone else must be held until it does.
        dist.barrier()
        if RANK == 0:
            time.sleep(1.5)
        t0 = time.monotonic()
        dist.barrier()
        held = time.monotonic() - t0
        CK.data("held_sync", held)
        if RANK != 0:
            CK.check(held >= 1.0, f"barrier released rank {RANK} after {held:.3f} s, before rank 0 arrived (1.5 s)")
        # Same with async_op=True.
        dist.barrier()
        if RANK == WS - 1:
            time.sleep(1.5)
        t0 = time.monotonic()
        w = dist.barrier(async_op=True)
        w.wait()
        held = time.monotonic() - t0
        if RANK != WS - 1:
            CK.check(held >= 1.0, f"async barrier released rank {RANK} after {held:.3f} s, "
                                  f"before rank {WS - 1} arrived (1.5 s)")


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


def sec_all_reduce_coalesced(case_no: int) -> int:
    shapes = [(3,), (2, 5), (0,), (1000,), (1,)]
    warnings.simplefilter("ignore", FutureWarning)
    for dtype in (torch.float32, torch.int64, torch.float16):
        for opname in ("SUM", "MAX"):
            case_no += 1
            case = f"all_reduce_coalesced {opname} {dtype}"
            inputs = [[make_input(dtype, s, opname, r, case_no * 10 + i) for i, s in enumerate(shapes)]
                      for r in range(WS)]
            refs = [reference([inputs[r][i] for r in range(WS)], opname, dtype) for i in range(len(shapes))]
            ts = [t.clone() for t in inputs[RANK]]
            dist.all_reduce_coalesced(ts, op=OPS[opname])
            for i, t in enumerate(ts):
                check_result(f"{case} tensor {i} {shapes[i]}", t, refs[i], "gonccl")
                digest(f"{case} tensor {i}", t)
            gs = [t.clone() for t in inputs[RANK]]
            dist.all_reduce_coalesced(gs, op=OPS[opname], group=GLOO)
            for i, (t, g) in enumerate(zip(ts, gs)):
                if refs[i][0] == "exact":
                    bad = exact_mismatch(t, g)
                else:
                    bad = close_mismatch(t, g.double(), 2 * refs[i][2])
                CK.check(bad is None, lambda: f"{case} tensor {i}: gonccl vs gloo: {bad}")
            # async form: returns a future
            ts = [t.clone() for t in inputs[RANK]]
            fut = dist.all_reduce_coalesced(ts, op=OPS[opname], async_op=True)
            fut.wait()
            for i, t in enumerate(ts):
                check_result(f"{case} async tensor {i}", t, refs[i], "gonccl")
            # the coalescing manager's fast path (allreduce_coalesced underneath)
            ts = [t.clone() for t in inputs[RANK]]
            with dist._coalescing_manager():
                for t in ts:
                    dist.all_reduce(t, op=OPS[opname])
            for i, t in enumerate(ts):
                check_result(f"{case} _coalescing_manager tensor {i}", t, refs[i], "gonccl")
            ts = [t.clone() for t in inputs[RANK]]
            with dist._coalescing_manager(async_ops=True) as cm:
                for t in ts:
                    dist.all_reduce(t, op=OPS[opname], async_op=True)
            cm.wait()
            for i, t in enumerate(ts):
                check_result(f"{case} _coalescing_manager(async) tensor {i}", t, refs[i], "gonccl")
    return case_no


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


def sec_identical() -> None:
    """Every rank must hold bit-identical results (DDP relies on it)."""
    mine = DIGESTS
    gathered = [None] * WS
    dist.all_gather_object(gathered, mine, group=GLOO)
    CK.data("cases", len(mine))
    for r in range(WS):
        other = gathered[r]
        CK.check(len(other) == len(mine), f"rank {r} recorded {len(other)} results, this rank {len(mine)}")
        diffs = [c for (c, h), (c2, h2) in zip(mine, other) if h != h2 or c != c2]
        CK.check(not diffs, lambda: f"{len(diffs)} results differ bitwise between rank {RANK} and rank {r}, "
                                    f"e.g. {diffs[:5]}")


def sec_shutdown() -> None:
    t0 = time.monotonic()
    dist.destroy_process_group()
    took = time.monotonic() - t0
    CK.data("destroy_seconds", took)
    CK.check(took < 20, f"destroy_process_group() took {took:.1f} s")
    CK.check(not dist.is_initialized(), "still initialized after destroy_process_group()")


def main() -> None:
    global GLOO, CK
    report_dir = sys.argv[1]
    CK = Checker(report_dir, RANK)
    _device.install()  # GONCCL_TEST_DEVICE=cuda: gonccl's ops on CUDA tensors
    with CK.section("init"):
        dist.init_process_group("gonccl", timeout=timedelta(seconds=60))
        CK.check(dist.get_backend() == "gonccl", f"default backend is {dist.get_backend()}")
        CK.check(dist.get_rank() == RANK and dist.get_world_size() == WS,
                 f"rank/size {dist.get_rank()}/{dist.get_world_size()} != {RANK}/{WS}")
        GLOO = dist.new_group(backend="gloo")
        CK.data("algo", os.environ.get("GONCCL_ALGO", ""))
    if GLOO is None:
        CK.finish()
        return
    case_no = 0
    with CK.section("all_reduce"):
        case_no = sec_all_reduce(case_no)
    case_no = 5000
    with CK.section("all_reduce_special_values"):
        case_no = sec_all_reduce_special(case_no)
    case_no = 10000
    with CK.section("broadcast"):
        case_no = sec_broadcast(case_no)
    case_no = 20000
    with CK.section("all_gather"):
        case_no = sec_all_gather(case_no)
    case_no = 30000
    with CK.section("all_gather_into_tensor"):
        case_no = sec_all_gather_into_tensor(case_no)
    with CK.section("barrier"):
        sec_barrier()
    with CK.section("async"):
        sec_async()
    with CK.section("async_stress"):
        sec_async_stress()
    with CK.section("in_place"):
        sec_in_place()
    case_no = 40000
    with CK.section("all_reduce_coalesced"):
        sec_all_reduce_coalesced(case_no)
    with CK.section("identical_across_ranks"):
        sec_identical()
    with CK.section("subgroups"):
        sec_subgroups()
    with CK.section("threads"):
        sec_threads()
    with CK.section("group_churn"):
        sec_group_churn()
    with CK.section("signals"):
        sec_signals()
    with CK.section("shutdown"):
        sec_shutdown()
    CK.finish()


if __name__ == "__main__":
    main()

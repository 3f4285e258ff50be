"""What every section of the collectives worker shares (collectives_worker.py runs them):
this rank's place in the run, its Checker, the Gloo group used as the oracle, the
dtypes, shapes and ops covered, the seeded inputs and the local torch reference.

RANK and WS come from the environment and CK reports into the worker's one argument
(REPORT_DIR); all three are set on import, before any section runs.
"""

from __future__ import annotations

import hashlib
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed import ReduceOp

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
CK = Checker(sys.argv[1], RANK)
DIGESTS: list[tuple[str, str]] = []  # (case, sha256 of this rank's result bytes)

_gloo = None


def new_gloo_group() -> None:
    """Makes the Gloo group over the same ranks that the sections compare gonccl with;
    called once, after init_process_group."""
    global _gloo
    _gloo = dist.new_group(backend="gloo")


def gloo():
    """The Gloo group of new_gloo_group(), or None before it ran."""
    return _gloo


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
        dist.all_reduce(t, op=ReduceOp.SUM if opname == "AVG" else OPS[opname], group=gloo())
    except Exception as e:  # noqa: BLE001
        return None, f"{type(e).__name__}: {e}"
    if opname == "AVG":
        if t.dtype.is_floating_point:
            return (t.double() / WS).to(t.dtype), None
        return torch.div(t.to(torch.int64), WS, rounding_mode="trunc").to(t.dtype), None
    return t, None


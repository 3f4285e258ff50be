"""Seeded inputs and an independent reduction reference, shared by the differential and
per-operation workers.

Every input depends only on (seed, rank, dtype, count, op), so each rank can regenerate
every other rank's input and compute the expected result locally: integers through numpy
(exact, with C wrap-around for unsigned types), floats in float64 with the worst-case
rounding error of any order of operations in the dtype as tolerance.
"""

from __future__ import annotations

import numpy as np
import torch
from torch.distributed import ReduceOp

FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
COMPLEX = (torch.complex64, torch.complex128)
FLOAT8 = tuple(getattr(torch, n) for n in ("float8_e4m3fn", "float8_e5m2") if hasattr(torch, n))
INTS = (torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64) + tuple(
    getattr(torch, n) for n in ("uint16", "uint32", "uint64") if hasattr(torch, n))
BITWISE = ("BAND", "BOR", "BXOR")
OPS = {
    "SUM": ReduceOp.SUM, "AVG": ReduceOp.AVG, "PRODUCT": ReduceOp.PRODUCT, "MIN": ReduceOp.MIN,
    "MAX": ReduceOp.MAX, "BAND": ReduceOp.BAND, "BOR": ReduceOp.BOR, "BXOR": ReduceOp.BXOR,
}
NP_OF = {torch.int8: np.int8, torch.uint8: np.uint8, torch.int16: np.int16, torch.int32: np.int32,
         torch.int64: np.int64, torch.bool: np.bool_}
for _n in ("uint16", "uint32", "uint64"):
    if hasattr(torch, _n):
        NP_OF[getattr(torch, _n)] = getattr(np, _n)


def itemsize(dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def iinfo(dtype):
    return np.iinfo(NP_OF[dtype])


def valid_ops(dtype) -> list[str]:
    """The reduce ops that make sense for dtype (what gonccl must support)."""
    if dtype == torch.bool:
        return ["MIN", "MAX", "PRODUCT", "BAND", "BOR", "BXOR"]
    if dtype in INTS:
        return ["SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR"]
    if dtype in COMPLEX:
        return ["SUM", "AVG"]
    if dtype in FLOATS:
        return ["SUM", "AVG", "PRODUCT", "MIN", "MAX"]
    return []


def make_input(dtype, n: int, opname: str, nranks: int, seed: int) -> torch.Tensor:
    """n seeded values of dtype for reduce op `opname` (or "COPY" for data movement),
    in ranges where a reduction over nranks ranks cannot overflow (signed) or is exact."""
    g = torch.Generator().manual_seed(seed & 0x7FFFFFFFFFFFFFFF)
    if dtype == torch.bool:
        return torch.randint(0, 2, (n,), generator=g, dtype=torch.uint8).bool()
    if dtype in FLOATS or dtype in FLOAT8:
        if opname == "PRODUCT":
            mag = torch.rand(n, generator=g, dtype=torch.float64) + 0.5
            sign = torch.where(torch.rand(n, generator=g, dtype=torch.float64) < 0.5, -1.0, 1.0)
            return (mag * sign).to(dtype)
        return (torch.randn(n, generator=g, dtype=torch.float64) * 3.0).to(dtype)
    if dtype in COMPLEX:
        return torch.randn(n, generator=g, dtype=torch.complex128).mul(3.0).to(dtype)
    # Integers: raw random bytes give the full range of any width, signed or not.
    raw = torch.randint(0, 256, (n * itemsize(dtype),), generator=g, dtype=torch.uint8)
    x = raw.view(dtype) if n else torch.empty(0, dtype=dtype)
    if opname in ("SUM", "AVG", "PRODUCT"):
        info = iinfo(dtype)
        k, top = max(nranks, 1), int(info.max)
        if opname == "PRODUCT":
            m = int(float(top) ** (1.0 / k))
            while m > 1 and m ** k > top:
                m -= 1
            while (m + 1) ** k <= top:
                m += 1
            m = min(m, 1 << 20)
        else:
            m = top // k
        m = min(m, 1 << 62)
        a = x.numpy().astype(np.uint64) if x.numel() else np.zeros(0, np.uint64)
        if info.min < 0:  # values in [-m, m]
            v = (a % np.uint64(2 * m + 1)).astype(np.int64) - m
        else:
            v = (a % np.uint64(m + 1)).astype(np.int64)
        x = torch.from_numpy(v.astype(NP_OF[dtype]))
    return x


def to_np(t: torch.Tensor) -> np.ndarray:
    return t.contiguous().numpy()


def reduce_reference(inputs: list[torch.Tensor], opname: str, dtype, premul=None):
    """Expected elementwise reduction of inputs (same shape).

    Returns ("exact", tensor) or ("close", float64/complex128 value, float64 tolerance).
    """
    n = len(inputs)
    shape = inputs[0].shape
    if dtype == torch.bool:
        a = np.stack([to_np(t).astype(np.uint8) for t in inputs])
        if opname in ("MIN", "BAND", "PRODUCT"):
            r = a.min(0) if n else a
        elif opname in ("MAX", "BOR"):
            r = a.max(0)
        elif opname == "BXOR":
            r = np.bitwise_xor.reduce(a, axis=0)
        else:
            raise ValueError(opname)
        return ("exact", torch.from_numpy(r.astype(np.bool_)).reshape(shape))
    if dtype in INTS:
        npt = NP_OF[dtype]
        a = np.stack([to_np(t) for t in inputs])
        with np.errstate(over="ignore"):
            if opname == "SUM":
                r = a.sum(0, dtype=npt)
            elif opname == "AVG":
                if iinfo(dtype).min < 0:
                    s = a.astype(np.int64).sum(0)
                    r = (np.sign(s) * (np.abs(s) // n)).astype(npt)  # truncated, like NCCL
                else:
                    r = (a.astype(np.uint64).sum(0) // np.uint64(n)).astype(npt)
            elif opname == "PRODUCT":
                r = a.prod(0, dtype=npt)
            elif opname == "MIN":
                r = a.min(0)
            elif opname == "MAX":
                r = a.max(0)
            elif opname == "BAND":
                r = np.bitwise_and.reduce(a, axis=0)
            elif opname == "BOR":
                r = np.bitwise_or.reduce(a, axis=0)
            elif opname == "BXOR":
                r = np.bitwise_xor.reduce(a, axis=0)
            else:
                raise ValueError(opname)
        return ("exact", torch.from_numpy(np.ascontiguousarray(r).astype(npt)).reshape(shape))
    cplx = dtype in COMPLEX
    wide = torch.complex128 if cplx else torch.float64
    x = torch.stack([t.to(wide) for t in inputs])
    real_dt = {torch.complex64: torch.float32, torch.complex128: torch.float64}.get(dtype, dtype)
    fi = torch.finfo(real_dt)
    u, tiny = fi.eps / 2, fi.tiny
    if opname == "MIN":
        return ("exact", x.min(0).values.to(dtype))
    if opname == "MAX":
        return ("exact", x.max(0).values.to(dtype))
    if opname == "PREMUL":
        f = float(premul)
        terms = x * f
        r = terms.sum(0)
        tol = (n + 2) * u * terms.abs().sum(0) + tiny
    elif opname == "SUM":
        r = x.sum(0)
        tol = (n + 1) * u * x.abs().sum(0) + tiny
    elif opname == "AVG":
        r = x.sum(0) / n
        tol = (n + 1) * u * x.abs().sum(0) / n + 2 * u * r.abs() + tiny
    elif opname == "PRODUCT":
        r = x.prod(0)
        tol = (2 * n + 1) * u * r.abs() + tiny
    else:
        raise ValueError(opname)
    if cplx:
        tol = tol * 2
    return ("close", r, tol.double())


def mismatch(got: torch.Tensor, ref) -> str | None:
    """None if got matches reference ("exact", t) / ("close", v, tol), else a description."""
    from _common import close_mismatch, exact_mismatch

    if ref[0] == "exact":
        return exact_mismatch(got, ref[1])
    want, tol = ref[1], ref[2]
    if got.is_complex():
        if got.shape != want.shape:
            return f"shape {tuple(got.shape)} != expected {tuple(want.shape)}"
        bad = close_mismatch(torch.view_as_real(got.contiguous()).double(),
                             torch.view_as_real(want.contiguous()), tol.unsqueeze(-1).expand(*tol.shape, 2))
        return bad
    return close_mismatch(got, want, tol)

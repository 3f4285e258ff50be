"""The collectives gonccl.bench measures: buffers, calls, reference results, busbw.

Size and bandwidth conventions are nccl-tests' (doc/PERFORMANCE.md):

* algbw = S / t, in GB/s (1 GB = 1e9 bytes), t the time of one operation;
* busbw = algbw * factor, factor per collective (n = number of ranks):
  all_reduce 2(n-1)/n; all_gather, reduce_scatter, alltoall (n-1)/n;
  broadcast, reduce, sendrecv 1;
* S, the "size" column, is the byte size of the larger buffer: for all_gather the
  gathered output, for reduce_scatter the full input, for alltoall the whole send
  (= receive) buffer; the "count" column is then the per-rank count (elements each rank
  contributes / receives / sends to each peer), as nccl-tests prints it.

torch's all_reduce, broadcast and reduce are in-place only, and alltoall and sendrecv
are out-of-place only: the columns a collective has no form for print N/A.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.distributed as dist

# name -> (factor as a function of n, description)
BUSBW_FACTORS: dict[str, tuple[Callable[[int], float], str]] = {
    "all_reduce": (lambda n: 2.0 * (n - 1) / n, "2(n-1)/n"),
    "all_gather": (lambda n: (n - 1) / n, "(n-1)/n"),
    "reduce_scatter": (lambda n: (n - 1) / n, "(n-1)/n"),
    "alltoall": (lambda n: (n - 1) / n, "(n-1)/n"),
    "broadcast": (lambda n: 1.0, "1"),
    "reduce": (lambda n: 1.0, "1"),
    "sendrecv": (lambda n: 1.0, "1"),
}

COLLECTIVES = tuple(BUSBW_FACTORS)

# collective -> (has out-of-place form, has in-place form) in torch's API
FORMS = {
    "all_reduce": (False, True),
    "all_gather": (True, True),
    "reduce_scatter": (True, True),
    "alltoall": (True, False),
    "broadcast": (False, True),
    "reduce": (False, True),
    "sendrecv": (True, False),
}

REDUCING = {"all_reduce", "reduce_scatter", "reduce"}
ROOTED = {"broadcast", "reduce"}
# sizes split into n equal per-rank pieces
SPLIT = {"all_gather", "reduce_scatter", "alltoall"}

DTYPES = {
    "float": torch.float32, "float32": torch.float32,
    "half": torch.float16, "float16": torch.float16,
    "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
    "double": torch.float64, "float64": torch.float64,
    "int32": torch.int32, "int": torch.int32,
    "int8": torch.int8, "char": torch.int8,
    "uint8": torch.uint8,
    "int64": torch.int64,
    "int16": torch.int16,
}

# nccl-tests' short type names, for the "type" column
TYPE_NAMES = {
    torch.float32: "float", torch.float16: "half", torch.bfloat16: "bfloat16",
    torch.float64: "double", torch.int32: "int32", torch.int8: "int8",
    torch.uint8: "uint8", torch.int64: "int64", torch.int16: "int16",
}

OPS = {
    "sum": dist.ReduceOp.SUM,
    "prod": dist.ReduceOp.PRODUCT,
    "min": dist.ReduceOp.MIN,
    "max": dist.ReduceOp.MAX,
    "avg": dist.ReduceOp.AVG,
}


def busbw_factor(coll: str, nranks: int) -> float:
    return BUSBW_FACTORS[coll][0](nranks)


@dataclass
class Shape:
    """One row's sizes: what the table prints and what the buffers hold."""

    size: int  # bytes, the "size" column (S in algbw = S/t)
    count: int  # elements, the "count" column
    per_rank: int  # elements per rank piece (== count for non-split collectives)
    total: int  # elements in the larger buffer


def shape_for(coll: str, nbytes: int, elsize: int, nranks: int) -> Shape | None:
    """The row for a requested byte size, rounded down as nccl-tests does; None if it
    rounds to zero elements."""
    count = nbytes // elsize
    if coll in SPLIT:
        per = count // nranks
        if per == 0:
            return None
        total = per * nranks
        return Shape(size=total * elsize, count=per, per_rank=per, total=total)
    if count == 0:
        return None
    return Shape(size=count * elsize, count=count, per_rank=count, total=count)


# ---------------------------------------------------------------------------- data


def check_values(rank: int, numel: int, dtype: torch.dtype, op: str) -> torch.Tensor:
    """Deterministic data of `rank`, chosen so every reduction of up to a few ranks is
    exact in `dtype` (small integers; for prod only 1, 2 and -1; no subnormals)."""
    idx = torch.arange(numel, dtype=torch.int64)
    unsigned = dtype == torch.uint8
    if op == "prod":
        pattern = torch.tensor([1, 2, 1] if unsigned else [1, 2, -1], dtype=torch.int64)
        vals = pattern[(idx + rank) % 3]
    elif unsigned:
        vals = (idx * 3 + rank * 7) % 11
    else:
        vals = (idx * 3 + rank * 7) % 11 - 5
    return vals.to(dtype)


def reduce_ref(tensors: list[torch.Tensor], op: str, dtype: torch.dtype) -> torch.Tensor:
    """The reduction of `tensors` computed the plain way, in `dtype` (float64 for avg)."""
    if op == "avg":
        acc = torch.zeros_like(tensors[0], dtype=torch.float64)
        for t in tensors:
            acc += t.double()
        return acc / len(tensors)
    acc = tensors[0].clone()
    for t in tensors[1:]:
        if op == "sum":
            acc = acc + t
        elif op == "prod":
            acc = acc * t
        elif op == "min":
            acc = torch.minimum(acc, t)
        elif op == "max":
            acc = torch.maximum(acc, t)
    return acc.to(dtype)


def count_wrong(got: torch.Tensor, expected: torch.Tensor, op: str) -> int:
    """Elements of `got` that differ from `expected` (exactly, except for avg, where
    the division may round: a few ulps of the type, or 1 for integer types)."""
    g = got.double().cpu()
    e = expected.double().cpu()
    if op == "avg":
        if got.dtype.is_floating_point:
            rtol = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2, torch.float32: 1e-6}.get(got.dtype, 1e-12)
            ok = (g - e).abs() <= rtol * e.abs() + rtol
        else:
            ok = (g - e).abs() <= 1.0
    else:
        ok = g == e
    return int((~ok).sum().item())


# ---------------------------------------------------------------------------- runs


class Instance:
    """Buffers and calls of one (collective, backend group, shape, form).

    start() issues the collective and returns its Work handles;
    fill_check() loads reference data; wrong() counts wrong elements afterwards."""

    def __init__(self, coll: str, group, shape: Shape, dtype: torch.dtype, op: str, root: int,
                 inplace: bool, rank: int, nranks: int, device: torch.device | str = "cpu"):
        self.coll, self.group, self.shape, self.dtype = coll, group, shape, dtype
        self.device = torch.device(device)
        self.op, self.redop, self.root = op, OPS[op], root
        self.inplace, self.rank, self.n = inplace, rank, nranks
        per, total = shape.per_rank, shape.total
        r = rank
        if coll in ("all_reduce", "broadcast", "reduce"):
            self.buf = torch.empty(total, dtype=dtype, device=self.device)
            self.send, self.out = self.buf, self.buf
        elif coll == "all_gather":
            self.out = torch.empty(total, dtype=dtype, device=self.device)
            self.send = self.out[r * per:(r + 1) * per] if inplace else torch.empty(per, dtype=dtype, device=self.device)
        elif coll == "reduce_scatter":
            self.send = torch.empty(total, dtype=dtype, device=self.device)
            self.out = self.send[r * per:(r + 1) * per] if inplace else torch.empty(per, dtype=dtype, device=self.device)
        elif coll == "alltoall":
            self.send = torch.empty(total, dtype=dtype, device=self.device)
            self.out = torch.empty(total, dtype=dtype, device=self.device)
        elif coll == "sendrecv":
            self.send = torch.empty(total, dtype=dtype, device=self.device)
            self.out = torch.empty(total, dtype=dtype, device=self.device)
        else:
            raise ValueError(f"unknown collective {coll!r}")
        # the timed runs use the check data too (stays finite or wraps; no subnormals)
        self.fill_check()

    def start(self) -> list:
        c, g = self.coll, self.group
        if c == "all_reduce":
            return [dist.all_reduce(self.buf, op=self.redop, group=g, async_op=True)]
        if c == "broadcast":
            return [dist.broadcast(self.buf, src=self.root, group=g, async_op=True)]
        if c == "reduce":
            return [dist.reduce(self.buf, dst=self.root, op=self.redop, group=g, async_op=True)]
        if c == "all_gather":
            return [dist.all_gather_into_tensor(self.out, self.send, group=g, async_op=True)]
        if c == "reduce_scatter":
            return [dist.reduce_scatter_tensor(self.out, self.send, op=self.redop, group=g, async_op=True)]
        if c == "alltoall":
            return [dist.all_to_all_single(self.out, self.send, group=g, async_op=True)]
        if c == "sendrecv":
            nxt, prv = (self.rank + 1) % self.n, (self.rank - 1) % self.n
            return [dist.isend(self.send, nxt, group=g), dist.irecv(self.out, prv, group=g)]
        raise ValueError(c)

    def fill_check(self) -> None:
        c, r, per, total = self.coll, self.rank, self.shape.per_rank, self.shape.total
        if c in ("all_reduce", "reduce", "alltoall", "reduce_scatter", "sendrecv"):
            self.send.copy_(check_values(r, total, self.dtype, self.op))
            if self.out is not self.send and not (self.inplace and c == "reduce_scatter"):
                self.out.fill_(0)
        elif c == "broadcast":
            self.buf.copy_(check_values(r, total, self.dtype, self.op))
        elif c == "all_gather":
            if not self.inplace:
                self.out.fill_(0)
            self.send.copy_(check_values(r, per, self.dtype, self.op))

    def expected(self) -> torch.Tensor | None:
        """What `self.out` must hold after one run from fill_check()'s data, or None
        if this rank's output is unspecified (non-root ranks of reduce)."""
        c, n, r, per, total = self.coll, self.n, self.rank, self.shape.per_rank, self.shape.total
        dt, op = self.dtype, self.op
        if c == "all_reduce":
            return reduce_ref([check_values(i, total, dt, op) for i in range(n)], op, dt)
        if c == "reduce":
            if r != self.root:
                return None
            return reduce_ref([check_values(i, total, dt, op) for i in range(n)], op, dt)
        if c == "broadcast":
            return check_values(self.root, total, dt, op)
        if c == "all_gather":
            return torch.cat([check_values(i, per, dt, op) for i in range(n)])
        if c == "reduce_scatter":
            full = reduce_ref([check_values(i, total, dt, op) for i in range(n)], op, dt)
            return full[r * per:(r + 1) * per]
        if c == "alltoall":
            return torch.cat([check_values(i, total, dt, op)[r * per:(r + 1) * per] for i in range(n)])
        if c == "sendrecv":
            return check_values((r - 1) % n, total, dt, op)
        raise ValueError(c)

    def wrong(self) -> int:
        exp = self.expected()
        if exp is None:
            return 0
        return count_wrong(self.out, exp, self.op)

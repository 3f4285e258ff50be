"""The collectives worker's sections that check results (collectives_worker.py runs
them): all_reduce for every op, dtype and size, also with NaN, infinities and signed
zeros; broadcast from every root; all_gather and all_gather_into_tensor in every output
layout; all_reduce_coalesced and the coalescing manager; and that every rank holds
bit-identical results. Each compares gonccl with the local reference and with Gloo.
"""

from __future__ import annotations

import warnings

import torch
import torch.distributed as dist

from _collectives_common import (
    CK, DIGESTS, DTYPES, LARGE, OPS, RANK, SHAPES, WS, check_result, digest, gloo, gloo_all_reduce, make_input,
    numel, reference, sentinel,
)
import _oracle
from _common import exact_mismatch


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
                _oracle.agrees(CK, case, t, val, ref, "all_reduce")
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
                dist.broadcast(g, src=root, group=gloo())
                _oracle.agrees(CK, case, t, g, ("exact", src), "broadcast")
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
            dist.all_gather(gouts, x, group=gloo())
            for r in range(WS):
                _oracle.agrees(CK, f"{case}: block {r}", outs[r], gouts[r], ("exact", refs[r]), "all_gather")
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
                dist.all_gather_into_tensor(gout, x, group=gloo())
            except Exception as e:  # noqa: BLE001
                gloo_missing.append(f"{dtype}: {type(e).__name__}: {str(e)[:100]}")
                continue
            _oracle.agrees(CK, case, out, gout, ("exact", cat), "all_gather_into_tensor")
    CK.data("gloo_missing", gloo_missing)
    return case_no


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
            dist.all_reduce_coalesced(gs, op=OPS[opname], group=gloo())
            for i, (t, g) in enumerate(zip(ts, gs)):
                _oracle.agrees(CK, f"{case} tensor {i}", t, g, refs[i], "all_reduce_coalesced")
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


def sec_identical() -> None:
    """Every rank must hold bit-identical results (DDP relies on it)."""
    mine = DIGESTS
    gathered = [None] * WS
    dist.all_gather_object(gathered, mine, group=gloo())
    CK.data("cases", len(mine))
    for r in range(WS):
        other = gathered[r]
        CK.check(len(other) == len(mine), f"rank {r} recorded {len(other)} results, this rank {len(mine)}")
        diffs = [c for (c, h), (c2, h2) in zip(mine, other) if h != h2 or c != c2]
        CK.check(not diffs, lambda: f"{len(diffs)} results differ bitwise between rank {RANK} and rank {r}, "
                                    f"e.g. {diffs[:5]}")

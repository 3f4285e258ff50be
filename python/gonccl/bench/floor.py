"""The engine's own floor for all_reduce: the same op, over the same processes, through
gonccl's C ABI (ctypes: no torch, no c10d Work, no completion thread in the path), on a
communicator of its own. What torch adds on top of it is the difference between the
gonccl row and this one. Also the reader of the per-hop timing (--hops)."""

from __future__ import annotations

import ctypes
import time

import torch
import torch.distributed as dist

from gonccl._library import check_library

_FLOAT32, _SUM = 7, 0  # goncclFloat32, goncclSum (gonccl.h)


class _UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * 128)]  # GONCCL_UNIQUE_ID_BYTES


class CapiAllReduce:
    """A C ABI communicator over all ranks of the default group (its id shared through
    it), running float32 sum all_reduces on a buffer of its own."""

    def __init__(self, rank: int, nranks: int):
        lib = ctypes.CDLL(check_library())
        lib.goncclCommInitRank.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, _UniqueId, ctypes.c_int]
        lib.goncclAllReduce.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                        ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
        lib.goncclAllReduceAsync.argtypes = [*lib.goncclAllReduce.argtypes, ctypes.POINTER(ctypes.c_void_p)]
        lib.goncclRequestWait.argtypes = [ctypes.c_void_p, ctypes.c_int64]
        lib.goncclRequestFree.argtypes = [ctypes.c_void_p]
        lib.goncclCommDestroy.argtypes = [ctypes.c_void_p]
        self.lib = lib
        uid = _UniqueId()
        if rank == 0:
            self._check(lib.goncclGetUniqueId(ctypes.byref(uid)), "goncclGetUniqueId")
        t = torch.frombuffer(bytearray(bytes(uid)), dtype=torch.uint8).clone()
        dist.broadcast(t, src=0)
        ctypes.memmove(ctypes.byref(uid), bytes(t.tolist()), ctypes.sizeof(uid))
        self.comm = ctypes.c_void_p()
        self._check(lib.goncclCommInitRank(ctypes.byref(self.comm), nranks, uid, rank), "goncclCommInitRank")

    def _check(self, rc: int, what: str) -> None:
        if rc != 0:
            raise RuntimeError(f"gonccl C ABI: {what} failed with result {rc}")

    def time_per_op(self, nbytes: int, iters: int, warmup: int, blocking: bool) -> float:
        """Seconds per op of `iters` all_reduces of nbytes (rounded down to float32s):
        each waited (blocking) or all issued and then waited (as the bench's -z 0)."""
        count = max(1, nbytes // 4)
        buf = (ctypes.c_float * count)()
        lib, comm = self.lib, self.comm
        for _ in range(warmup):
            self._check(lib.goncclAllReduce(buf, buf, count, _FLOAT32, _SUM, comm, None), "goncclAllReduce")
        dist.barrier()
        t0 = time.perf_counter()
        if blocking:
            for _ in range(iters):
                if lib.goncclAllReduce(buf, buf, count, _FLOAT32, _SUM, comm, None) != 0:
                    raise RuntimeError("gonccl C ABI: goncclAllReduce failed")
        else:
            reqs = [ctypes.c_void_p() for _ in range(iters)]
            for r in reqs:
                if lib.goncclAllReduceAsync(buf, buf, count, _FLOAT32, _SUM, comm, None, ctypes.byref(r)) != 0:
                    raise RuntimeError("gonccl C ABI: goncclAllReduceAsync failed")
            for r in reqs:
                if lib.goncclRequestWait(r, -1) != 0:
                    raise RuntimeError("gonccl C ABI: goncclRequestWait failed")
                lib.goncclRequestFree(r)
        return (time.perf_counter() - t0) / iters

    def close(self) -> None:
        if self.comm:
            self.lib.goncclCommDestroy(self.comm)
            self.comm = ctypes.c_void_p()


def hop_table(per_op_us: float | None = None) -> list[str]:
    """Rank-local per-hop means (GONCCL_DEBUG_HOPS=1) since the last reset, as comment
    lines, and resets them. per_op_us, the op time Python measured, adds the share of
    Python and torch (what C++'s issue -> wait() does not cover)."""
    from gonccl import _C

    lines = [f"#   {'hop':<44} {'ops':>7} {'mean us':>9}"]
    whole = None
    for name, n, total in _C._hops(True):
        if n == 0:
            continue
        mean = total / n / 1e3
        if name.startswith("c++: issue -> wait"):
            whole = mean
        lines.append(f"#   {name:<44} {n:>7} {mean:>9.2f}")
    if per_op_us is not None and whole is not None:
        lines.append(f"#   {'python + torch dispatch (op time - the above)':<44} {'':>7} {per_op_us - whole:>9.2f}")
    return lines

"""Runs a worker's gonccl operations on tensors of another device (GONCCL_TEST_DEVICE).

The workers build their inputs and check their results on CPU tensors, against Gloo
and local references. With GONCCL_TEST_DEVICE=cuda, install() wraps the
torch.distributed functions the workers call so that an operation on a gonccl group
runs on CUDA copies of its CPU tensors (rank r on cuda:r % device_count, so ranks share
GPUs when there are fewer GPUs than ranks) and the results are copied back, so every
existing check applies unchanged to gonccl's CUDA path:
  * the copies keep aliasing: tensors that share a CPU storage (views, in-place
    all_gather, non-contiguous tensors) get views of one device copy of that storage,
    with the same offsets and strides;
  * a blocking op's results are copied back at once, on the current (default) stream:
    the read that issue 13's first bug got wrong;
  * an async op returns a Work whose wait(), is_completed() and future copy them back
    when the op is done, and whose result() and future value are the CPU tensors;
  * point-to-point (send/recv, isend/irecv, batch_isend_irecv) is staged the same way.
Operations on other groups (the Gloo oracle) are left alone, and so is anything torch
calls internally (object collectives, DDP).

GONCCL_TEST_DEVICE=cpu-copy does the same with CPU copies: the wrapper itself runs and
is checked where there is no GPU. Unset or "cpu": nothing is wrapped.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import threading

import torch
import torch.distributed as dist

DEVICE = os.environ.get("GONCCL_TEST_DEVICE", "cpu")

OPS = [
    "all_reduce", "broadcast", "reduce", "all_gather", "all_gather_into_tensor", "gather", "scatter",
    "reduce_scatter", "reduce_scatter_tensor", "all_to_all_single", "all_to_all", "all_reduce_coalesced",
    "all_gather_coalesced", "send", "recv", "isend", "irecv",
]
ALWAYS_ASYNC = {"isend", "irecv"}
# Inside torch's _coalescing_manager ops may return no Work: their copies are finished
# when the manager's block ends (blocking) and again when its wait() returns.
_coalescing = threading.local()


def target() -> torch.device | None:
    """The device gonccl's operands move to, or None when nothing is wrapped."""
    if DEVICE in ("", "cpu"):
        return None
    if DEVICE == "cpu-copy":
        return torch.device("cpu")
    if DEVICE == "cuda":
        rank = int(os.environ.get("LOCAL_RANK", os.environ.get("RANK", "0")))
        dev = torch.device("cuda", rank % torch.cuda.device_count())
        torch.cuda.set_device(dev)
        return dev
    raise ValueError(f"GONCCL_TEST_DEVICE={DEVICE!r}: expected cpu, cuda or cpu-copy")


class _Moved:
    """The device copies of one operation's CPU tensors, by storage."""

    def __init__(self, dev: torch.device):
        self.dev = dev
        self.storages: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # ptr -> (cpu bytes, device bytes)
        self.back: dict[int, torch.Tensor] = {}  # id(device tensor) -> CPU tensor

    def to_dev(self, t):
        if isinstance(t, (list, tuple)):
            return type(t)(self.to_dev(x) for x in t)
        if not isinstance(t, torch.Tensor) or t.device.type != "cpu" or t.layout != torch.strided:
            return t
        st = t.untyped_storage()
        key = st.data_ptr()
        if key not in self.storages or self.storages[key][0].numel() != st.nbytes():
            cpu = torch.empty(0, dtype=torch.uint8).set_(st, 0, (st.nbytes(),), (1,))
            dev = torch.empty(st.nbytes(), dtype=torch.uint8, device=self.dev)
            with torch.no_grad():
                dev.copy_(cpu)
            self.storages[key] = (cpu, dev)
        dev_bytes = self.storages[key][1]
        out = torch.empty(0, dtype=t.dtype, device=self.dev).set_(
            dev_bytes.untyped_storage(), t.storage_offset(), t.size(), t.stride())
        self.back[id(out)] = t
        return out

    def copy_back(self) -> None:
        # Every time it is asked: the Works of one batch_isend_irecv share the copies
        # and finish one by one.
        with torch.no_grad():
            for cpu, dev in self.storages.values():
                cpu.copy_(dev)

    def cpu_value(self, value):
        if isinstance(value, (list, tuple)):
            return type(value)(self.cpu_value(v) for v in value)
        if isinstance(value, torch.Tensor):
            return self.back.get(id(value), value)
        return value


class _Work:
    """An async op's Work whose results land in the caller's CPU tensors."""

    def __init__(self, inner, moved: _Moved):
        self._inner = inner
        self._moved = moved

    def wait(self, *args, **kwargs):
        r = self._inner.wait(*args, **kwargs)
        self._moved.copy_back()
        return r

    def is_completed(self):
        done = self._inner.is_completed()
        if done:  # a failed op wrote nothing: copying back changes nothing
            self._moved.copy_back()
        return done

    def get_future(self):
        moved = self._moved

        def back(f):
            value = f.value()
            moved.copy_back()
            return moved.cpu_value(value)

        return self._inner.get_future().then(back)

    def result(self):
        return self._moved.cpu_value(self._inner.result())

    def __getattr__(self, name):
        return getattr(self._inner, name)


def _is_gonccl(group) -> bool:
    try:
        return dist.get_backend(group) == "gonccl"
    except (ValueError, RuntimeError):
        return False


def _wrap(name: str, orig, dev: torch.device):
    sig = inspect.signature(orig)

    @functools.wraps(orig)
    def call(*args, **kwargs):
        bound = sig.bind(*args, **kwargs)
        if not _is_gonccl(bound.arguments.get("group")):
            return orig(*args, **kwargs)
        moved = _Moved(dev)
        for k, v in list(bound.arguments.items()):
            if k != "group":
                bound.arguments[k] = moved.to_dev(v)
        r = orig(*bound.args, **bound.kwargs)
        pending = getattr(_coalescing, "moved", None)
        if pending is not None:
            pending.append(moved)
        if r is None and pending is not None:
            return r
        if name in ALWAYS_ASYNC or bound.arguments.get("async_op"):
            return _Work(r, moved) if r is not None else r
        moved.copy_back()
        return r

    call.__wrapped__ = orig
    return call


def install() -> None:
    """Wraps torch.distributed's ops (see the module doc) if GONCCL_TEST_DEVICE asks."""
    dev = target()
    if dev is None:
        return
    for name in OPS:
        setattr(dist, name, _wrap(name, getattr(dist, name), dev))
    orig_p2p = dist.P2POp
    orig_batch = dist.batch_isend_irecv

    def p2p_op(op, tensor, *args, **kwargs):
        # P2POp only accepts torch's own isend/irecv.
        return orig_p2p(getattr(op, "__wrapped__", op), tensor, *args, **kwargs)

    def batch_isend_irecv(p2p_op_list):
        if not p2p_op_list or not _is_gonccl(p2p_op_list[0].group):
            return orig_batch(p2p_op_list)
        moved = _Moved(dev)
        ops = [orig_p2p(p.op, moved.to_dev(p.tensor), p.peer, p.group, p.tag) for p in p2p_op_list]
        return [_Work(w, moved) for w in orig_batch(ops)]

    orig_cm = dist._coalescing_manager

    @contextlib.contextmanager
    def coalescing_manager(*args, **kwargs):
        outer = getattr(_coalescing, "moved", None)
        _coalescing.moved = pending = []
        try:
            with orig_cm(*args, **kwargs) as cm:
                yield _CoalescedWait(cm, pending) if cm is not None else cm
        finally:
            _coalescing.moved = outer
        for moved in pending:  # blocking: the ops are done when the block ends
            moved.copy_back()

    dist.P2POp = p2p_op
    dist.batch_isend_irecv = batch_isend_irecv
    dist._coalescing_manager = coalescing_manager


class _CoalescedWait:
    """A coalescing manager whose wait() also copies the results back."""

    def __init__(self, cm, pending: list):
        self._cm = cm
        self._pending = pending

    def wait(self, *args, **kwargs):
        r = self._cm.wait(*args, **kwargs)
        for moved in self._pending:
            moved.copy_back()
        return r

    def __getattr__(self, name):
        return getattr(self._cm, name)

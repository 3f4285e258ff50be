"""What torch itself allows, by release, where the supported releases (2.11 to 2.15) differ.

On a torch that refuses something on its own, before any backend is asked, the workers
check that refusal (its exception type and message, below) instead of gonccl's behaviour;
docs/pytorch.md's contract table says the same, per feature. Each fact was read from that
release's torch/distributed/distributed_c10d.py.
"""

from __future__ import annotations

import contextlib

import torch
import torch.distributed as dist

TORCH = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])

# monitored_barrier on any group with a CPU backend (2.14); before, torch raises for all
# but Gloo.
MONITORED_BARRIER_ANY_BACKEND = TORCH >= (2, 14)
MONITORED_BARRIER_REFUSAL = ("ValueError", "monitored_barrier is only implemented for GLOO backend.")

# split_group without a bound device (2.15); before, the default group must have been made
# with init_process_group(device_id=<an accelerator>), and
SPLIT_WITHOUT_DEVICE = TORCH >= (2, 15)
SPLIT_REFUSAL = ("RuntimeError", "No device associated with the default pg, not safe to split any process groups")
# split_group keeps the order of each split's ranks and gives the ranks left out
# GroupMember.NON_GROUP_MEMBER (2.14); before, it sorts them and gives None.
SPLIT_KEEPS_ORDER = TORCH >= (2, 14)
# init_process_group(device_id=cpu) (2.15); before, device_id must be an accelerator.
DEVICE_ID_CPU = TORCH >= (2, 15)
DEVICE_ID_REFUSAL = ("ValueError", "init_process_group device_id parameter must be an accelerator with an index")

# barrier(timeout=) (2.12).
BARRIER_TIMEOUT = TORCH >= (2, 12)
# Work.exception() of a failed op: 2.11's binding cannot return the exception (its pybind
# has no caster for std::exception_ptr); checked from 2.15.
WORK_EXCEPTION = TORCH >= (2, 15)

# dist.set_timeout (2.14); before, only the older _set_pg_timeout, which gonccl makes reach
# its backends (python/gonccl/_compat.py).
HAS_SET_TIMEOUT = hasattr(dist, "set_timeout")

# gonccl's ephemeral timeouts, completion and abort hooks (flight recorder dumps on failure)
# need torch 2.15's Backend (csrc/torch_compat.hpp: GONCCL_HAS_HOOKS).
HOOKS = TORCH >= (2, 15)


@contextlib.contextmanager
def bound_device():
    """Where split_group needs the default group bound to a device (before 2.15), binds it to
    cpu:0 for the duration, as init_process_group(device_id=cuda:N) binds it on a GPU machine
    (2.11-2.14 refuse device_id=cpu itself); elsewhere does nothing. Only around split_group:
    new_group then refuses a cpu device as init_process_group does."""
    if SPLIT_WITHOUT_DEVICE:
        yield
        return
    world = dist.group.WORLD
    world.bound_device_id = torch.device("cpu", 0)
    try:
        yield
    finally:
        world.bound_device_id = None


def set_timeout(timeout, group=None) -> None:
    """dist.set_timeout where torch has it, else _set_pg_timeout (which it replaced)."""
    if HAS_SET_TIMEOUT:
        dist.set_timeout(timeout, group=group)
    else:
        dist.distributed_c10d._set_pg_timeout(timeout, group=group)


def refused(err: str | None, refusal: tuple[str, str]) -> bool:
    """True if outcome()'s 'Type: message' err is torch's refusal (type, message)."""
    return err is not None and err.startswith(f"{refusal[0]}: ") and refusal[1] in err

"""One-sided windows on gonccl process groups, from torch 2.15 on.

torch 2.15 added one-sided (RMA) windows to torch.distributed
(`torch.distributed._new_window`, `c10d.Window`). gonccl implements them on CPU
tensors, and on CUDA tensors of ranks on one host: see docs/windows.md. `new_window` is the same call with one difference:
on a torch that predates windows it raises an error that says so, instead of an
AttributeError from deep inside torch.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

#: The first torch release whose Backend contract has one-sided windows.
MIN_TORCH = (2, 15)


def torch_supports_windows() -> bool:
    """True if this torch has one-sided windows (2.15 or newer)."""
    have = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])
    return have >= MIN_TORCH and hasattr(dist, "_new_window")


def new_window(tensor: torch.Tensor | None = None, group=None):
    """Creates a one-sided window on group (default: the default group), collectively.

    tensor, if given, is registered with it (Window.tensor_register): a contiguous CPU
    tensor that spans its whole storage, whose memory then moves into gonccl's shared
    memory, or a contiguous CUDA tensor, whose memory the ranks of the host then map
    (every rank registers CPU tensors, or every rank CUDA ones). Returns torch's Window.
    """
    if not torch_supports_windows():
        raise RuntimeError(
            f"gonccl: one-sided windows need torch {MIN_TORCH[0]}.{MIN_TORCH[1]} or newer "
            f"(torch.distributed._new_window); this is torch {torch.__version__}. "
            "Upgrade torch to use windows."
        )
    pg = group or dist.distributed_c10d._get_default_group()
    if not pg.supports_window:
        raise RuntimeError(
            f"gonccl: the group's backend ({pg.name()}) does not support one-sided windows"
        )
    return dist._new_window(tensor, group)

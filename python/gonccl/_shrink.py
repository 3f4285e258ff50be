"""Makes the process group that torch.distributed.shrink_group builds usable with gonccl.

torch (2.15) registers a shrunken group's backend under ProcessGroup.BackendType.GLOO
whenever the group is bound to no device, whatever the backend is. Code that trusts
that type then treats gonccl's backend as a ProcessGroupGloo: DDP's construction
logger casts it to one and crashes the process (SIGSEGV). So after torch has built the
group, a gonccl backend is registered again under BackendType.CUSTOM, as
init_process_group and new_group register it. Other backends' groups are left as
torch made them.
"""

from __future__ import annotations

import functools

import torch
import torch.distributed.distributed_c10d as c10d

_PATCHED = "_gonccl_shrink_fix"


def install() -> None:
    """Wraps c10d._create_shrunk_process_group once (a no-op if torch has none)."""
    create = getattr(c10d, "_create_shrunk_process_group", None)
    if create is None or getattr(create, _PATCHED, False):
        return

    @functools.wraps(create)
    def create_shrunk(new_backend, *args, **kwargs):
        pg = create(new_backend, *args, **kwargs)
        if type(new_backend).__module__.startswith("gonccl"):
            custom = c10d.ProcessGroup.BackendType.CUSTOM
            for device in ("cpu", "cuda"):
                pg._register_backend(torch.device(device), custom, new_backend)
            pg._set_default_backend(custom)
        return pg

    setattr(create_shrunk, _PATCHED, True)
    c10d._create_shrunk_process_group = create_shrunk

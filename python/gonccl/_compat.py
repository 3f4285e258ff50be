"""Makes torch's timeout setter reach gonccl on torch releases before 2.14.

torch 2.14 added torch.distributed.set_timeout, which hands the new limit to every
backend of a group (ProcessGroup.set_timeout, hence GoncclBackend::setTimeout), and made
the older _set_pg_timeout call it. Before that (2.11 to 2.13), _set_pg_timeout hands it
only to backends that are a ProcessGroupGloo or a ProcessGroupNCCL; for any other it
warns "Set timeout is now only supported for either nccl or gloo" and does nothing, so
a gonccl group kept the timeout it was created with. There, _set_pg_timeout is wrapped:
the gonccl backends of the group get the new limit (Backend.set_timeout, which 2.11
binds), and torch's own function still runs for the group's other backends, if any.
"""

from __future__ import annotations

import functools

import torch.distributed.distributed_c10d as c10d

_PATCHED = "_gonccl_timeout_fix"


def _is_gonccl(backend) -> bool:
    from gonccl._library import load_extension

    return isinstance(backend, load_extension().GoncclBackend)


def install() -> None:
    """Wraps c10d._set_pg_timeout once where torch lacks set_timeout (a no-op elsewhere)."""
    if hasattr(c10d, "set_timeout"):
        return
    original = getattr(c10d, "_set_pg_timeout", None)
    if original is None or getattr(original, _PATCHED, False):
        return

    @functools.wraps(original)
    def set_pg_timeout(timeout, group=None):
        if group is None:
            group = c10d._get_default_group()
        if c10d._rank_not_in_group(group):
            raise ValueError("Invalid process group specified")
        backends = [group._get_backend(device) for device in group._device_types]
        ours = [b for b in backends if _is_gonccl(b)]
        for backend in ours:
            backend.set_timeout(timeout)
        if len(ours) < len(backends) or not backends:
            original(timeout, group)

    setattr(set_pg_timeout, _PATCHED, True)
    c10d._set_pg_timeout = set_pg_timeout


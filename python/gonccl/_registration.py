"""Registers the "gonccl" backend with torch.distributed.

Three ways in, all idempotent:
- `import gonccl` calls register();
- torch >= 2.14 calls register() through the `torch.distributed.backends`
  entry point the first time a process group names "gonccl";
- torch calls autoload() through the `torch.backends` entry point at the end
  of `import torch` (unless TORCH_DEVICE_BACKEND_AUTOLOAD=0).

None of them loads libgonccl.so: the C++ extension and the Go library are
loaded when the first gonccl process group is created.
"""

import warnings
from datetime import timedelta

import torch.distributed as dist

BACKEND_NAME = "gonccl"


def _timeout_ms(timeout) -> int:
    seconds = (
        timeout.total_seconds() if isinstance(timeout, timedelta) else float(timeout)
    )
    return max(0, int(seconds * 1000))


def _create_backend(opts, backend_options):
    """The creator torch calls (extended API) for each gonccl process group."""
    from gonccl import _C
    from gonccl._library import check_library

    if backend_options is not None:
        warnings.warn(
            f"gonccl: backend options are not supported yet; ignoring {backend_options!r}",
            stacklevel=2,
        )
    return _C.GoncclBackend(
        opts.store,
        opts.group_rank,
        opts.group_size,
        _timeout_ms(opts.timeout),
        check_library(),
        # enable_reconfigure: no communicator until reconfigure() makes one
        bool(getattr(opts, "enable_reconfigure", False)),
    )


def register() -> None:
    """Registers "gonccl" with torch.distributed (a no-op if it already is)."""
    if not dist.is_available():
        raise RuntimeError("gonccl: this torch was built without torch.distributed")
    from gonccl import _shrink

    _shrink.install()
    if BACKEND_NAME.upper() in dist.Backend._plugins:
        return
    dist.Backend.register_backend(
        BACKEND_NAME,
        _create_backend,
        extended_api=True,
        devices=["cpu", "cuda"],
    )


def autoload() -> None:
    """The `torch.backends` entry point: runs inside `import torch`.

    It must be cheap and must never raise (an exception here would break
    `import torch` for every program in the environment).
    """
    try:
        register()
    except Exception as err:  # noqa: BLE001 - see the docstring
        warnings.warn(
            f"gonccl: not registered with torch.distributed: {err}", stacklevel=2
        )

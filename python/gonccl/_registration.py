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
# What GoncclOptions() has when no timeout is given (c10d's kBackendDefaultTimeout).
_DEFAULT_OPTIONS_TIMEOUT = timedelta(minutes=30)


def _create_backend(opts, backend_options):
    """The creator torch calls (extended API) for each gonccl process group.

    backend_options is the pg_options given to init_process_group / new_group:
    None or a gonccl.GoncclOptions (its knobs apply to this group; torch's
    timeout, group name and global ranks are the group's)."""
    from gonccl._library import check_library, load_extension

    _C = load_extension()

    if backend_options is None:
        options = _C.GoncclOptions()
    elif isinstance(backend_options, _C.GoncclOptions):
        options = _C.GoncclOptions(
            algorithm=backend_options.algorithm,
            chunk_size=backend_options.chunk_size,
        )
        given = backend_options._timeout
        if given != opts.timeout and given != _DEFAULT_OPTIONS_TIMEOUT:
            raise ValueError(
                f"gonccl: pg_options has timeout {given} but the group's is "
                f"{opts.timeout}; pass timeout= to init_process_group / new_group "
                "instead (it is the one torch uses)"
            )
    else:
        raise TypeError(
            "gonccl: pg_options must be a gonccl.GoncclOptions, got "
            f"{type(backend_options).__module__}.{type(backend_options).__qualname__}"
        )
    options._timeout = opts.timeout
    options.group_name = str(opts.group_id)
    options.global_ranks_in_group = list(opts.global_ranks_in_group)
    return _C.GoncclBackend(
        opts.store,
        opts.group_rank,
        opts.group_size,
        options,
        check_library(),
        # enable_reconfigure: no communicator until reconfigure() makes one
        bool(getattr(opts, "enable_reconfigure", False)),
    )


def register() -> None:
    """Registers "gonccl" with torch.distributed (a no-op if it already is)."""
    if not dist.is_available():
        raise RuntimeError("gonccl: this torch was built without torch.distributed")
    from gonccl import _compat, _shrink

    _shrink.install()
    _compat.install()
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

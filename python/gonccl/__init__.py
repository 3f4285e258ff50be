"""gonccl: collective communication with a Go core.

Importing gonccl registers the "gonccl" backend with torch.distributed, so
`torch.distributed.init_process_group("gonccl")` works (once installed, it
works without importing gonccl too, through torch's entry points).

gonccl.GoncclOptions (pg_options of init_process_group / new_group /
split_group) sets a group's algorithm restriction and chunk size.

Importing gonccl does not load libgonccl.so nor start the Go runtime: that
happens when the first gonccl process group is created (or version() is
called). The Go runtime cannot run in a child forked after that point: there
gonccl raises a clear RuntimeError instead of calling into Go, so create
process groups in the children (a child forked before, such as a DataLoader
worker started before the first process group, is unaffected).

gonccl.info() (or `python -m gonccl --version`) says which gonccl, torch, CUDA
support and library this process would use.
"""

import torch.distributed as _dist

from gonccl._info import info
from gonccl._library import header_version, include_path, library_path, version
from gonccl._registration import BACKEND_NAME, register

# From gonccl.h, the version's one source (see header_version).
__version__ = header_version()

__all__ = [
    "BACKEND_NAME",
    "GoncclOptions",
    "__version__",
    "include_path",
    "info",
    "library_path",
    "register",
    "version",
]

if _dist.is_available():
    register()


def __getattr__(name):
    # GoncclOptions lives in the C++ extension, imported on first use (not by
    # `import gonccl`, which torch's autoload runs inside `import torch`).
    if name == "GoncclOptions":
        from gonccl._library import load_extension

        return load_extension().GoncclOptions
    raise AttributeError(f"module 'gonccl' has no attribute {name!r}")

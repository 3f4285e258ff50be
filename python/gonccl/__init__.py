"""gonccl: collective communication with a Go core.

Importing gonccl registers the "gonccl" backend with torch.distributed, so
`torch.distributed.init_process_group("gonccl")` works (once installed, it
works without importing gonccl too, through torch's entry points).

gonccl.GoncclOptions (pg_options of init_process_group / new_group /
split_group) sets a group's algorithm restriction and chunk size.

Importing gonccl does not load libgonccl.so nor start the Go runtime: that
happens when the first gonccl process group is created (or version() is
called). A process must not fork after that point; create process groups in
the children instead.
"""

import torch.distributed as _dist

from gonccl._library import header_version, include_path, library_path, version
from gonccl._registration import BACKEND_NAME, register

# From gonccl.h, the version's one source (see header_version).
__version__ = header_version()

__all__ = [
    "BACKEND_NAME",
    "GoncclOptions",
    "__version__",
    "include_path",
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
        from gonccl._C import GoncclOptions

        return GoncclOptions
    raise AttributeError(f"module 'gonccl' has no attribute {name!r}")

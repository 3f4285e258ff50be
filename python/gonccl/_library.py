"""Where the native parts of gonccl live, and the library's version.

Nothing here loads libgonccl.so except version(): the Go runtime starts on
first use (creating a process group), never at import. The Go runtime cannot
run in a child forked after it started, so gonccl refuses to run there with a
clear error (see csrc/library.cpp); a child forked before (DataLoader workers
forked before the first process group, for instance) is unaffected.
"""

import importlib
import os
import re

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def library_path() -> str:
    """Path of the libgonccl.so shipped inside this package."""
    return os.path.join(_PACKAGE_DIR, "libgonccl.so")


def include_path() -> str:
    """Directory holding gonccl.h, for C and C++ programs using libgonccl.so."""
    return os.path.join(_PACKAGE_DIR, "include")


def header_version(header: str = "") -> str:
    """gonccl's version, "major.minor.patch", as gonccl.h defines it.

    gonccl.h (GONCCL_MAJOR, GONCCL_MINOR, GONCCL_PATCH) is the one place the
    version is written: the Go code reads it through cgo, setup.py and
    gonccl.__version__ through this function. The header read is the given one,
    else the one shipped in this package, else the source tree's (a checkout
    imported without building); "0+unknown" if there is none.
    """
    candidates = [header] if header else [
        os.path.join(include_path(), "gonccl.h"),
        os.path.join(_PACKAGE_DIR, os.pardir, os.pardir, "capi", "gonccl.h"),
    ]
    for path in candidates:
        try:
            with open(path) as f:
                text = f.read()
        except OSError:
            continue
        parts = [re.search(rf"^#define GONCCL_{name}\s+(\d+)", text, re.M) for name in ("MAJOR", "MINOR", "PATCH")]
        if all(parts):
            return ".".join(m.group(1) for m in parts)
    return "0+unknown"


def check_library() -> str:
    """library_path(), or FileNotFoundError saying how to build it."""
    path = library_path()
    if not os.path.exists(path):
        raise FileNotFoundError(
            f"gonccl: {path} is missing; build it with "
            "`pip install --no-build-isolation .` or "
            "`python setup.py build_ext --inplace` from the gonccl source tree "
            "(without Go: GONCCL_LIBRARY=/path/to/libgonccl.so pip install --no-build-isolation .)"
        )
    return path


def build_torch():
    """(torch version, torch CUDA version or None) gonccl._C was compiled against.

    None when the package records none (a source tree imported without building)."""
    try:
        info = importlib.import_module("gonccl._build_info")
    except ImportError:
        return None
    return info.TORCH_VERSION, info.TORCH_CUDA


def check_torch(built=None, running=None):
    """Raises ImportError naming both if the running torch is not the one gonccl was built for.

    built is build_torch()'s answer (read when not given); running is
    (torch.__version__, torch.version.cuda) (read when not given). The release
    (major.minor.patch) must be equal: a C++ extension is tied to the exact torch
    it was compiled against. A build with CUDA needs a torch with CUDA."""
    built = build_torch() if built is None else built
    if built is None:
        return
    if running is None:
        import torch

        running = (torch.__version__, torch.version.cuda)
    want, want_cuda = built
    have, have_cuda = running
    if want.split("+")[0] != have.split("+")[0] or (want_cuda is not None and have_cuda is None):
        raise ImportError(
            f"gonccl was built for torch {want} but this process runs torch {have}: "
            "reinstall gonccl against this torch (from the source tree: "
            "`pip install --no-build-isolation .`; or a wheel built for this torch), "
            f"or install torch {want.split('+')[0]}"
        )


def load_extension():
    """gonccl._C, the C++ extension, after check_torch (it does not load libgonccl.so)."""
    check_torch()
    return importlib.import_module("gonccl._C")


def version() -> str:
    """Version of libgonccl.so ("major.minor.patch").

    This loads the library and so starts the Go runtime in this process: do not
    fork afterwards.
    """
    code = load_extension().library_version(check_library())
    return f"{code // 10000}.{code // 100 % 100}.{code % 100}"

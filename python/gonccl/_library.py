"""Where the native parts of gonccl live, and the library's version.

Nothing here loads libgonccl.so except version(): the Go runtime starts on
first use (creating a process group), never at import, because a process that
forks after the Go runtime has started hangs in the child.
"""

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
            "`python setup.py build_ext --inplace` from the gonccl source tree"
        )
    return path


def version() -> str:
    """Version of libgonccl.so ("major.minor.patch").

    This loads the library and so starts the Go runtime in this process: do not
    fork afterwards.
    """
    from gonccl import _C

    code = _C.library_version(check_library())
    return f"{code // 10000}.{code // 100 % 100}.{code % 100}"

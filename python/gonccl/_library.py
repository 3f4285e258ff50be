"""Where the native parts of gonccl live, and the library's version.

Nothing here loads libgonccl.so except version(): the Go runtime starts on
first use (creating a process group), never at import, because a process that
forks after the Go runtime has started hangs in the child.
"""

import os

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def library_path() -> str:
    """Path of the libgonccl.so shipped inside this package."""
    return os.path.join(_PACKAGE_DIR, "libgonccl.so")


def include_path() -> str:
    """Directory holding gonccl.h, for C and C++ programs using libgonccl.so."""
    return os.path.join(_PACKAGE_DIR, "include")


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

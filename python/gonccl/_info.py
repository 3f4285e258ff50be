"""gonccl.info(): what this installation is, for bug reports and first checks."""

import os

from gonccl._library import build_torch, check_torch, header_version, library_path, load_extension


def info() -> dict:
    """Which gonccl, torch, CUDA support and library this process would use.

    Keys: "gonccl" (the package's version), "torch" (the torch imported),
    "built_for_torch" (the torch the extension was compiled against, None in a
    source tree that was never built), "cuda_support" (True/False, or None when the
    extension cannot be loaded), "problem" (why not, else None) and "library" (the
    libgonccl.so this package uses). It loads the C++ extension but not
    libgonccl.so: the Go runtime does not start, so forking afterwards is safe.
    """
    import torch

    built = build_torch()
    result = {
        "gonccl": header_version(),
        "torch": torch.__version__,
        "built_for_torch": built[0] if built else None,
        "cuda_support": None,
        "problem": None,
        "library": library_path(),
    }
    try:
        check_torch(built)
        result["cuda_support"] = bool(load_extension().cuda_support())
    except ImportError as err:
        result["problem"] = str(err)
    if not os.path.exists(result["library"]):
        result["problem"] = result["problem"] or f"{result['library']} is missing: the package was not built"
    return result

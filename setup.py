"""Builds gonccl: libgonccl.so (Go, c-shared) and the C++ extension gonccl._C.

    pip install --no-build-isolation .          # torch must already be installed
    pip install --no-build-isolation -e .       # dev: native files land in python/gonccl/
    python setup.py build_ext --inplace         # same, without installing

Both native files ship inside the package: gonccl/libgonccl.so and
gonccl/_C*.so, plus the C header as gonccl/include/gonccl.h. gonccl._C does
not link against libgonccl.so; it dlopen()s it when the first process group is
created (see csrc/library.hpp for why).

The extension is built with CUDA support when the torch it is built against
has CUDA (torch.version.cuda, and its libc10_cuda): csrc is then compiled with
-DGONCCL_WITH_CUDA=1. It reaches CUDA only through torch's device-generic
interfaces (see cuda_config), so no CUDA toolkit, header or nvcc is needed.
Otherwise it is built without (collectives on CUDA tensors then raise a clear
error); the build log says which, and why.

Without Go: GONCCL_LIBRARY=/path/to/libgonccl.so uses that library (built
elsewhere with `make lib`, or taken from a gonccl wheel) instead of running
`go build`, so only the C++ extension is compiled and no Go toolchain is needed:

    GONCCL_LIBRARY=/path/to/libgonccl.so pip install --no-build-isolation .

The library is checked against these sources first: its goncclGetVersion must
equal gonccl.h's GONCCL_VERSION_CODE (whence the package's version too), and it must
export every function gonccl.h declares; otherwise the build stops saying which.

The extension links the libstdc++ that torch runs with (libstdc++_for_torch), never
a copy of its own: a compiler that has only a static libstdc++ (as a toolchain
under /opt/gcc on a GPU image had) would otherwise put one inside _C.so, and two
libstdc++ of different versions in one process mix their locale tables and crash
at the first number formatted into a message (SIGSEGV at address 0). After the
link, check_shared_libstdcxx refuses an extension that carries one anyway.

GONCCL_SKIP_GO_BUILD=1 builds only the C++ extension (for work on csrc/ while
the Go side does not build); the package is then unusable until libgonccl.so
is built.
"""

import glob
import os
import re
import shutil
import subprocess
import time

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension

ROOT = os.path.dirname(os.path.abspath(__file__))


class BuildGoncclExt(BuildExtension):
    """build_ext that first builds libgonccl.so and copies gonccl.h."""

    def run(self):
        started = time.monotonic()
        package_dir = self._package_dir()
        os.makedirs(package_dir, exist_ok=True)
        prebuilt = os.environ.get("GONCCL_LIBRARY")
        if prebuilt:
            _use_prebuilt(prebuilt, package_dir)
        elif os.environ.get("GONCCL_SKIP_GO_BUILD") == "1":
            print("gonccl: GONCCL_SKIP_GO_BUILD=1, not building libgonccl.so")
        else:
            self._build_go(package_dir)
        include_dir = os.path.join(package_dir, "include")
        os.makedirs(include_dir, exist_ok=True)
        shutil.copyfile(
            os.path.join(ROOT, "capi", "gonccl.h"),
            os.path.join(include_dir, "gonccl.h"),
        )
        write_build_info(package_dir)
        import torch

        sources = sum(len(ext.sources) for ext in self.extensions)
        print(f"gonccl: step 2 of 2: compiling the C++ extension ({sources} files) against torch "
              f"{torch.__version__}: the longest step, several minutes on 2 cores", flush=True)
        super().run()
        print(f"gonccl: built in {time.monotonic() - started:.0f} s", flush=True)
        for ext in self.extensions:
            problem = check_shared_libstdcxx(self.get_ext_fullpath(ext.name))
            if problem:
                raise SystemExit(f"gonccl: {problem}")

    def _package_dir(self):
        """Where the package's files go: the source tree in-place/editable, else build_lib."""
        if self.inplace:
            build_py = self.get_finalized_command("build_py")
            return os.path.abspath(build_py.get_package_dir("gonccl"))
        return os.path.join(os.path.abspath(self.build_lib), "gonccl")

    def _build_go(self, package_dir):
        go = shutil.which("go")
        if go is None:
            raise RuntimeError(
                "gonccl: the Go toolchain (`go`) is not on PATH; it is needed to "
                "build libgonccl.so (see go.mod for the version). Without Go, pass a "
                "prebuilt library: GONCCL_LIBRARY=/path/to/libgonccl.so pip install "
                "--no-build-isolation . (build one anywhere Go is with `make lib`)"
            )
        output = os.path.join(package_dir, "libgonccl.so")
        cmd = [go, "build", "-buildmode=c-shared", "-trimpath", "-o", output, "./capi"]
        print("gonccl: step 1 of 2: building libgonccl.so with Go (a minute or two; the first build "
              "also compiles its dependencies):", " ".join(cmd), flush=True)
        env = dict(os.environ, CGO_ENABLED="1")
        subprocess.run(cmd, cwd=ROOT, env=env, check=True)
        # go build writes a cgo header next to the library; gonccl.h is the
        # public header, so drop the generated one.
        generated = os.path.join(package_dir, "libgonccl.h")
        if os.path.exists(generated):
            os.remove(generated)


def write_build_info(package_dir):
    """Writes gonccl/_build_info.py: the torch the extension is compiled against.

    gonccl._library.load_extension compares it with the torch it runs beside, so a
    package built for another torch fails with an error naming both instead of an
    undefined-symbol ImportError from gonccl._C."""
    import torch

    with open(os.path.join(package_dir, "_build_info.py"), "w") as f:
        f.write(
            '"""Written by setup.py at build time: the torch gonccl._C was compiled against."""\n\n'
            f"TORCH_VERSION = {torch.__version__!r}\n"
            f"TORCH_CUDA = {torch.version.cuda!r}\n"
        )


def _source_version():
    """(GONCCL_VERSION_CODE from capi/gonccl.h, the gonccl.h function names, the package's version).

    The package's version is the header's: gonccl.h is its one source (gonccl.__version__
    reads it too, see gonccl._library.header_version)."""
    with open(os.path.join(ROOT, "capi", "gonccl.h")) as f:
        header = f.read()
    parts = {
        name: int(re.search(rf"#define GONCCL_{name}\s+(\d+)", header).group(1))
        for name in ("MAJOR", "MINOR", "PATCH")
    }
    code = parts["MAJOR"] * 10000 + parts["MINOR"] * 100 + parts["PATCH"]
    functions = sorted(set(re.findall(r"^goncclResult_t\s+(gonccl\w+)\s*\(", header, re.M))
                       | set(re.findall(r"^const char\*\s+(gonccl\w+)\s*\(", header, re.M)))
    package = f"{parts['MAJOR']}.{parts['MINOR']}.{parts['PATCH']}"
    return code, functions, package


def check_prebuilt(path):
    """Raises SystemExit naming the problem if the library at path does not match these sources.

    It loads the library in this (build) process with ctypes, which starts a Go runtime
    here; nothing forks afterwards, and the process ends with the build.
    """
    import ctypes

    if not os.path.isfile(path):
        raise SystemExit(f"gonccl: GONCCL_LIBRARY={path}: no such file")
    code, functions, want = _source_version()
    try:
        lib = ctypes.CDLL(os.path.abspath(path), mode=os.RTLD_LAZY | os.RTLD_LOCAL)
    except OSError as e:
        raise SystemExit(f"gonccl: GONCCL_LIBRARY={path} cannot be loaded: {e}") from e
    missing = [name for name in functions if not hasattr(lib, name)]
    got = ctypes.c_int(0)
    if "goncclGetVersion" in missing or lib.goncclGetVersion(ctypes.byref(got)) != 0:
        raise SystemExit(f"gonccl: GONCCL_LIBRARY={path} is not a gonccl library (no working goncclGetVersion)")
    if got.value != code:
        have = f"{got.value // 10000}.{got.value // 100 % 100}.{got.value % 100}"
        raise SystemExit(
            f"gonccl: GONCCL_LIBRARY={path} is gonccl {have} ({got.value}) but these sources are "
            f"gonccl {want} ({code}): build the library from the same sources (`make lib`) or "
            "install the gonccl release that matches it"
        )
    if missing:
        raise SystemExit(
            f"gonccl: GONCCL_LIBRARY={path} (gonccl {want}) lacks {len(missing)} function(s) that "
            f"capi/gonccl.h declares: {', '.join(missing)}; it was built from older sources: "
            "rebuild it from these (`make lib`)"
        )
    return want


def _use_prebuilt(path, package_dir):
    version = check_prebuilt(path)
    output = os.path.join(package_dir, "libgonccl.so")
    print(f"gonccl: GONCCL_LIBRARY: using {path} (gonccl {version}) instead of building it with Go")
    if os.path.abspath(path) != os.path.abspath(output):
        shutil.copyfile(path, output)
        os.chmod(output, 0o755)


def libstdcxx_for_torch():
    """Path of the libstdc++.so.6 a Python process with torch imported runs with, or None.

    Read from this process's memory map after importing torch (libtorch needs it)."""
    import torch  # noqa: F401

    try:
        with open("/proc/self/maps") as f:
            for line in f:
                fields = line.split()
                if len(fields) >= 6 and os.path.basename(fields[5]).startswith("libstdc++.so."):
                    return fields[5]
    except OSError:
        return None
    return None


def check_shared_libstdcxx(path):
    """None if the shared object at path uses libstdc++ as a shared library, else why not.

    A static copy shows as libstdc++'s own definitions (std::locale's) in its dynamic
    symbol table and no NEEDED libstdc++.so.6. Needs binutils' readelf and nm (there
    wherever a compiler is); without them it says nothing."""
    readelf, nm = shutil.which("readelf"), shutil.which("nm")
    if readelf is None or nm is None:
        print("gonccl: no readelf/nm: not checking how the extension links libstdc++")
        return None
    dynamic = subprocess.run([readelf, "-d", path], capture_output=True, text=True, check=True).stdout
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dynamic)
    symbols = subprocess.run([nm, "-D", "--defined-only", path], capture_output=True, text=True, check=True).stdout
    copied = [line.split()[-1] for line in symbols.splitlines() if " _ZNSt6locale" in line]
    if copied or not any(n.startswith("libstdc++.so") for n in needed):
        return (
            f"{os.path.basename(path)} carries its own libstdc++ (it defines {len(copied)} std::locale "
            f"symbols, e.g. {copied[:1]}; NEEDED: {', '.join(needed)}): the compiler linked libstdc++ "
            "statically, and in a process with torch two libstdc++ copies crash (SIGSEGV). Build with "
            "a compiler that has a shared libstdc++ (CXX=/usr/bin/g++) or without -static-libstdc++"
        )
    return None


def cuda_config():
    """(extension keyword arguments, None) for a CUDA build, or (None, reason).

    The CUDA path (csrc/cuda.cpp) reaches CUDA only through torch's own device
    interfaces (c10::Stream, c10::Event, the CUDA device guard that c10_cuda
    registers), so it needs no CUDA header or library of its own: PyPI's CUDA
    torch ships the CUDA runtime headers without crt/host_config.h, which
    c10/cuda's headers need, so they cannot be compiled against as installed.
    What it needs is a torch built with CUDA, whose c10_cuda provides that guard.
    """
    import torch

    if torch.version.cuda is None:
        return None, f"torch {torch.__version__} has no CUDA (torch.version.cuda is None)"
    from torch.utils.cpp_extension import library_paths

    torch_libs = library_paths()
    if not any(glob.glob(os.path.join(d, "libc10_cuda.*")) for d in torch_libs):
        return None, (
            f"torch {torch.__version__} says CUDA {torch.version.cuda} but ships no "
            f"libc10_cuda in {torch_libs}"
        )
    return {"define_macros": [("GONCCL_WITH_CUDA", "1")]}, None


def extension():
    """gonccl._C, with CUDA support where the torch it is built against has it."""
    import torch
    from torch.utils.cpp_extension import CppExtension

    kwargs = {
        "include_dirs": [os.path.join(ROOT, "capi")],
        "libraries": ["dl"],
        "define_macros": [],
    }
    stdcxx = libstdcxx_for_torch()
    if stdcxx:
        # An input file before the compiler's own -lstdc++: every C++ runtime symbol
        # resolves to torch's libstdc++, so a static libstdc++.a adds nothing.
        kwargs["extra_link_args"] = [stdcxx]
        print(f"gonccl: linking the extension against torch's libstdc++: {stdcxx}")
    cuda, reason = cuda_config()
    if cuda is None:
        print(f"gonccl: building the extension without CUDA support: {reason}")
    else:
        print(f"gonccl: building the extension with CUDA support (torch cuda {torch.version.cuda})")
        for key, value in cuda.items():
            kwargs[key] = kwargs[key] + value
    return CppExtension(
        name="gonccl._C",
        sources=sorted(
            os.path.relpath(path, ROOT)
            for path in glob.glob(os.path.join(ROOT, "csrc", "*.cpp"))
        ),
        extra_compile_args=["-O2", "-fvisibility=hidden"],
        **kwargs,
    )


setup(
    version=_source_version()[2],
    package_dir={"": "python"},
    packages=["gonccl", "gonccl.bench"],
    package_data={"gonccl": ["libgonccl.so", "include/gonccl.h"]},
    ext_modules=[extension()],
    cmdclass={"build_ext": BuildGoncclExt},
    zip_safe=False,
)

"""Builds gonccl: libgonccl.so (Go, c-shared) and the C++ extension gonccl._C.

    pip install --no-build-isolation .          # torch must already be installed
    pip install --no-build-isolation -e .       # dev: native files land in python/gonccl/
    python setup.py build_ext --inplace         # same, without installing

Both native files ship inside the package: gonccl/libgonccl.so and
gonccl/_C*.so, plus the C header as gonccl/include/gonccl.h. gonccl._C does
not link against libgonccl.so; it dlopen()s it when the first process group is
created (see csrc/library.hpp for why).

GONCCL_SKIP_GO_BUILD=1 builds only the C++ extension (for work on csrc/ while
the Go side does not build); the package is then unusable until libgonccl.so
is built.
"""

import glob
import os
import shutil
import subprocess

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

ROOT = os.path.dirname(os.path.abspath(__file__))


class BuildGoncclExt(BuildExtension):
    """build_ext that first builds libgonccl.so and copies gonccl.h."""

    def run(self):
        package_dir = self._package_dir()
        os.makedirs(package_dir, exist_ok=True)
        if os.environ.get("GONCCL_SKIP_GO_BUILD") == "1":
            print("gonccl: GONCCL_SKIP_GO_BUILD=1, not building libgonccl.so")
        else:
            self._build_go(package_dir)
        include_dir = os.path.join(package_dir, "include")
        os.makedirs(include_dir, exist_ok=True)
        shutil.copyfile(
            os.path.join(ROOT, "capi", "gonccl.h"),
            os.path.join(include_dir, "gonccl.h"),
        )
        super().run()

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
                "build libgonccl.so (see go.mod for the version)"
            )
        output = os.path.join(package_dir, "libgonccl.so")
        cmd = [go, "build", "-buildmode=c-shared", "-trimpath", "-o", output, "./capi"]
        print("gonccl:", " ".join(cmd))
        env = dict(os.environ, CGO_ENABLED="1")
        subprocess.run(cmd, cwd=ROOT, env=env, check=True)
        # go build writes a cgo header next to the library; gonccl.h is the
        # public header, so drop the generated one.
        generated = os.path.join(package_dir, "libgonccl.h")
        if os.path.exists(generated):
            os.remove(generated)


setup(
    package_dir={"": "python"},
    packages=["gonccl", "gonccl.bench"],
    package_data={"gonccl": ["libgonccl.so", "include/gonccl.h"]},
    ext_modules=[
        CppExtension(
            name="gonccl._C",
            sources=sorted(
                os.path.relpath(path, ROOT)
                for path in glob.glob(os.path.join(ROOT, "csrc", "*.cpp"))
            ),
            include_dirs=[os.path.join(ROOT, "capi")],
            libraries=["dl"],
            extra_compile_args=["-O2", "-fvisibility=hidden"],
        )
    ],
    cmdclass={"build_ext": BuildGoncclExt},
    zip_safe=False,
)

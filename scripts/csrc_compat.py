#!/usr/bin/env python3
"""Compile every csrc file against the C++ headers of several torch releases.

    python scripts/csrc_compat.py                 # the supported range, SUPPORTED below
    python scripts/csrc_compat.py 2.11.0 2.15.0   # just these
    python scripts/csrc_compat.py --fetch-only 2.11.0

csrc must build against every torch from 2.11 to 2.15 (its version guards use
TORCH_VERSION_MAJOR/MINOR). The build itself only ever sees the torch it is
installed beside, so this checks the others: for each version it downloads that
release's wheel once (`pip download --no-deps`, ~0.5-1 GB), keeps only its
torch/include tree (~60 MB) and the C++ standard its cpp_extension builds with,
in ~/.cache/gonccl/torch-headers/VERSION/ (GONCCL_CACHE overrides ~/.cache/gonccl),
and deletes the wheel. Then every csrc/*.cpp is compiled with `g++ -fsyntax-only`
and the flags torch's BuildExtension would give it, with -DGONCCL_WITH_CUDA=1 (the
CUDA branch needs no CUDA header: csrc reaches CUDA through torch's device-generic
interfaces) and, for the files that test that macro, without it too: about 5 s of
CPU per file and version. (A precompiled header of the torch headers is no faster
here: at 750 MB, loading it costs what parsing them does.)

Exit status: 0 if every file compiled everywhere, 1 if one did not (its errors are
printed), 2 if headers could not be fetched (no network, pip refused).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CSRC = os.path.join(ROOT, "csrc")
# The releases csrc is checked against; pyproject.toml's torch requirement says the same.
SUPPORTED = ["2.11.0", "2.12.0", "2.13.0", "2.14.0", "2.15.0"]
FETCH_TIMEOUT = 1800
COMPILE_TIMEOUT = 900


class FetchError(Exception):
    """The headers of a torch release could not be had (network, pip, a missing wheel)."""


def cache_root() -> str:
    base = os.environ.get("GONCCL_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "gonccl")
    return os.path.join(base, "torch-headers")


def headers_dir(version: str) -> str:
    return os.path.join(cache_root(), version)


def _have(version: str) -> bool:
    d = headers_dir(version)
    return os.path.isfile(os.path.join(d, "include", "torch", "csrc", "api", "include", "torch", "version.h")) and (
        os.path.isfile(os.path.join(d, "std"))
    )


def _cxx_standard(cpp_extension_source: str) -> str:
    """The -std= torch's BuildExtension passes on Linux, read from its cpp_extension.py."""
    m = re.search(r"cpp_flag_prefix \+ '(c\+\+\d+)'", cpp_extension_source) or re.search(
        r"common_cflags \+= \['-std=(c\+\+\d+)'", cpp_extension_source
    )
    if not m:
        raise FetchError("cannot tell which C++ standard this torch's cpp_extension.py builds with")
    return m.group(1)


def fetch(version: str, python: str = sys.executable, log=print) -> str:
    """The cached headers of torch==version (downloading them once); returns their dir."""
    if _have(version):
        return headers_dir(version)
    os.makedirs(cache_root(), exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".fetch-{version}-", dir=cache_root())
    try:
        log(f"csrc_compat: downloading torch=={version} (once; only its headers are kept)")
        cmd = [
            python, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps",
            "--only-binary=:all:", "--python-version", "3.11", "--platform", "manylinux_2_28_x86_64",
            f"torch=={version}", "-d", tmp,
        ]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=FETCH_TIMEOUT)
        except subprocess.TimeoutExpired as e:
            raise FetchError(f"pip download torch=={version} took more than {FETCH_TIMEOUT}s") from e
        wheels = [f for f in os.listdir(tmp) if f.endswith(".whl")]
        if proc.returncode != 0 or len(wheels) != 1:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            raise FetchError(f"pip download torch=={version} failed (exit {proc.returncode}): {' / '.join(tail)}")
        wheel = os.path.join(tmp, wheels[0])
        out = os.path.join(tmp, "x")
        with zipfile.ZipFile(wheel) as z:
            std = _cxx_standard(z.read("torch/utils/cpp_extension.py").decode())
            for name in z.namelist():
                if name.startswith("torch/include/") and not name.endswith("/"):
                    z.extract(name, out)
        os.remove(wheel)
        with open(os.path.join(tmp, "std"), "w") as f:
            f.write(std + "\n")
        final = headers_dir(version)
        shutil.rmtree(final, ignore_errors=True)
        os.makedirs(final)
        os.rename(os.path.join(out, "torch", "include"), os.path.join(final, "include"))
        os.rename(os.path.join(tmp, "std"), os.path.join(final, "std"))
        return final
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _cxx() -> str:
    cxx = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    if not cxx:
        raise FetchError("no C++ compiler (g++) on PATH")
    return cxx


def _base_flags(version: str) -> list[str]:
    d = headers_dir(version)
    with open(os.path.join(d, "std")) as f:
        std = f.read().strip()
    inc = os.path.join(d, "include")
    return [
        f"-std={std}", "-fPIC", "-DNDEBUG", "-DTORCH_API_INCLUDE_EXTENSION_H", "-DTORCH_EXTENSION_NAME=_C",
        "-I" + os.path.join(ROOT, "capi"), "-I" + inc, "-I" + os.path.join(inc, "torch", "csrc", "api", "include"),
        "-I" + sysconfig.get_paths()["include"],
    ]


def uses_cuda_macro(path: str, seen: set[str] | None = None) -> bool:
    """Whether path, or a csrc header it includes, tests GONCCL_WITH_CUDA in a directive."""
    seen = seen if seen is not None else set()
    if path in seen or not os.path.exists(path):
        return False
    seen.add(path)
    text = open(path).read()
    if re.search(r"^\s*#\s*(if|ifdef|ifndef|elif).*GONCCL_WITH_CUDA", text, re.M):
        return True
    return any(
        uses_cuda_macro(os.path.join(CSRC, inc), seen) for inc in re.findall(r'^\s*#\s*include\s+"([^"]+)"', text, re.M)
    )


def jobs_for(files: list[str]) -> list[tuple[str, bool]]:
    """(file, with_cuda) pairs: every file with CUDA, and those that test the macro without."""
    out = [(f, True) for f in files]
    out += [(f, False) for f in files if uses_cuda_macro(f)]
    return out


def compile_one(version: str, path: str, cuda: bool) -> tuple[bool, str, float]:
    cmd = [_cxx(), "-fsyntax-only", "-Wall", *_base_flags(version)]
    if cuda:
        cmd.append("-DGONCCL_WITH_CUDA=1")
    cmd.append(path)
    t = time.monotonic()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=COMPILE_TIMEOUT)
    except subprocess.TimeoutExpired:
        return False, f"timed out after {COMPILE_TIMEOUT}s", time.monotonic() - t
    errors = "\n".join(line for line in proc.stderr.splitlines() if "error" in line or "note:" in line)
    return proc.returncode == 0, errors or proc.stderr, time.monotonic() - t


def check(versions: list[str], files: list[str] | None = None, jobs: int = 0, log=print) -> list[str]:
    """Compiles files (default every csrc/*.cpp) against each version; returns the failures."""
    files = files or sorted(os.path.join(CSRC, f) for f in os.listdir(CSRC) if f.endswith(".cpp"))
    jobs = jobs or max(1, min(4, os.cpu_count() or 1))
    failures = []
    for version in versions:
        fetch(version, log=log)
        with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
            work = {pool.submit(compile_one, version, f, cuda): (f, cuda) for f, cuda in jobs_for(files)}
            for fut in concurrent.futures.as_completed(work):
                f, cuda = work[fut]
                ok, errors, secs = fut.result()
                what = f"torch {version} {os.path.relpath(f, ROOT)} ({'with' if cuda else 'without'} CUDA)"
                log(f"csrc_compat: {'ok  ' if ok else 'FAIL'} {what} {secs:.1f}s")
                if not ok:
                    failures.append(f"{what}:\n{errors}")
    return failures


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("versions", nargs="*", default=SUPPORTED, help=f"torch releases (default {' '.join(SUPPORTED)})")
    ap.add_argument("--fetch-only", action="store_true", help="download the headers, compile nothing")
    ap.add_argument("-j", "--jobs", type=int, default=0, help="parallel compiles (default: cores, at most 4)")
    args = ap.parse_args()
    try:
        if args.fetch_only:
            for v in args.versions:
                print(fetch(v))
            return 0
        failures = check(args.versions, jobs=args.jobs)
    except FetchError as e:
        print(f"csrc_compat: {e}", file=sys.stderr)
        return 2
    for f in failures:
        print(f"\n{f}", file=sys.stderr)
    print(f"csrc_compat: {'FAILED: ' + str(len(failures)) + ' compiles' if failures else 'all compiled'}"
          f" against torch {', '.join(args.versions)}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

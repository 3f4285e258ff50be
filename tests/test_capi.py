"""The C ABI works from plain C, with no torch: tests/capi/capi_test.c, compiled with gcc
against the header and libgonccl.so shipped in the installed package, runs as 2, 3 and
4 separate processes (rank 0 writes the unique id to a file the others read) and every
rank's self-checks pass: all_reduce (sizes 0..1M, in place, MIN/PROD/AVG), broadcast
from every root, all_gather (also in place), async requests with a completion
callback, error codes for bad arguments, a rank refusing a call its peers made
(goncclCommRefuse), use after destroy.

Linking an executable with plain `-lgonccl` also proves the library has no unresolved
symbols (ld refuses those for executables by default).
"""

import os
import shutil

import pytest

import _harness

CAPI_SOURCE = os.path.join(_harness.TESTS_DIR, "capi", "capi_test.c")
RUN_TIMEOUT = 180


@pytest.fixture(scope="module")
def capi_binary(package_dir, tmp_path_factory):
    gcc = shutil.which("gcc")
    assert gcc, "gcc is needed to build the C ABI test"
    include = os.path.join(package_dir, "include")
    libdir = package_dir
    assert os.path.isfile(os.path.join(include, "gonccl.h")), f"the package ships no include/gonccl.h: {package_dir}"
    assert os.path.isfile(os.path.join(libdir, "libgonccl.so")), f"the package ships no libgonccl.so: {package_dir}"
    out = str(tmp_path_factory.mktemp("capi") / "capi_test")
    argv = [
        gcc, "-std=c11", "-D_DEFAULT_SOURCE", "-Wall", "-O1",
        f"-I{include}", CAPI_SOURCE, "-o", out,
        f"-L{libdir}", "-lgonccl", f"-Wl,-rpath,{libdir}", "-lpthread", "-lm",
    ]
    run = _harness.run_processes([argv], timeout=120, names=["gcc"])
    run.assert_ok("compiling tests/capi/capi_test.c")
    return out


@pytest.mark.timeout(150)
@pytest.mark.parametrize("what", ["capi_test.c", "gonccl.h as C99", "gonccl.h as C++17"])
def test_capi_compiles_cleanly(package_dir, tmp_path, what):
    """The test program and the shipped header compile without a single warning under
    -Wall -Wextra (-Wpedantic for the header alone) -Werror."""
    include = os.path.join(package_dir, "include")
    if what == "capi_test.c":
        src, argv = CAPI_SOURCE, ["gcc", "-std=c11", "-D_DEFAULT_SOURCE", "-O1"]
    else:
        src = str(tmp_path / "header.c")
        with open(src, "w") as f:
            f.write('#include "gonccl.h"\nint main(void) { return goncclSuccess; }\n')
        argv = (["gcc", "-std=c99", "-Wpedantic"] if what.endswith("C99")
                else ["g++", "-std=c++17", "-Wpedantic", "-x", "c++"])
    argv += ["-Wall", "-Wextra", "-Werror", f"-I{include}", "-c", src, "-o", str(tmp_path / "out.o")]
    run = _harness.run_processes([argv], timeout=120, names=["compiler"])
    run.assert_ok(f"compiling {what} with -Werror")
    assert run.procs[0].stderr.strip() == "", run.describe()
    assert os.path.getsize(tmp_path / "out.o") > 0


@pytest.mark.timeout(RUN_TIMEOUT + 60)
@pytest.mark.parametrize("nranks", [2, 3, 4])
def test_capi_ranks(capi_binary, nranks, tmp_path):
    id_file = str(tmp_path / "unique_id")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GONCCL_")}
    run = _harness.run_processes(
        [[capi_binary, str(r), str(nranks), id_file] for r in range(nranks)],
        timeout=RUN_TIMEOUT,
        envs=[env] * nranks,
        cwd=str(tmp_path),
        names=[f"rank {r}" for r in range(nranks)],
    )
    run.assert_ok(f"capi_test with {nranks} ranks")
    for r, proc in enumerate(run.procs):
        assert f"rank {r}:" in proc.stdout and "checks passed" in proc.stdout, proc.describe()

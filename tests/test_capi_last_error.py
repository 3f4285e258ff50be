"""goncclGetLastError is safe to read from any thread for as long as gonccl.h says
(until the calling thread's next goncclGetLastError): tests/capi/last_error_test.c runs
threads that make calls fail as fast as they can (each failure replaces the message)
beside threads that fetch the message and keep re-reading it, which must never see it
freed or changed. It runs twice: built with -fsanitize=address, where a read of a freed
string is a heap-use-after-free report (the Go c-shared library works under ASan), and
built plainly, where it shows as a changed string. Both failed on the old code, which
handed every thread the same malloc'd string and freed it on the next failure.
"""

import os
import shutil

import pytest

import _harness

SOURCE = os.path.join(_harness.TESTS_DIR, "capi", "last_error_test.c")
SECONDS = "2"


def _build(package_dir, out, extra):
    gcc = shutil.which("gcc")
    assert gcc, "gcc is needed to build the C ABI test"
    include = os.path.join(package_dir, "include")
    argv = [
        gcc, "-std=c11", "-D_DEFAULT_SOURCE", "-Wall", "-Werror", "-O1", "-g", *extra,
        f"-I{include}", SOURCE, "-o", out,
        f"-L{package_dir}", "-lgonccl", f"-Wl,-rpath,{package_dir}", "-lpthread",
    ]
    run = _harness.run_processes([argv], timeout=120, names=["gcc"])
    run.assert_ok("compiling tests/capi/last_error_test.c")
    return out


@pytest.mark.timeout(240)
@pytest.mark.parametrize("sanitizer", [[], ["-fsanitize=address"]], ids=["plain", "asan"])
def test_last_error_from_many_threads(package_dir, tmp_path, sanitizer):
    binary = _build(package_dir, str(tmp_path / "last_error_test"), sanitizer)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GONCCL_")}
    # The library's few static C strings (result names) live for the whole process.
    env["ASAN_OPTIONS"] = "detect_leaks=0"
    run = _harness.run_processes([[binary, SECONDS]], timeout=120, envs=[env], cwd=str(tmp_path), names=["threads"])
    run.assert_ok("last_error_test")
    proc = run.procs[0]
    assert "checks passed" in proc.stdout and "AddressSanitizer" not in proc.stderr, proc.describe()

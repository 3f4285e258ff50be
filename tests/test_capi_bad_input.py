"""Bad input at every door of the C ABI (tests/capi/bad_input_test.c, plain C, no torch):
NULL communicators, buffers, requests and out-parameters; data types and reduce ops
outside the enums (including values that an 8-bit conversion would wrap onto valid
ones); counts whose byte size, or whose product with the number of ranks, overflows;
roots and peers out of range; use after destroy and double destroy; the error string
of every result code. Each must return the documented code with a message naming the
problem, never crash or hang, and leave the communicator computing correctly.
"""

import os
import shutil

import pytest

import _harness

SOURCE = os.path.join(_harness.TESTS_DIR, "capi", "bad_input_test.c")
RUN_TIMEOUT = 120


@pytest.fixture(scope="module")
def bad_input_binary(package_dir, tmp_path_factory):
    gcc = shutil.which("gcc")
    assert gcc, "gcc is needed to build the C ABI test"
    include = os.path.join(package_dir, "include")
    out = str(tmp_path_factory.mktemp("capi_bad") / "bad_input_test")
    argv = [
        gcc, "-std=c11", "-D_DEFAULT_SOURCE", "-Wall", "-Werror", "-O1",
        f"-I{include}", SOURCE, "-o", out,
        f"-L{package_dir}", "-lgonccl", f"-Wl,-rpath,{package_dir}", "-lpthread",
    ]
    run = _harness.run_processes([argv], timeout=120, names=["gcc"])
    run.assert_ok("compiling tests/capi/bad_input_test.c")
    return out


@pytest.mark.timeout(RUN_TIMEOUT + 60)
@pytest.mark.parametrize("nranks", [2, 3])
def test_capi_bad_input(bad_input_binary, nranks, tmp_path):
    id_file = str(tmp_path / "unique_id")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GONCCL_")}
    run = _harness.run_processes(
        [[bad_input_binary, str(r), str(nranks), id_file] for r in range(nranks)],
        timeout=RUN_TIMEOUT,
        envs=[env] * nranks,
        cwd=str(tmp_path),
        names=[f"rank {r}" for r in range(nranks)],
    )
    run.assert_ok(f"bad_input_test with {nranks} ranks")
    for r, proc in enumerate(run.procs):
        assert f"rank {r}:" in proc.stdout and "checks passed" in proc.stdout, proc.describe()

"""Device buffers through the C ABI, against the fake CUDA driver (tests/fakecuda).

tests/capi/cuda_capi_test.c runs as 2 and 3 processes with GONCCL_CUDA_LIBRARY naming
the fake, which stands in for libcuda.so.1 (host memory as device memory, streams as
ordered queues run by their own threads, with random delays). Every rank checks the
values of all_reduce (also in place and async), broadcast, all_gather (also in place),
reduce_scatter, reduce, alltoall, gather and alltoallv on "device" buffers; that a
slow kernel queued before a call is seen by it; that work queued after a blocking call
or on another stream after goncclRequestWaitStream sees the result; that no queued
copy touched freed memory and the pinned pool is freed by goncclCommDestroy; and that
bad pointers and streams give errors naming the CUDA error; and that a collective the
ranks disagree on fails everywhere without copying anything back. Stream ordering (issue
13): a consumer on the legacy or per-thread default stream after goncclRequestWaitStream
sees the result although gonccl's stream is non-blocking and its copies run late; a
copy-out queued after an op completed, under goncclRequestHoldStream, is seen by the next
op; cudaStreamPerThread and streams under graph capture are refused before anything is
queued; memory of another device than the stream's is refused; the pinned pool holds one
primary context reference until destroy; send/recv (group ring, async with tags, any
source) on device buffers.

This is the only place the CUDA path runs in CI: no real GPU is involved.
"""

import glob
import os
import shutil
import subprocess

import pytest

import _harness

FAKE_DIR = os.path.join(_harness.TESTS_DIR, "fakecuda")
TEST_SOURCE = os.path.join(_harness.TESTS_DIR, "capi", "cuda_capi_test.c")
RUN_TIMEOUT = 180


@pytest.fixture(scope="module")
def fakecuda(tmp_path_factory):
    """Builds libfakecuda.so; returns its path."""
    gcc = shutil.which("gcc")
    assert gcc, "gcc is needed to build the fake CUDA driver"
    sources = sorted(glob.glob(os.path.join(FAKE_DIR, "*.c")))
    assert sources, f"no fake CUDA driver sources in {FAKE_DIR}"
    out = str(tmp_path_factory.mktemp("fakecuda") / "libfakecuda.so")
    run = _harness.run_processes(
        [[gcc, "-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-pthread", "-o", out, *sources]],
        timeout=120,
        names=["gcc fakecuda"],
    )
    run.assert_ok("compiling tests/fakecuda/*.c")
    return out


@pytest.fixture(scope="module")
def cuda_capi_binary(package_dir, fakecuda, tmp_path_factory):
    include = os.path.join(package_dir, "include")
    fakedir = os.path.dirname(fakecuda)
    out = str(tmp_path_factory.mktemp("cuda_capi") / "cuda_capi_test")
    argv = [
        shutil.which("gcc"), "-std=c11", "-D_DEFAULT_SOURCE", "-Wall", "-Werror", "-O1",
        f"-I{include}", f"-I{FAKE_DIR}", TEST_SOURCE, "-o", out,
        f"-L{package_dir}", "-lgonccl", f"-Wl,-rpath,{package_dir}",
        f"-L{fakedir}", "-lfakecuda", f"-Wl,-rpath,{fakedir}", "-lpthread", "-lm",
    ]
    run = _harness.run_processes([argv], timeout=120, names=["gcc"])
    run.assert_ok("compiling tests/capi/cuda_capi_test.c")
    return out


@pytest.mark.timeout(60)
def test_libgonccl_does_not_link_cuda(package_dir):
    """libgonccl.so must load on machines without CUDA: no libcuda in its NEEDED
    entries and no undefined cu* symbols (the driver is reached with dlopen)."""
    lib = os.path.join(package_dir, "libgonccl.so")
    readelf = shutil.which("readelf")
    assert readelf, "readelf (binutils) is needed"
    dyn = subprocess.run([readelf, "-d", "-W", lib], capture_output=True, text=True, timeout=30, check=True).stdout
    needed = [line for line in dyn.splitlines() if "(NEEDED)" in line]
    assert needed and not any("cuda" in line.lower() for line in needed), needed
    syms = subprocess.run([readelf, "--dyn-syms", "-W", lib], capture_output=True, text=True, timeout=30, check=True).stdout
    undefined_cu = [
        line.split()[-1] for line in syms.splitlines()
        if " UND " in line and line.split()[-1].startswith("cu")
    ]
    assert not undefined_cu, undefined_cu


@pytest.mark.timeout(RUN_TIMEOUT + 60)
@pytest.mark.parametrize("nranks", [2, 3])
def test_cuda_capi_ranks(cuda_capi_binary, fakecuda, nranks, tmp_path):
    id_file = str(tmp_path / "unique_id")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GONCCL_")}
    env["GONCCL_CUDA_LIBRARY"] = fakecuda
    env["GONCCL_DEBUG"] = "INFO"
    env["GONCCL_DEBUG_SUBSYS"] = "INIT"
    run = _harness.run_processes(
        [[cuda_capi_binary, str(r), str(nranks), id_file] for r in range(nranks)],
        timeout=RUN_TIMEOUT,
        envs=[env] * nranks,
        cwd=str(tmp_path),
        names=[f"rank {r}" for r in range(nranks)],
    )
    run.assert_ok(f"cuda_capi_test with {nranks} ranks")
    for r, proc in enumerate(run.procs):
        assert f"rank {r}:" in proc.stdout and "checks passed" in proc.stdout, proc.describe()
        # The bad-input cases only the fake can check (cuda_capi_test.c, test_bad) ran.
        assert f"rank {r}: fake-only bad-input checks ran" in proc.stdout, proc.describe()
        assert f"CUDA driver loaded from {fakecuda}" in proc.stderr, proc.describe()

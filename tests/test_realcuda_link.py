"""The real-CUDA C test links, and runs, without a GPU.

tests/capi/realcuda.c implements the fake driver's test hooks (tests/fakecuda/fakecuda.h)
with the real CUDA driver API, so that tests/capi/cuda_capi_test.c runs on a GPU
(scripts/gpu-check.sh). It rotted unseen while CI only compiled it: five hooks missing,
and a link line without libcuda. Here the fake driver is built as a libcuda.so.1
stand-in (soname libcuda.so.1), and tests/capi/link-realcuda.sh links realcuda.o and the
test against it with -Wl,--no-undefined, the very script gpu-check runs against the
NVIDIA driver's libcuda.so.1. It checks with nm that realcuda.o (and, nm -D,
librealcuda.so) defines every hook fakecuda.h declares, reading the list from the header.
Then the test runs on 2 ranks through realcuda.c over the stand-in: the hooks' real-driver
logic (managed memory, memsets and host functions as kernels, capture, late streams,
counters) runs in CI, with the fake's queues as the GPU; and tests/capi/hooks_selftest.c
checks both implementations of the hooks alike, the planted stale read included (the C
test only ever expects none, which a consumer that never looked would also give).
"""

import glob
import os
import re
import shutil
import subprocess

import pytest

import _harness

TESTS = _harness.TESTS_DIR
FAKE_DIR = os.path.join(TESTS, "fakecuda")
CAPI_DIR = os.path.join(TESTS, "capi")
LINK = os.path.join(CAPI_DIR, "link-realcuda.sh")
RUN_TIMEOUT = 180


def header_hooks() -> set[str]:
    """The functions tests/fakecuda/fakecuda.h declares (comments stripped)."""
    with open(os.path.join(FAKE_DIR, "fakecuda.h")) as f:
        text = f.read()
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return set(re.findall(r"\b(fakecuda\w+)\s*\(", text))


@pytest.fixture(scope="module")
def standin(tmp_path_factory):
    """The fake driver built as libcuda.so.1; returns its directory."""
    gcc = shutil.which("gcc")
    assert gcc, "gcc is needed to build the fake CUDA driver"
    out = tmp_path_factory.mktemp("standin")
    run = _harness.run_processes(
        [[gcc, "-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-pthread", "-Wl,-soname,libcuda.so.1",
          "-Wl,-Bsymbolic", "-o", str(out / "libcuda.so.1"), *sorted(glob.glob(os.path.join(FAKE_DIR, "*.c")) + glob.glob(os.path.join(FAKE_DIR, "*.cc")))]],
        timeout=120,
        names=["gcc fake libcuda.so.1"],
    )
    run.assert_ok("building the fake driver as libcuda.so.1")
    return str(out)


def link(out_dir, standin_dir, package_dir, script=LINK):
    return subprocess.run(["bash", script, str(out_dir), standin_dir, package_dir],
                          capture_output=True, text=True, timeout=180)


@pytest.fixture(scope="module")
def linked(standin, package_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("realcuda")
    proc = link(out, standin, package_dir)
    assert proc.returncode == 0, f"link-realcuda.sh failed:\n{proc.stdout}\n{proc.stderr}"
    return str(out), proc


@pytest.mark.timeout(240)
def test_realcuda_links_with_no_undefined(linked):
    out, proc = linked
    hooks = header_hooks()
    assert len(hooks) >= 14, f"fakecuda.h parsed to too few hooks: {sorted(hooks)}"
    assert f"realcuda.o defines all {len(hooks)} hooks" in proc.stdout, proc.stdout
    assert f"librealcuda.so defines all {len(hooks)} hooks" in proc.stdout, proc.stdout
    assert "--no-undefined" in proc.stderr  # the link lines (set -x) as gpu-check runs them
    exported = subprocess.run(["nm", "-D", "--defined-only", os.path.join(out, "librealcuda.so")],
                              capture_output=True, text=True, timeout=30, check=True).stdout.split()
    assert not hooks - set(exported), sorted(hooks - set(exported))
    needed = subprocess.run(["readelf", "-d", "-W", os.path.join(out, "cuda_capi_test")],
                            capture_output=True, text=True, timeout=30, check=True).stdout
    assert "[librealcuda.so]" in needed and "[libcuda.so.1]" in needed, needed


@pytest.mark.timeout(240)
def test_link_fails_when_a_hook_is_missing(standin, package_dir, tmp_path):
    """The hook check fails, naming the hook, for a realcuda.c without fakecudaCheckF32
    (a copy of the sources where its definition is renamed)."""
    src = tmp_path / "tests"
    shutil.copytree(CAPI_DIR, src / "capi")
    shutil.copytree(FAKE_DIR, src / "fakecuda")
    path = src / "capi" / "realcuda.c"
    text = path.read_text()
    assert "int fakecudaCheckF32(" in text
    path.write_text(text.replace("int fakecudaCheckF32(", "int notTheHookCheckF32("))
    proc = link(tmp_path / "out", standin, package_dir, script=str(src / "capi" / "link-realcuda.sh"))
    assert proc.returncode != 0, proc.stdout
    assert "does not define these hooks of tests/fakecuda/fakecuda.h: fakecudaCheckF32" in proc.stderr, proc.stderr
    assert not (tmp_path / "out" / "librealcuda.so").exists()


@pytest.mark.timeout(RUN_TIMEOUT + 60)
def test_realcuda_runs_over_the_standin(linked, standin, tmp_path):
    out, _ = linked
    nranks = 2
    lib = os.path.join(out, "librealcuda.so")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GONCCL_")}
    env["GONCCL_CUDA_LIBRARY"] = lib
    env["GONCCL_DEBUG"] = "INFO"
    env["GONCCL_DEBUG_SUBSYS"] = "INIT"
    run = _harness.run_processes(
        [[os.path.join(out, "cuda_capi_test"), str(r), str(nranks), str(tmp_path / "id")] for r in range(nranks)],
        timeout=RUN_TIMEOUT,
        envs=[env] * nranks,
        cwd=str(tmp_path),
        names=[f"rank {r}" for r in range(nranks)],
    )
    run.assert_ok("cuda_capi_test through realcuda.c over the fake libcuda.so.1")
    for r, proc in enumerate(run.procs):
        assert f"rank {r}:" in proc.stdout and "checks passed" in proc.stdout, proc.describe()
        assert f"CUDA driver loaded from {lib}" in proc.stderr, proc.describe()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("through", ["fake", "realcuda"])
def test_hooks_selftest(linked, standin, tmp_path, through):
    out, _ = linked
    exe = os.path.join(out, "hooks_selftest")
    if through == "fake":  # the same program linked against the fake's own hooks
        exe = str(tmp_path / "hooks_selftest_fake")
        subprocess.run(["gcc", "-std=c11", "-D_DEFAULT_SOURCE", "-Wall", "-Werror", "-O1", f"-I{FAKE_DIR}", "-o", exe,
                        os.path.join(CAPI_DIR, "hooks_selftest.c"), f"-L{standin}", "-l:libcuda.so.1",
                        f"-Wl,-rpath,{standin}"], check=True, timeout=120)
    # The planted stale read needs the two streams on hardware queues of their own: at
    # CUDA_DEVICE_MAX_CONNECTIONS=1 the fake, like the driver, runs them in one queue.
    env = dict(os.environ, CUDA_DEVICE_MAX_CONNECTIONS="8")
    run = _harness.run_processes([[exe]], timeout=60, envs=[env], cwd=str(tmp_path), names=[f"hooks_selftest ({through})"])
    run.assert_ok("hooks_selftest")
    assert "all checks passed (1 stale read, as planted)" in run.procs[0].stdout, run.procs[0].describe()

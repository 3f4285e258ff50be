"""One-sided windows (torch 2.15's dist._new_window / c10d.Window) on CPU tensors, in
separate processes on one host: workers/window_worker.py checks put + signal /
wait_signal against values computed from the writing rank, map_remote_tensor aliasing a
peer's window, the async forms, bad input, deregistration, and a wait for a signal that
never comes failing at its timeout, naming the silent rank. Across two hosts:
tests/test_two_hosts.py. On a torch without windows, gonccl.window.new_window says so.

Windows on device memory through the C ABI, against the fake CUDA driver:
tests/capi/cuda_window_test.c (puts, signals, peer mappings and bad input at 2 and 3
ranks, on distinct fake devices and on one shared device, and with every context's
streams on one hardware queue). cuda/window_test.go checks the same path in Go,
including a dead peer, mixed registrations, and faults the checks must catch."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

import _harness
from _harness import WorkerRun
from test_cuda_capi import _build_fake, _build_test, _run_ranks

CUDA_WINDOW_SOURCE = _harness.TESTS_DIR + "/capi/cuda_window_test.c"

RUN_TIMEOUT = 120
SECTIONS = ("put_signal", "map_remote", "async_all_to_all", "bad_input", "wait_timeout", "deregister")
TORCH = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])


@pytest.mark.skipif(TORCH < (2, 15), reason="one-sided windows came in torch 2.15")
@pytest.mark.timeout(RUN_TIMEOUT + 60)
@pytest.mark.parametrize("world_size", [3])
def test_windows_on_one_host(tmp_path, world_size):
    run = WorkerRun("window_worker.py", world_size, str(tmp_path), timeout=RUN_TIMEOUT)
    for name in SECTIONS:
        run.section(name)
    run.run.assert_ok(f"windows on {world_size} ranks")


@pytest.mark.skipif(TORCH < (2, 15), reason="one-sided windows came in torch 2.15")
@pytest.mark.timeout(RUN_TIMEOUT + 60)
def test_windows_on_cuda_tensors(tmp_path):
    """A GPU machine's check (scripts/gpu-check.sh): windows over CUDA tensors of 2
    ranks (one per GPU where there are two, else sharing GPU 0), through torch
    (workers/window_worker.py, WINDOW_WORKER_CUDA=1). Without a GPU the same path runs
    against the fake driver through the C ABI: test_cuda_windows_capi below."""
    from test_contract import _no_gpu_reason

    reason = _no_gpu_reason()
    if reason:
        pytest.skip(reason)
    run = WorkerRun("window_worker.py", 2, str(tmp_path), timeout=RUN_TIMEOUT, env={"WINDOW_WORKER_CUDA": "1"})
    run.section("cuda_windows")
    run.run.assert_ok("windows on CUDA tensors")


@pytest.mark.skipif(TORCH >= (2, 15), reason="this torch has windows (see the tests above)")
def test_new_window_on_older_torch_says_why():
    code = (
        "import torch, gonccl.window as w\n"
        "assert not w.torch_supports_windows()\n"
        "try:\n"
        "    w.new_window(torch.zeros(4))\n"
        "except RuntimeError as e:\n"
        "    print(e)\n"
        "else:\n"
        "    raise SystemExit('no error')\n"
    )
    res = subprocess.run([_harness.PYTHON, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "one-sided windows need torch 2.15 or newer" in res.stdout and torch.__version__ in res.stdout, res.stdout


def test_window_support_matches_torch():
    import gonccl.window as w

    assert w.torch_supports_windows() == (TORCH >= (2, 15))
    assert sys.modules["gonccl.window"].MIN_TORCH == (2, 15)


@pytest.fixture(scope="module")
def cuda_window_run(package_dir, tmp_path_factory):
    """Builds the fake driver and cuda_window_test; returns a function that runs it."""
    fake = _build_fake(tmp_path_factory, "fakecuda_win", [])
    binary = _build_test(tmp_path_factory, CUDA_WINDOW_SOURCE, fake, package_dir, [])
    return lambda nranks, cwd, extra: _run_ranks(binary, fake, nranks, cwd + "/unique_id", cwd, extra)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("layout", ["two-devices", "one-device", "one-queue", "no-peer"])
@pytest.mark.parametrize("nranks", [2, 3])
def test_cuda_windows_capi(cuda_window_run, nranks, layout, tmp_path):
    """Device windows through the C ABI: ranks on devices r % 2 (which map each other),
    all on device 0, or with CUDA_DEVICE_MAX_CONNECTIONS=1 (one hardware queue per
    context: a stream waiting on the GPU for another process would hold it), or on
    devices that cannot access each other (FAKECUDA_NO_PEER: every rank refused)."""
    extra = {}
    if layout == "one-device":
        extra["CUDA_WINDOW_TEST_ONE_DEVICE"] = "1"
    if layout == "one-queue":
        extra["CUDA_DEVICE_MAX_CONNECTIONS"] = "1"
    if layout == "no-peer":
        extra["FAKECUDA_NO_PEER"] = "1"  # registering is refused on every rank
    run = cuda_window_run(nranks, str(tmp_path), extra)
    run.assert_ok(f"cuda_window_test with {nranks} ranks ({layout})")
    for r, proc in enumerate(run.procs):
        assert f"rank {r}:" in proc.stdout and "window checks passed" in proc.stdout, proc.describe()
        assert ("refused without peer access" in proc.stdout) == (layout == "no-peer"), proc.describe()

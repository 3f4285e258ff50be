"""One-sided windows (torch 2.15's dist._new_window / c10d.Window) on CPU tensors, in
separate processes on one host: workers/window_worker.py checks put + signal /
wait_signal against values computed from the writing rank, map_remote_tensor aliasing a
peer's window, the async forms, bad input, deregistration, and a wait for a signal that
never comes failing at its timeout, naming the silent rank. Across two hosts:
tests/test_two_hosts.py. On a torch without windows, gonccl.window.new_window says so."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

import _harness
from _harness import WorkerRun

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

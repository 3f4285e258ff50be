"""Shared fixtures for the gonccl Python test suite.

The tests run ranks as separate processes (see _harness.py); nothing here starts
torch.distributed or loads libgonccl.so in the pytest process itself, so the
pytest process may fork freely.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _harness  # noqa: E402


@pytest.fixture(scope="session")
def package_dir() -> str:
    """Directory of the *installed* gonccl package (found by a fresh interpreter run
    outside the source tree, so python/gonccl in the checkout cannot shadow it)."""
    proc = subprocess.run(
        [_harness.PYTHON, "-c", "import gonccl, os; print(os.path.dirname(os.path.abspath(gonccl.__file__)))"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd="/",
        start_new_session=True,
    )
    assert proc.returncode == 0, (
        "gonccl is not importable; build and install it with `make build`:\n" + proc.stderr
    )
    return proc.stdout.strip()


@pytest.fixture(scope="session")
def worker_runs(tmp_path_factory):
    """Cache of WorkerRun objects, so several tests can assert on one multi-rank run
    (each launch imports torch in every rank, which costs seconds)."""
    cache: dict = {}

    def get(key: str, worker: str, world_size: int, **kwargs) -> _harness.WorkerRun:
        if key not in cache:
            report_dir = str(tmp_path_factory.mktemp(key.replace("/", "_")))
            cache[key] = _harness.WorkerRun(worker, world_size, report_dir, **kwargs)
        return cache[key]

    return get


def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist (`-n N --dist loadgroup`, as scripts/gpu-check.sh runs the CUDA
    cases), the tests that read one multi-rank run (worker_runs: one per module and
    parameters other than the section) go to one xdist worker: each xdist worker has its
    own session cache, so spread out they would start that run once per worker."""
    if not config.pluginmanager.hasplugin("xdist"):
        return
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", None)
        if not params or "worker_runs" not in getattr(item, "fixturenames", ()):
            continue
        key = ",".join(f"{k}={v}" for k, v in sorted(params.items()) if k != "section")
        item.add_marker(pytest.mark.xdist_group(name=f"{item.module.__name__}[{key}]"))

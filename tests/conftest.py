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

# torch 2.15 attaches its flight-recorder hook to gonccl (and to Gloo), and on a failure
# the hook dumps its trace before the error reaches the program. With stack traces that
# dump takes ~5 s here (a shrink test's survivors saw the error 5.1 s after the kill
# instead of 0.1 s); past 15 s, on a loaded machine, torch abandons it and retries, and
# the abandoned thread can abort the process at exit ("FATAL: exception not rethrown":
# 5 failed tests in one loaded CI run). Every rank the tests start dumps without them;
# docs/pytorch.md's contract table says so for users. The dump itself stays on.
os.environ.setdefault("TORCH_INCLUDE_STACK_TRACE", "0")

# What the environment must provide, by the name a test's `requires` marker gives it.
# GONCCL_REQUIRE (comma-separated; .ci/run sets it) names the ones that must be there:
# a test marked with one of those that skips fails instead, so a CI run cannot pass
# while quietly testing less. Unset (a developer's machine), such tests skip as usual.
REQUIREMENTS = {
    "netns": "root and `ip netns` (tests/test_two_hosts.py)",
    "torchft": "torchft==0.2.0, installed from PyPI into ~/.cache/gonccl on first use, and an "
               "IPv6 loopback for its lighthouse (tests/test_torchft.py)",
    "torch-headers": "the headers of the oldest supported torch, fetched from PyPI into "
                     "~/.cache/gonccl (tests/test_torch_versions.py)",
    "gpu": "an NVIDIA GPU that torch sees (the cuda test cases)",
}


def _required() -> set[str]:
    names = {n.strip() for n in os.environ.get("GONCCL_REQUIRE", "").split(",") if n.strip()}
    unknown = names - set(REQUIREMENTS)
    if unknown:
        raise pytest.UsageError(f"GONCCL_REQUIRE names {sorted(unknown)}; known: {sorted(REQUIREMENTS)}")
    return names


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "requires(name): the test needs `name` from the environment (conftest.REQUIREMENTS) and skips "
                   "without it, unless GONCCL_REQUIRE names it: then the skip is a failure")
    config.gonccl_required = _required()


def _scale_timeouts(items):
    """GONCCL_TEST_TIME_SCALE scales every pytest-timeout limit (_harness.TIME_SCALE)."""
    if _harness.TIME_SCALE == 1.0:
        return
    for item in items:
        mark = item.get_closest_marker("timeout")
        if mark is not None and mark.args:
            item.add_marker(pytest.mark.timeout(_harness.scaled(float(mark.args[0]))), append=False)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    required = getattr(item.config, "gonccl_required", set())
    if not rep.skipped or not required:
        return
    missing = sorted({m.args[0] for m in item.iter_markers("requires")} & required)
    if missing:
        reason = rep.longrepr[2] if isinstance(rep.longrepr, tuple) else str(rep.longrepr)
        rep.outcome = "failed"
        rep.longrepr = (f"GONCCL_REQUIRE={os.environ.get('GONCCL_REQUIRE')} requires {', '.join(missing)} "
                        f"({'; '.join(REQUIREMENTS[m] for m in missing)}), but the test skipped: {reason}")


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
    own session cache, so spread out they would start that run once per worker.
    Also scales every timeout mark by GONCCL_TEST_TIME_SCALE (_scale_timeouts)."""
    _scale_timeouts(items)
    if not config.pluginmanager.hasplugin("xdist"):
        return
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", None)
        if not params or "worker_runs" not in getattr(item, "fixturenames", ()):
            continue
        key = ",".join(f"{k}={v}" for k, v in sorted(params.items()) if k != "section")
        item.add_marker(pytest.mark.xdist_group(name=f"{item.module.__name__}[{key}]"))

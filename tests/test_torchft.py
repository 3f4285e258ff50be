"""gonccl.torchft.ProcessGroupGonccl against torchft's reconfigurable-group contract
(workers/torchft_worker.py): configure on q0 with 3 processes, SIGKILL one, the
survivors fail fast, abort, configure on q1 with 2, a newcomer and all configure on q2
with 3; every collective exact. The same on torchft's own ProcessGroupGloo is the
anchor. Then torchft's Manager with a lighthouse across 2 replica groups, one SIGKILLed
and restarted (workers/torchft_manager_worker.py), on both. torchft is optional: where the environment lacks it, the test installs
torchft==0.2.0 into a folder of its own (TORCHFT_DIR) for the workers, and skips, saying
why, where it cannot."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import timedelta

import pytest

from _harness import WorkerRun

RUN_TIMEOUT = 180
pytestmark = pytest.mark.requires("torchft")


# Where the test installs torchft when the environment lacks it: a folder of its own
# (pip --target), put on the workers' PYTHONPATH, so that no Python environment is changed.
TORCHFT_DIR = os.environ.get("GONCCL_TORCHFT_DIR", os.path.expanduser("~/.cache/gonccl/torchft-0.2.0"))


def _imports(pythonpath: str | None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (pythonpath, env.get("PYTHONPATH")) if p)
    check = [sys.executable, "-c", "import torchft.process_group"]
    return subprocess.run(check, capture_output=True, text=True, timeout=120, env=env)


def _pip(*args: str) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--target", TORCHFT_DIR]
    return subprocess.run([*argv, *args], capture_output=True, text=True, timeout=600)


def _torchft_path() -> tuple[str | None, str | None]:
    """(extra PYTHONPATH, None) if torchft imports, installing torchft==0.2.0 into
    TORCHFT_DIR first if needed (torch itself is the environment's: --no-deps, then
    torchft's other requirements); (None, why not) if it cannot."""
    if _imports(None).returncode == 0:
        return "", None
    if _imports(TORCHFT_DIR).returncode == 0:
        return TORCHFT_DIR, None
    for args in (
        ("--no-deps", "torchft==0.2.0"),
        ("opentelemetry-api", "opentelemetry-sdk", "opentelemetry-exporter-otlp-proto-http"),
    ):
        pip = _pip(*args)
        if pip.returncode != 0:
            return None, f"torchft==0.2.0 could not be installed: {(pip.stderr or pip.stdout).strip()[-300:]}"
    p = _imports(TORCHFT_DIR)
    if p.returncode != 0:
        return None, f"torchft==0.2.0 was installed into {TORCHFT_DIR} but does not import: {p.stderr.strip()[-300:]}"
    return TORCHFT_DIR, None


@pytest.fixture(scope="module")
def torchft_path():
    path, why = _torchft_path()
    if why:
        pytest.skip(why)
    return path


@pytest.mark.timeout(RUN_TIMEOUT + 120)
@pytest.mark.parametrize("kind", ["gonccl", "gloo"])
def test_torchft_reconfigurable_group(tmp_path, torchft_path, kind):
    import torch.distributed as dist

    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=60))
    run = WorkerRun(
        "torchft_worker.py",
        4,
        str(tmp_path),
        timeout=RUN_TIMEOUT,
        env={
            "TORCHFT_STORE_PORT": str(store.port),
            "PYTHONPATH": os.pathsep.join(p for p in (torchft_path, os.environ.get("PYTHONPATH")) if p),
        },
        args=[kind],
        grace=RUN_TIMEOUT,
    )
    assert run.run.procs[2].returncode == -9, f"process 2 was meant to die by SIGKILL:\n{run.run.describe()}"
    for r in (0, 1, 3):
        p = run.run.procs[r]
        assert p.returncode == 0 and not p.killed, f"process {r} failed:\n{run.run.describe()}"
        for name in ("q0", "q1", "q2"):
            if r == 3 and name != "q2":
                continue
            sec = run.reports[r]["sections"][name]
            assert not sec["failures"], f"{kind}: process {r} {name}: " + "\n".join(sec["failures"])
    with open(os.path.join(run.report_dir, "killed_at")) as f:
        killed = float(f.read())
    times = [run.reports[r]["sections"]["q1"]["data"]["times"] for r in (0, 1)]
    print(
        f"torchft {kind}: survivors' error {max(t['t_error'] for t in times) - killed:.3f} s after the kill, "
        f"group of 2 configured {max(t['t_ready'] for t in times) - killed:.3f} s after it; "
        f"error: {run.reports[0]['sections']['q0']['data']['error'][:160]}"
    )


MANAGER_TIMEOUT = 150


@pytest.mark.timeout(MANAGER_TIMEOUT + 120)
@pytest.mark.parametrize("kind", ["gonccl", "gloo"])
def test_torchft_manager_ddp(tmp_path, torchft_path, kind):
    """torchft's Manager with a lighthouse and DDP across 2 replica groups
    (workers/torchft_manager_worker.py): replica 1 is SIGKILLed in the middle of a step,
    replica 0 trains on alone, a new process restarts replica 1, which recovers replica
    0's state and trains on with it; both end with identical parameters and a loss well
    below the initial one. The same on torchft's ProcessGroupGloo is the anchor."""
    run = WorkerRun(
        "torchft_manager_worker.py",
        4,
        str(tmp_path),
        timeout=MANAGER_TIMEOUT,
        env={"PYTHONPATH": os.pathsep.join(p for p in (torchft_path, os.environ.get("PYTHONPATH")) if p)},
        args=[kind],
        grace=MANAGER_TIMEOUT,  # process 2's SIGKILL is meant: do not cut the others short
    )
    if os.path.exists(tmp_path / "lighthouse_error"):
        pytest.skip(f"torchft's lighthouse cannot start here: {(tmp_path / 'lighthouse_error').read_text()}")
    describe = run.run.describe
    assert run.run.procs[2].returncode == -9, f"replica 1 was meant to die by SIGKILL:\n{describe()}"
    for r in (0, 1, 3):
        p = run.run.procs[r]
        assert p.returncode == 0 and not p.killed, f"process {r} failed:\n{describe()}"
        sec = run.reports[r]["sections"]["run"]
        assert not sec["failures"], f"{kind}: process {r}: " + "\n".join(sec["failures"])
    first, restarted = run.reports[1]["sections"]["run"]["data"], run.reports[3]["sections"]["run"]["data"]
    steps = [(s, n) for s, n, ok in first["history"] if ok]
    # Replica 0 lost a step to the kill (its allreduce with the dead peer failed), then
    # trained on alone, then with the restarted replica 1.
    assert any(not ok for _, _, ok in first["history"]), f"no step of replica 0 failed: {first['history']}"
    assert any(n == 1 for _, n in steps), f"replica 0 never trained alone: {first['history']}"
    assert first["join"] is not None and first["join"] == restarted["join"], (first["join"], restarted["join"])
    # The restarted replica recovered the live one's step (and state) instead of
    # starting over: its first step is the one it joined at, past the kill.
    assert restarted["history"][0][0] == restarted["join"] > 4, restarted["history"]
    assert all(n == 2 for _, n, _ in restarted["history"]), restarted["history"]
    assert first["params"] == restarted["params"], (
        f"{kind}: the replicas' parameters differ after training together: "
        f"max diff {max(abs(a - b) for a, b in zip(first['params'], restarted['params']))}"
    )
    assert first["final_loss"] < 0.5 * first["initial_loss"], (first["initial_loss"], first["final_loss"])
    print(
        f"torchft Manager on {kind}: committed steps {steps[0][0]}..{steps[-1][0]}, replica 1 killed in step 4, "
        f"rejoined at step {first['join']}, loss {first['initial_loss']:.4f} -> {first['final_loss']:.4f}, "
        f"run {run.run.elapsed:.1f} s"
    )

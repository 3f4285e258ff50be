"""dist.shrink_group on gonccl (workers/shrink_worker.py): survivors of a SIGKILLed rank
shrink the default group and every collective on the new group is exact; twice in a
row; and on a healthy group. Each run also reports the recovery time: the victim's
death -> the survivors' error -> the new group ready."""

from __future__ import annotations

import os

import pytest

from _harness import WorkerRun

RUN_TIMEOUT = 240


def shrink_run(
    tmp_path, world_size: int, scenario: str, *args: int, file_store: bool = False, env: dict | None = None
) -> WorkerRun:
    env = dict(env or {})
    if file_store:  # the store must outlive rank 0 when rank 0 dies
        env["SHRINK_INIT_METHOD"] = f"file://{tmp_path}/store"
    return WorkerRun(
        "shrink_worker.py",
        world_size,
        str(tmp_path),
        timeout=RUN_TIMEOUT,
        env=env,
        args=[scenario, *map(str, args)],
        grace=RUN_TIMEOUT,
    )


def check_kills(run: WorkerRun, victims: list[int]) -> list[dict]:
    """Asserts the victims died by SIGKILL, every survivor passed every section and
    exited 0; returns per step the recovery times."""
    ws = run.world_size
    for v in victims:
        assert run.run.procs[v].returncode == -9, f"rank {v} was meant to die by SIGKILL:\n{run.run.describe()}"
    survivors = [r for r in range(ws) if r not in victims]
    for r in survivors:
        p = run.run.procs[r]
        assert p.returncode == 0 and not p.killed, f"rank {r} failed:\n{run.run.describe()}"
    run.section("before")
    steps = []
    members = list(range(ws))
    for step, v in enumerate(victims):
        members = [m for m in members if m != v]
        with open(os.path.join(run.report_dir, f"killed_{v}")) as f:
            killed = float(f.read())
        recs = []
        for r in members:
            sec = run.reports[r]["sections"][f"shrink{step}"]
            assert not sec["failures"], f"rank {r} step {step}: " + "\n".join(sec["failures"])
            d = sec["data"][f"step{step}"]
            assert d["new_rank"] == members.index(r) and d["new_size"] == len(members), d
            recs.append(d)
        detect = max(d["t_error"] for d in recs) - killed
        ready = max(d["t_ready"] for d in recs) - killed
        steps.append({"detect_s": round(detect, 3), "ready_s": round(ready, 3)})
        print(
            f"{ws} ranks, step {step}: rank {v} killed; survivors' error after {detect:.3f} s, "
            f"new group of {len(members)} ready after {ready:.3f} s"
        )
    for r in members:
        assert not run.reports[r]["sections"]["end"]["failures"], run.reports[r]["sections"]["end"]
    return steps


@pytest.mark.timeout(RUN_TIMEOUT + 60)
@pytest.mark.parametrize("world_size,victim,file_store", [(3, 2, False), (3, 0, True), (4, 1, False), (8, 5, False)])
def test_shrink_after_sigkill(tmp_path, world_size, victim, file_store):
    run = shrink_run(tmp_path, world_size, "kill", victim, file_store=file_store)
    check_kills(run, [victim])


@pytest.mark.timeout(RUN_TIMEOUT + 60)
def test_shrink_twice_in_a_row(tmp_path):
    run = shrink_run(tmp_path, 4, "kill", 3, 1)
    check_kills(run, [3, 1])


@pytest.mark.timeout(RUN_TIMEOUT + 60)
def test_shrink_after_hang(tmp_path):
    """A rank that hangs (SIGSTOP: alive, its connections open, silent) is found by the
    heartbeat, named on every survivor, and shrunk away like a dead one."""
    run = shrink_run(tmp_path, 3, "stop", 1, env={"GONCCL_HEARTBEAT_TIMEOUT_MS": "2000"})
    check_kills(run, [1])
    errors = [run.reports[r]["sections"]["shrink0"]["data"]["step0"]["error"] for r in (0, 2)]
    for err in errors:
        assert "lost rank 1" in err and "missed heartbeats" in err, err
    # The rank whose heartbeat fired first names the silence as its own cause, not the
    # closing of the connection that followed it.
    causes = [err.split("[other ranks")[0] for err in errors]  # without the peers' diagnoses
    assert any("missed heartbeats" in c for c in causes), errors


@pytest.mark.timeout(RUN_TIMEOUT + 60)
def test_shrink_healthy_group(tmp_path):
    run = shrink_run(tmp_path, 3, "healthy", 1)
    assert run.run.ok, run.run.describe()
    run.section("before")
    for r in (0, 2):
        sec = run.reports[r]["sections"]["shrink0"]
        assert not sec["failures"], "\n".join(sec["failures"])
        assert sec["data"]["step0"]["new_rank"] == (0 if r == 0 else 1)
    run.section("end")


def test_shrink_rejects_bad_input(tmp_path):
    """An out-of-range or repeated rank, no rank or every rank is refused with a clear error
    before anything is created (a 1-process check through the Backend API itself)."""
    import subprocess
    import sys

    code = f"""
import os, torch, torch.distributed as dist
import gonccl
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ["PORT"])
dist.init_process_group("gonccl", rank=0, world_size=1, init_method="file://{tmp_path}/s")
be = dist.group.WORLD._get_backend(torch.device("cpu"))
assert be.supports_shrinking
for bad, words in (([0], "cannot exclude all"), ([3], "out of range"), ([-1], "out of range"),
                   ([0, 0], "twice"), ([], "no rank")):
    try:
        be.shrink(bad, 0, None)
    except Exception as e:
        assert words in str(e), (bad, str(e))
    else:
        raise SystemExit(f"shrink({{bad}}) did not raise")
try:
    be.shrink([0], 7, None)
except Exception as e:
    assert "shrink_flags" in str(e), str(e)
else:
    raise SystemExit("bad flags accepted")
dist.destroy_process_group()
print("OK")
"""
    from _harness import free_port

    env = dict(os.environ, PORT=str(free_port()))
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0 and "OK" in p.stdout, p.stdout + p.stderr

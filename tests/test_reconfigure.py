"""torch's reconfigure API on gonccl (workers/reconfigure_worker.py): a group of 3 loses a
member to SIGKILL, goes on at 2, then a newcomer process joins and all go on at 3; every
collective exact, every member on the same, newer generation each time; a late frame of
the old generation, injected into the new one, is dropped and logged, never mixed in."""

from __future__ import annotations

import os

import pytest

from _harness import WorkerRun

RUN_TIMEOUT = 240


@pytest.mark.timeout(RUN_TIMEOUT + 60)
def test_reconfigure_lose_one_then_grow(tmp_path):
    run = WorkerRun("reconfigure_worker.py", 4, str(tmp_path), timeout=RUN_TIMEOUT, grace=RUN_TIMEOUT)
    assert run.run.procs[2].returncode == -9, f"rank 2 was meant to die by SIGKILL:\n{run.run.describe()}"
    for r in (0, 1, 3):
        p = run.run.procs[r]
        assert p.returncode == 0 and not p.killed, f"process {r} failed:\n{run.run.describe()}"
        rep = run.reports[r]["sections"]
        for name in ("setup", "phase1", "phase2", "phase3", "end"):
            if r == 3 and name in ("phase1", "phase2"):
                continue
            assert not rep[name]["failures"], f"process {r} {name}: " + "\n".join(rep[name]["failures"])
    epochs = {
        r: [run.reports[r]["sections"][s]["data"].get("epoch") for s in ("phase1", "phase2", "phase3")] for r in (0, 1)
    }
    assert epochs[0] == epochs[1] == [1, 2, 3], epochs
    assert run.reports[3]["sections"]["phase3"]["data"]["epoch"] == 3
    # The newcomer sent ranks 0 and 1 an epoch-2 frame each; whichever read theirs (a
    # ring reads from one neighbour only) dropped it, said so, and stayed exact.
    dropped = {r: run.reports[r]["sections"]["phase3"]["data"]["stale_frames"] for r in (0, 1, 3)}
    assert dropped[3] == 0 and dropped[0] + dropped[1] >= 1, dropped
    logged = sum(run.run.procs[r].stderr.count("frame of generation (epoch) 2 from rank") for r in (0, 1))
    assert logged == dropped[0] + dropped[1], f"{logged} WARN lines for {dropped} dropped frames"
    with open(os.path.join(run.report_dir, "killed_at")) as f:
        killed = float(f.read())
    times = [run.reports[r]["sections"]["phase2"]["data"]["times"] for r in (0, 1)]
    print(
        f"reconfigure: error {max(t['t_error'] for t in times) - killed:.3f} s after the kill, "
        f"group of 2 ready {max(t['t_ready'] for t in times) - killed:.3f} s after it"
    )

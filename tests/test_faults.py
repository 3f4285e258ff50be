"""Injected faults on 4 ranks (workers/faults_worker.py): a rank that skips a
collective, ranks that disagree on its size, and a rank killed with SIGKILL mid-loop.
Every surviving rank must raise DistBackendError naming the rank at fault, promptly
(timeout + a few seconds; 30 s for a dead rank whose group timeout is 120 s), and
still exit on its own."""

import re

import pytest

RUN_TIMEOUT = 240


def faults_run(worker_runs):
    return worker_runs("faults", "faults_worker.py", 4, timeout=RUN_TIMEOUT, grace=15)


@pytest.mark.timeout(RUN_TIMEOUT + 60)
@pytest.mark.parametrize("section", ["init", "timeout_missing_rank", "mismatch_everywhere", "dataloader_fork"])
def test_fault_section(worker_runs, section):
    faults_run(worker_runs).section(section)


@pytest.mark.timeout(RUN_TIMEOUT + 60)
def test_killed_rank_is_named_by_every_survivor(worker_runs):
    run = faults_run(worker_runs)
    killed = run.run.procs[1]
    assert killed.returncode == -9, f"rank 1 was meant to die by SIGKILL:\n{run.run.describe()}"
    for r in (0, 2, 3):
        sec = run.reports[r]["sections"].get("kill9")
        assert sec is not None, f"rank {r} never finished the kill9 section:\n{run.run.describe()}"
        assert not sec["failures"], f"rank {r}: " + "\n".join(sec["failures"])
        err = sec["data"]["all_reduce loop while rank 1 is killed"]
        assert "rank 1" in err["error"] and err["seconds"] < 30, err
        assert sec["data"].get("destroyed"), f"rank {r}: destroy_process_group did not return"
        proc = run.run.procs[r]
        assert proc.returncode == 0 and not proc.killed, f"rank {r} did not exit cleanly:\n{run.run.describe()}"
        m = re.search(r"EXITING AT (\d+\.\d+)", proc.stdout)
        assert m and proc.end_time - float(m.group(1)) < 10, f"rank {r} was slow to exit:\n{run.run.describe()}"

"""torch 2.12-2.15's additions to the Backend contract on gonccl, 2 and 4 CPU ranks
(workers/backend215_worker.py): the time estimator, backend-allocated tensors in shared
memory, eager connection, merge_remote_group, suspend / resume / getMemoryStats."""

import pytest

SECTIONS = ["estimator", "alloc", "eager", "merge", "suspend"]
TIMEOUT = 150


@pytest.mark.timeout(TIMEOUT + 60)
@pytest.mark.parametrize("world_size", [2, 4])
@pytest.mark.parametrize("section", SECTIONS)
def test_backend215(worker_runs, section, world_size):
    run = worker_runs(f"backend215-{world_size}", "backend215_worker.py", world_size, timeout=TIMEOUT)
    recs = run.section(section)
    print({k: v for k, v in recs[0]["data"].items()})

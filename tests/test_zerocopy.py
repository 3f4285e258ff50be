"""Zero-copy collectives on tensors from allocate_tensor (gonccl's shared memory), in
separate processes on one host, 2 and 4 ranks (workers/zerocopy_worker.py): values
against local references for every dtype x reduce op, the other collectives, views,
tensors of both kinds mixed, buffers reused the moment an op returns, and faults the
checks must catch. The flight recorder says which ops ran zero-copy."""

import pytest

SECTIONS = ["reductions", "collectives", "views", "reuse", "faults"]
TIMEOUT = 120
# Small tensors take the path too, so that the sections stay fast.
ENV = {"GONCCL_ZEROCOPY_THRESHOLD": "2048"}


@pytest.mark.timeout(TIMEOUT + 60)
@pytest.mark.parametrize("world_size", [2, 4])
@pytest.mark.parametrize("section", SECTIONS)
def test_zerocopy(worker_runs, section, world_size):
    run = worker_runs(f"zerocopy-{world_size}", "zerocopy_worker.py", world_size, timeout=TIMEOUT, env=ENV)
    recs = run.section(section)
    print({k: v for k, v in recs[0]["data"].items()})

"""torch.profiler around gonccl ops (tests/workers/profiler_worker.py, 2 ranks): many
short profiler sessions, each stopped as soon as the last op's future completes, as
the lecture's ddp_example.py does around DDP. Every op is recorded and both ranks exit
cleanly. Before gonccl ended the op's profiler range ahead of completing its future,
this run died with heap corruption in 8 of 8 tries (and ddp_example crashed at exit
in about 1 run in 15).
"""

import pytest

from _harness import run_ranks, worker_argv

TIMEOUT = 120


@pytest.mark.timeout(TIMEOUT + 60)
def test_profiler_sessions_around_async_ops():
    run = run_ranks(lambda r: worker_argv("profiler_worker.py", 30, 20), 2, timeout=TIMEOUT)
    run.assert_ok("30 profiler sessions x 20 async all_reduces")

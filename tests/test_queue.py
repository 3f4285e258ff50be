"""Back-pressure instead of deadlock (tests/workers/queue_worker.py, 2 ranks): far more
asynchronous operations issued before the first wait than a communicator queues
(GONCCL_QUEUE_DEPTH, default 1024). Issuing blocks while the queue is full (with the
GIL released) and every result is exact. Before back-pressure, both ranks hung at the
1,025th queued all_reduce.

  allreduce          20,000 async all_reduces from one thread
  allreduce-threads  5,000 from each of 4 threads on 2 groups (also with a queue of 16)
  p2p                20,000 isend/irecv pairs from one thread
  p2p-threads        5,000 pairs from each of 4 threads on 2 groups
"""

import pytest

from _harness import run_ranks, worker_argv

TIMEOUT = 240

CASES = {
    "allreduce": ("allreduce", 20000, {}),
    "allreduce-threads": ("allreduce-threads", 5000, {}),
    "allreduce-threads-depth16": ("allreduce-threads", 5000, {"GONCCL_QUEUE_DEPTH": "16"}),
    "p2p": ("p2p", 20000, {}),
    "p2p-threads": ("p2p-threads", 5000, {}),
}


@pytest.mark.timeout(TIMEOUT + 60)
@pytest.mark.parametrize("case", list(CASES))
def test_many_queued_ops(case):
    mode, n, env = CASES[case]
    run = run_ranks(lambda r: worker_argv("queue_worker.py", mode, n), 2, timeout=TIMEOUT, env=env)
    run.assert_ok(f"{case}: {n} async operations per thread")
    for p in run.procs:
        print(p.stdout.strip())

"""A panic on one of gonccl's goroutines does not kill the Python process: with the
TEST-ONLY hook GONCCL_TEST_INJECT_PANIC (see docs/environment.md, test-only variables), rank 0's second
collective panics inside the Go executor (workers/panic_worker.py). The op raises a
DistBackendError naming the panic, rank 1's op fails instead of hanging, later
collectives fail at once naming it, and both processes exit 0. Before the recovery
existed the same panic ended rank 0's process (the Go runtime exits on an unrecovered
panic) and left rank 1 waiting for the group's timeout.
"""

import pytest

RUN_TIMEOUT = 120


@pytest.mark.timeout(RUN_TIMEOUT + 60)
def test_process_survives_a_panic(worker_runs):
    run = worker_runs("panic", "panic_worker.py", 2, timeout=RUN_TIMEOUT)
    for section in ("init", "panic", "later", "exit"):
        run.section(section)
    for r, proc in enumerate(run.run.procs):
        assert proc.returncode == 0 and f"rank {r}: survived the panic" in proc.stdout, run.run.describe()

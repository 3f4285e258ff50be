"""torch's own distributed tests on gonccl (tests/torch_suite.py): the monitored_barrier
tests of DistributedTest._DistTestBase that run on CPU, with Gloo's selection of tests
and WORLD_SIZE=3, each rank's default group on gonccl. Among them
test_monitored_barrier_gloo_rank_0_timeout (issue 23: timeout=0 on rank 0 must raise
"Rank 0 timed out in monitoredBarrier"). A skipped test fails the run.
"""

import os

import pytest

import _harness

TIMEOUT = 300


@pytest.mark.timeout(TIMEOUT + 30)
def test_torch_monitored_barrier_tests():
    argv = [_harness.PYTHON, "-c", "import expecttest"]
    probe = _harness.run_processes([argv], timeout=60, names=["import expecttest"])
    assert probe.ok, ("torch's test suite needs the expecttest package (scripts/python-env.sh installs it):\n"
                      + probe.describe())
    env = dict(os.environ, WORLD_SIZE="3", OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    argv = [_harness.PYTHON, os.path.join(_harness.TESTS_DIR, "torch_suite.py"), "-v"]
    run = _harness.run_processes([argv], timeout=TIMEOUT, envs=[env], names=["torch_suite"])
    run.assert_ok("torch's monitored_barrier tests on gonccl")
    print(run.procs[0].stderr[-3000:])

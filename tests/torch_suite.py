"""Runs tests of torch's own distributed suite on gonccl.

torch's suite is the class DistributedTest._DistTestBase in the wheel
(torch/testing/_internal/distributed/distributed_test.py); torch launches it from
test/distributed/test_distributed_spawn.py, which the wheel does not ship. This is that
launcher for gonccl: the tests are selected as for Gloo (BACKEND=gloo while the module
is imported, so the decorators that keep Gloo's tests keep them), and every rank then
initializes its default group with gonccl instead (the module's BACKEND, which torch's
TestDistBackend._run reads at run time). Each test spawns WORLD_SIZE ranks.

usage: python tests/torch_suite.py [-v] [TEST_NAME ...]
  TEST_NAME  a test of _DistTestBase (test_monitored_barrier_gloo, ...); none: DEFAULT
  env        WORLD_SIZE (default 3); GONCCL_* as usual
Exits non-zero if a test fails, errors, or is skipped (a skipped test proves nothing).
"""

from __future__ import annotations

import os
import sys
import tempfile
import unittest

os.environ.setdefault("WORLD_SIZE", "3")
os.environ["BACKEND"] = "gloo"  # the selection of tests: Gloo's
os.environ.setdefault("TEMP_DIR", tempfile.gettempdir())  # setUp makes a fresh one per test

import torch.testing._internal.distributed.distributed_test as torch_dist_test  # noqa: E402

import gonccl  # noqa: E402,F401 - registers the backend (in every spawned rank too)

torch_dist_test.BACKEND = "gonccl"  # what each rank's init_process_group uses

# torch's monitored_barrier tests that run on CPU with 3 ranks (two more,
# test_monitored_barrier_failure_order and test_monitored_barrier_wait_all_ranks, need
# WORLD_SIZE >= 8, torch skips them below; the rest need NCCL and GPUs), and the barrier
# timeout test that holds a timeout's message to torch's regex " (Timed out|closed|timeout) ".
DEFAULT = [
    "test_monitored_barrier_gloo",
    "test_monitored_barrier_gloo_subgroup",
    "test_monitored_barrier_gloo_rank_0_timeout",
    "test_barrier_timeout_full_group",
]


class TestGoncclWithSpawn(torch_dist_test.TestDistBackend, torch_dist_test.DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        self._spawn_processes()


class _Strict(unittest.TextTestResult):
    """A skip counts as a failure: the test did not run on gonccl."""

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self.failures.append((test, f"skipped: {reason}"))


def main(argv: list[str]) -> int:
    verbose = "-v" in argv
    names = [a for a in argv if a != "-v"] or DEFAULT
    unknown = [n for n in names if not hasattr(TestGoncclWithSpawn, n)]
    if unknown:
        print(f"torch_suite: no such test in DistributedTest._DistTestBase: {unknown}", file=sys.stderr)
        return 2
    suite = unittest.TestSuite(TestGoncclWithSpawn(n) for n in names)
    runner = unittest.TextTestRunner(verbosity=2 if verbose else 1, resultclass=_Strict)
    result = runner.run(suite)
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

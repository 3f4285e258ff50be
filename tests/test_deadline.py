"""A deadline that has already run out times out; it is never refused (issue 23).
workers/deadline_worker.py runs the monitored_barrier cases on gonccl and on Gloo in the
same processes (the others on gonccl) at 2, 3 and 4 ranks, CPU:
  before   timeout=0: monitored_barrier on rank 0 alone (torch's
           test_monitored_barrier_gloo_rank_0_timeout), with wait_all_ranks, on every
           rank; barrier(timeout=0); _set_pg_timeout(0) then all_reduce; an ephemeral
           extension that leaves no time. Rank 0 says what Gloo says ("[Rank 0]: Rank 1
           failed to pass monitoredBarrier in 0 ms", with "Rank 0 timed out in
           monitoredBarrier" under it) and names every rank not processed
  between  (gonccl) rank 1 arrives about when the timeout runs out, the ranks after it never:
           rank 0 names a rank that did not pass, whichever step the deadline falls in
  during   the last rank sleeps through the timeout: rank 0 names it, as Gloo does
and csrc/deadline.hpp, where csrc turns a deadline into milliseconds, on its own
(tests/csrc/deadline_test.cpp, compiled with g++: no torch needed).
"""

import os
import shutil

import pytest

import _harness

TIMEOUT = 300


@pytest.mark.timeout(TIMEOUT + 60)
@pytest.mark.parametrize("world_size", [2, 3, 4])
@pytest.mark.parametrize("section", ["before", "between", "during"])
def test_spent_deadline(worker_runs, world_size, section):
    run = worker_runs(f"deadline-{world_size}", "deadline_worker.py", world_size, timeout=TIMEOUT)
    recs = run.section(section)
    print({k: v for k, v in recs[0]["data"].items()})


@pytest.mark.timeout(150)
def test_time_left_rounds_up_and_never_goes_negative(tmp_path):
    gxx = shutil.which("g++")
    assert gxx, "g++ is needed to build tests/csrc/deadline_test.cpp"
    out = str(tmp_path / "deadline_test")
    source = os.path.join(_harness.TESTS_DIR, "csrc", "deadline_test.cpp")
    include = os.path.join(_harness.REPO_ROOT, "csrc")
    build = _harness.run_processes([[gxx, "-std=c++20", "-Wall", "-Wextra", "-Werror", f"-I{include}", source,
                                     "-o", out]], timeout=120, names=["g++"])
    build.assert_ok("compiling tests/csrc/deadline_test.cpp")
    _harness.run_processes([[out]], timeout=30, names=["deadline_test"]).assert_ok("deadline_test")

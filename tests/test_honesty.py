"""The suite's own rules, so that a green run means what it says:

* a passing worker section checked something (_harness.WorkerRun.section): no check and
  no skip fails, a skip on every rank skips the test with the workers' reason, and a
  failed check fails (pure Python on made-up reports);
* GONCCL_REQUIRE (conftest.py) turns a skip for a required thing into a failure: the
  two-hosts test, run by a pytest whose PATH has no `ip`, skips, and fails when netns
  is required;
* GONCCL_TEST_TIME_SCALE scales pytest-timeout's limits.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import _harness


def fake_run(*sections: dict) -> _harness.WorkerRun:
    """A WorkerRun whose ranks reported these records for section "s"."""
    run = _harness.WorkerRun.__new__(_harness.WorkerRun)
    run.worker, run.world_size = "fake_worker.py", len(sections)
    run.run = _harness.RunResult(procs=[], elapsed=0.0, timed_out=False, timeout=1.0)
    run.reports = [{"sections": {"s": {"failures": [], "data": {}, "checks": 0, "skipped": None, **sec}},
                    "order": ["s"], "finished": True} for sec in sections]
    return run


def test_a_section_with_checks_passes():
    assert len(fake_run({"checks": 3}, {"checks": 1}).section("s")) == 2


def test_a_section_that_checked_nothing_fails():
    with pytest.raises(AssertionError, match=r"rank 1: section 's' ran no check and did not skip"):
        fake_run({"checks": 3}, {"checks": 0}).section("s")


def test_a_section_every_rank_skipped_is_a_skip_with_the_reason():
    with pytest.raises(pytest.skip.Exception, match="needs 2 or more ranks"):
        fake_run({"skipped": "needs 2 or more ranks"}).section("s")


def test_a_rank_may_skip_while_the_others_check():
    assert len(fake_run({"checks": 2}, {"skipped": "stays away on purpose"}).section("s")) == 2


def test_a_failed_check_fails_even_with_a_skip():
    with pytest.raises(AssertionError, match="1 failed check"):
        fake_run({"checks": 1, "failures": ["wrong"]}, {"skipped": "why"}).section("s")


def test_a_missing_section_fails():
    run = fake_run({"checks": 1})
    with pytest.raises(AssertionError, match="never finished"):
        run.section("other")


def _pytest(tmp_path, *args: str, **env: str) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", *args]
    full = {k: v for k, v in os.environ.items() if k not in ("GONCCL_REQUIRE", "GONCCL_TEST_TIME_SCALE")} | env
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=_harness.REPO_ROOT, env=full)


@pytest.mark.parametrize("required", ["", "netns"])
def test_a_required_skip_fails(tmp_path, required):
    no_ip = tmp_path / "bin"
    no_ip.mkdir()
    p = _pytest(tmp_path, "tests/test_two_hosts.py", "-k", "collectives_across_two_hosts and plain", PATH=str(no_ip),
                **({"GONCCL_REQUIRE": required} if required else {}))
    out = p.stdout + p.stderr
    if required:
        assert p.returncode != 0 and "GONCCL_REQUIRE=netns requires netns" in out, out
        assert "needs iproute2" in out, out
    else:
        assert p.returncode == 0 and "1 skipped" in out and "needs iproute2" in out, out


def test_an_unknown_requirement_is_refused(tmp_path):
    p = _pytest(tmp_path, "--collect-only", "tests/test_honesty.py", GONCCL_REQUIRE="netns,gpus")
    assert p.returncode != 0 and "GONCCL_REQUIRE names ['gpus']" in p.stdout + p.stderr, p.stdout + p.stderr


def test_time_scale_scales_pytest_timeouts(tmp_path):
    test = tmp_path / "test_sleep.py"
    test.write_text("import time\nimport pytest\n\n\n@pytest.mark.timeout(1)\ndef test_sleep():\n"
                    "    time.sleep(2)\n")
    conftest = os.path.join(_harness.TESTS_DIR, "conftest.py")
    (tmp_path / "conftest.py").write_text(f"import sys\nsys.path.insert(0, {_harness.TESTS_DIR!r})\n"
                                          f"exec(open({conftest!r}).read())\n")
    assert _pytest(tmp_path, str(test)).returncode != 0
    assert _pytest(tmp_path, str(test), GONCCL_TEST_TIME_SCALE="5").returncode == 0

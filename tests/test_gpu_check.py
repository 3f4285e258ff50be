"""scripts/gpu-check.sh without a GPU: its plan and budget, --only, and the failure
summary it puts in its report (scripts/pytest_failures.py). `make gpu-check-dry` runs the
whole dry run; these run the parts that need no build (gonccl installed is enough)."""

import os
import re
import subprocess
import sys

import pytest

import _harness

ROOT = os.path.dirname(_harness.TESTS_DIR)
SCRIPT = os.path.join(ROOT, "scripts", "gpu-check.sh")
sys.path.insert(0, os.path.join(ROOT, "scripts"))

import pytest_failures  # noqa: E402

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="1" failures="2" tests="4">
<testcase classname="tests.test_ops_reference" name="test_ops_section[ws2-cuda-noncontiguous]" time="3.1">
<failure message="AssertionError: rank 0: exit code -11">worker_runs = &lt;function&gt;

    def test_ops_section(worker_runs):
&gt;       recs = run.section(section)
E       AssertionError: rank 0: section 'noncontiguous' never finished
E       ---- rank 0: exit code -11
E       line 3
E       line 4
E       line 5

tests/_harness.py:341: AssertionError</failure></testcase>
<testcase classname="tests.test_collectives" name="test_ok[ws2-cuda]" time="1.0"/>
<testcase classname="tests.test_groups_hooks" name="test_x[ws3-cuda]" time="1.0">
<failure message="boom">no E lines here
second line</failure></testcase>
<testcase classname="tests.test_contract" name="test_setup[cuda]" time="0.1">
<error message="fixture failed">E   RuntimeError: fixture failed</error></testcase>
</testsuite></testsuites>
"""


def test_failure_summary_has_first_lines_of_each_failure():
    found = pytest_failures.failures(JUNIT, lines=3)
    assert [name for name, _ in found] == [
        "tests.test_ops_reference::test_ops_section[ws2-cuda-noncontiguous]",
        "tests.test_groups_hooks::test_x[ws3-cuda]",
        "tests.test_contract::test_setup[cuda] (error)",
    ]
    assert found[0][1] == ["      AssertionError: rank 0: section 'noncontiguous' never finished",
                           "      ---- rank 0: exit code -11", "      line 3",
                           "... (2 more lines in the step's log)"]
    assert found[1][1] == ["no E lines here", "second line"]
    assert found[2][1] == ["  RuntimeError: fixture failed"]
    md = pytest_failures.markdown(found)
    assert md.count("```") == 6 and "- `tests.test_contract::test_setup[cuda] (error)`" in md
    assert pytest_failures.failures(JUNIT.replace("<failure", "<skipped").replace("</failure>", "</skipped>")
                                    .replace("<error", "<skipped").replace("</error>", "</skipped>")) == []


def gpu_check(tmp_path, *args, timeout=300):
    env = {k: v for k, v in os.environ.items() if not k.startswith("GONCCL_")}
    env["GONCCL_PYTHON"] = _harness.PYTHON
    report = tmp_path / "report"
    proc = subprocess.run(["bash", SCRIPT, "--dry-run", "--report", str(report), *args], capture_output=True,
                          text=True, timeout=timeout, env=env, cwd=str(tmp_path), start_new_session=True)
    text = (report / "report.md").read_text() if (report / "report.md").exists() else ""
    return proc, text


@pytest.mark.timeout(360)
def test_dry_run_only_capi_links_and_runs_over_the_fake(tmp_path, package_dir):
    """--only capi: no build (gonccl is installed), the C test linked by
    tests/capi/link-realcuda.sh against the fake built as libcuda.so.1 and run on 2 ranks
    through realcuda.c; the plan lists every step with its limit within the budget."""
    proc, report = gpu_check(tmp_path, "--only", "capi")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out + report
    assert "build" in out and "--only leaves it out and gonccl is installed" in out, out
    assert "| capi-link | pass |" in report and "| capi-cuda-2ranks | pass |" in report, report
    assert "| capi-memcheck | skip |" in report, report
    # The fake standing in for libcuda proves no path: no paths table (internal/route reads it).
    assert "| setup | path | result |" not in report, report
    assert "stream" not in report.split("## The plan")[0].split("| step | result")[1], report
    plan = report.split("## The plan on one GPU")[1]
    assert "| capi-memcheck | yes | no | 60 | 30 |" in plan, plan
    assert "| capi-link | yes | yes (fake libcuda.so.1) |" in plan, plan
    # Two parts, each within its budget on one GPU, planned from the last real run's
    # step times; what does not fit is left to --extended, and the plan says so.
    part_a, part_b = plan.split("part B:")
    assert "| build | yes |" in part_a and "| install-wheel |" not in part_a, part_a
    assert "| install-wheel | yes |" in part_b and "| build |" not in part_b, part_b
    assert "| pytest-smoke | yes |" in part_a and "| pytest-cuda | yes |" in part_b, plan
    assert "| build | yes | yes | 300 | 67 | measured (run 2) |" in part_a, part_a
    for part, budget, text in (("A", 300, part_a), ("B", 360, part_b)):
        m = re.search(rf"part {part} planned: (\d+)s of its {budget}s budget on 1 GPU\(s\): fits", text)
        assert m and int(m.group(1)) <= budget, text
    assert "| bench-small | no (--extended) |" in part_b and "| capi-cuda-device-2ranks | no (--extended) |" in part_a, plan
    assert "DOES NOT FIT" not in plan, plan
    # Every rank the check starts has the crash tracer preloaded.
    log = (tmp_path / "report" / "report.logs" / "capi-cuda-2ranks.log").read_text()
    assert "(crash tracer: " in log and "crashtrace.so; LD_PRELOAD=" in log, log[:400]
    assert "checks passed" in report, report


@pytest.mark.timeout(120)
def test_part_b_plans_only_its_steps(tmp_path, package_dir):
    """--part B --only stream: part B has no stream step, so nothing runs; its plan alone is
    printed and fits."""
    proc, report = gpu_check(tmp_path, "--part", "B", "--only", "pytest-cuda")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out + report
    assert "part A:" not in out and "part B planned: " in out and ": fits" in out, out
    assert "| pytest-cuda | skip | 0 | dry run: would run" in report, report


@pytest.mark.timeout(120)
def test_budget_skips_what_no_longer_fits(tmp_path, package_dir):
    proc, report = gpu_check(tmp_path, "--only", "stream", "--budget", "5")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "| stream-cpu | skip | 0 | out of the 5s budget" in report, report


@pytest.mark.parametrize("args,msg", [
    (["--only", "nosuch"], "--only nosuch: no such step"),
    (["--part", "C"], "--part C: A or B"),
    (["--budget", "soon"], "--budget soon: not a number"),
    (["--wheel", "/nonexistent"], "--wheel: no gonccl wheel there"),
])
def test_bad_arguments_are_refused(tmp_path, args, msg):
    proc, _ = gpu_check(tmp_path, *args, timeout=60)
    assert proc.returncode == 2 and msg in proc.stderr, proc.stderr

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
    assert "| capi-memcheck | yes | no | 60 | 30 | 36 |" in plan, plan
    assert "| capi-link | yes | yes (fake libcuda.so.1) |" in plan, plan
    # Two parts, each within its budget on one GPU (245 s and 295 s, of a lent machine's
    # 15 minutes with its start and transfers), planned from the last real run's step
    # times plus a 20% margin and the script's own time; what does not fit is left to
    # --extended, and the plan says so.
    part_a, part_b = plan.split("part B:")
    assert "| build | yes |" in part_a and "| install-wheel |" not in part_a, part_a
    assert "| install-wheel | yes |" in part_b and "| build |" not in part_b, part_b
    assert "| kernels-gpu | yes | yes |" in part_a and "estimate: never ran on a GPU" in part_a, part_a
    assert "| pytest-smoke | yes |" in part_b and "| pytest-cuda | no (--extended) |" in part_b, plan
    assert "| build | yes | yes | 300 | 67 | 81 | measured (run 2) |" in part_a, part_a
    assert "| bench-ddp | yes | no | 75 | 49 | 59 | measured (run 2: 49 s with three backends" in part_b, part_b
    assert "| (the script itself) | yes | yes | - | 16 | 20 |" in part_a, part_a
    for part, budget, text in (("A", 245, part_a), ("B", 295, part_b)):
        m = re.search(rf"part {part} planned: (\d+)s of its {budget}s budget on 1 GPU\(s\), with a 20% margin: fits", text)
        assert m and int(m.group(1)) <= budget, text
        cols = [[c.strip() for c in r.strip().strip("|").split("|")] for r in text.splitlines() if r.startswith("| ")]
        planned = [int(c[5]) for c in cols if c[1] == "yes" and c[5].isdigit()]
        assert sum(planned) == int(m.group(1)), (planned, text)
    # Part B: the benchmarks, each naming its backends, before the suite's cases.
    assert part_b.index("| bench-paths |") < part_b.index("| bench-ddp |") < part_b.index("| pytest-smoke |"), part_b
    assert "| bench-small | no (--extended) |" in part_b and "| capi-cuda-device-2ranks | no (--extended) |" in part_a, plan
    assert "DOES NOT FIT" not in plan, plan
    # Every rank the check starts has the crash tracer preloaded.
    log = (tmp_path / "report" / "report.logs" / "capi-cuda-2ranks.log").read_text()
    assert "(crash tracer: " in log and "crashtrace.so; LD_PRELOAD=" in log, log[:400]
    assert "checks passed" in report, report


@pytest.mark.timeout(120)
def test_dry_run_fails_on_a_plan_over_budget(tmp_path, package_dir):
    """CI's dry run fails when a part's planned steps do not fit its budget: here part A
    given 150 s (--part-budget), less than its plan; the run says so and exits non-zero."""
    proc, report = gpu_check(tmp_path, "--part", "A", "--part-budget", "A=150", "--only", "import")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out + report
    assert re.search(r"part A planned: \d+s of its 150s budget on 1 GPU\(s\), with a 20% margin: DOES NOT FIT", out), out
    assert "| plan | fail | 0 | a part's steps do not fit its budget" in report, report
    assert "| import | pass |" in report, report


@pytest.mark.timeout(120)
@pytest.mark.parametrize("output,ok", [
    ("=== RUN   TestKernelsOnARealGPU\n--- SKIP: TestKernelsOnARealGPU (0.00s)\n    gpu_test.go:43: no CUDA driver here\nPASS\n", True),
    ("=== RUN   TestKernelsOnARealGPU\n--- FAIL: TestKernelsOnARealGPU (0.10s)\nFAIL\n", False),
    ("testing: warning: no tests to run\nPASS\n", False),
])
def test_kernels_step_runs_the_prebuilt_test_binary(tmp_path, package_dir, output, ok):
    """kernels-gpu runs the kernels' test binary (--kernels-test; built by make
    gpu-check-kernels where Go is) for TestKernelsOnARealGPU alone: a dry run accepts its
    skip (no GPU here), a failure or a binary that ran no such test fails the step."""
    binary = tmp_path / "kernels-gpu.test"
    binary.write_text("#!/bin/sh\necho \"args: $*\"\nprintf '%s' '" + output.replace("'", "") + "'\n")
    binary.chmod(0o755)
    subprocess.run([STAMP, "write", str(binary)], check=True, timeout=60)
    proc, report = gpu_check(tmp_path, "--only", "kernels-gpu", "--kernels-test", str(binary))
    log = (tmp_path / "report" / "report.logs" / "kernels-gpu.log").read_text()
    assert "args: -test.run ^TestKernelsOnARealGPU$ -test.v -test.count=1" in log, log
    assert (proc.returncode == 0) == ok, proc.stdout + proc.stderr + report
    assert ("| kernels-gpu | pass |" in report) == ok, report


STAMP = os.path.join(os.path.dirname(SCRIPT), "carried-stamp.sh")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("stale", ["no-stamp", "changed", "other-sources"])
def test_stale_carried_file_fails(tmp_path, package_dir, stale):
    """A file carried to the GPU machine (here the kernels' test binary; libgonccl.so
    the same way, in the build step) runs only if its stamp (scripts/carried-stamp.sh,
    written by make lib and make gpu-check-kernels) says it was built from this tree's
    sources, by content: without a stamp, changed since, or built from other sources,
    the step fails saying so, and does not run it. Before, a stale library passed the
    version and function-name check."""
    binary = tmp_path / "kernels-gpu.test"
    binary.write_text("#!/bin/sh\necho ran\nprintf '--- SKIP: TestKernelsOnARealGPU (0.00s)\\nPASS\\n'\n")
    binary.chmod(0o755)
    if stale != "no-stamp":
        subprocess.run([STAMP, "write", str(binary)], check=True, timeout=60)
    stamp = tmp_path / "kernels-gpu.test.stamp"
    if stale == "changed":
        binary.write_text(binary.read_text() + "# rebuilt\n")
    if stale == "other-sources":
        stamp.write_text(re.sub(r"^sources .*$", "sources " + "0" * 64, stamp.read_text(), flags=re.M))
    proc, report = gpu_check(tmp_path, "--only", "kernels-gpu", "--kernels-test", str(binary))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out + report
    why = {"no-stamp": "has no stamp", "changed": "changed since it was built",
           "other-sources": "is stale: it was built from other sources"}[stale]
    assert re.search(r"\| kernels-gpu \| fail \| 0 \| carried-stamp: .*" + why, report), report
    assert not (tmp_path / "report" / "report.logs" / "kernels-gpu.log").exists(), "the stale binary ran"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("stale", ["other-sources"])
def test_stale_carried_wheel_fails(tmp_path, package_dir, stale):
    """A wheel carried from an earlier run on a GPU machine (--wheel) is installed only if
    its stamp, written by the build step that made it, says it was built from this tree's
    library and extension sources; else install-wheel fails saying so, and pip never
    sees it. Before, any wheel was installed."""
    wheels = tmp_path / "wheel"
    wheels.mkdir()
    whl = wheels / "gonccl-0.1.0-cp311-cp311-linux_x86_64.whl"
    whl.write_bytes(b"not a wheel")
    if stale == "other-sources":
        subprocess.run([STAMP, "write", str(whl)], check=True, timeout=60)
        stamp = wheels / (whl.name + ".stamp")
        stamp.write_text(re.sub(r"^sources .*$", "sources " + "0" * 64, stamp.read_text(), flags=re.M))
    proc, report = gpu_check(tmp_path, "--only", "import", "--wheel", str(wheels))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out + report
    why = {"no-stamp": "has no stamp", "other-sources": "is stale: it was built from other sources"}[stale]
    assert re.search(r"\| install-wheel \| fail \| 0 \| --wheel: carried-stamp: .*" + why, report), report
    assert "pip" not in (tmp_path / "report" / "report.md").read_text().split("## The plan")[0], report


@pytest.fixture
def carried(tmp_path):
    """A folder under the tree's build/ (only paths under the tree can be carried) for a
    library and a kernels' test binary, removed afterwards."""
    d = os.path.join(ROOT, "build", f"test-carry-{os.getpid()}-{tmp_path.name}")
    os.makedirs(d)
    yield d
    subprocess.run(["rm", "-rf", d], check=True)


@pytest.mark.timeout(120)
def test_dry_run_checks_what_is_carried(tmp_path, package_dir, carried):
    """The dry run lists what to carry to the GPU machine (the library, the kernels' test
    binary, each with its stamp, as paths under the tree) with their size, and the one
    command that runs both parts from them; it fails when a carried file is stale or they
    exceed what the machine takes (64 MiB): here a library changed since its stamp and a
    70 MiB test binary. Before, a stale library passed a dry run that did not build, and
    nothing said what to carry. (make gpu-check-dry runs the case that fits.)"""
    lib = os.path.join(carried, "libgonccl.so")
    ktest = os.path.join(carried, "kernels-gpu.test")
    with open(lib, "wb") as f:
        f.write(b"\0" * 1024)
    with open(ktest, "wb") as f:
        f.truncate(70 << 20)
    subprocess.run([STAMP, "write", lib, ktest], check=True, timeout=60)
    with open(lib, "ab") as f:
        f.write(b"rebuilt")
    proc, report = gpu_check(tmp_path, "--only", "import", "--library", lib, "--kernels-test", ktest)
    out = proc.stdout + proc.stderr
    rel = os.path.relpath(carried, ROOT)
    assert f'carry: ["{rel}/libgonccl.so", "{rel}/libgonccl.so.stamp", "{rel}/kernels-gpu.test", ' \
           f'"{rel}/kernels-gpu.test.stamp", "{rel}/gonccl.h"] (5 paths, ' in out, out
    assert f"one call: scripts/gpu-check.sh --library {rel}/libgonccl.so --kernels-test {rel}/kernels-gpu.test" in out, out
    assert "## What to carry" in report, report
    # Both parts fit one call, on one GPU and with the one-rank-per-GPU steps of 2+ GPUs.
    assert re.search(r"both parts in one call: \d+s planned of at most 540s: fits", out), out
    assert re.search(r"both parts in one call on 2\+ GPUs \(the one-rank-per-GPU steps included\): "
                     r"\d+s planned of at most 540s: fits", out), out
    assert proc.returncode == 1, out + report
    assert "| carry | fail | 0 | a carried file is missing, stale or too large" in report, report
    assert f"| {rel}/libgonccl.so | 1 | {rel}/libgonccl.so changed since it was built" in out, out
    assert f"| {rel}/kernels-gpu.test | 70 | {rel}/kernels-gpu.test matches this tree's sources" in out, out
    assert re.search(r"\(5 paths, 7[0-9] MiB of at most 8 paths and 64 MiB\)\n.*carry: DOES NOT FIT", out), out


@pytest.mark.timeout(120)
def test_dry_run_fails_when_both_parts_exceed_one_call(tmp_path, package_dir):
    """Both parts run in one call of at most 540 s (a GPU machine's command runs at most
    600 s): a plan whose parts each fit their budgets but not that together fails. Here
    --extended with budgets large enough for each part."""
    proc, report = gpu_check(tmp_path, "--extended", "--part-budget", "A=1000", "--part-budget", "B=2000",
                             "--only", "import")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out + report
    assert "part A planned:" in out and "DOES NOT FIT" not in out.split("both parts in one call")[0], out
    assert re.search(r"both parts in one call: \d+s planned of at most 540s: DOES NOT FIT", out), out
    assert "| plan | fail | 0 | a part's steps do not fit its budget, or both parts one call" in report, report


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
    (["--part-budget", "C=10"], "--part-budget C=10: PART=SECONDS, PART A or B"),
    (["--wheel", "/nonexistent"], "--wheel: no gonccl wheel there"),
])
def test_bad_arguments_are_refused(tmp_path, args, msg):
    proc, _ = gpu_check(tmp_path, *args, timeout=60)
    assert proc.returncode == 2 and msg in proc.stderr, proc.stderr

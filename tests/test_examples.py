"""The lecture's DDP examples run on gonccl, on CPU, with 2 ranks, and train correctly.

* examples/ddp_simple.py under torchrun (`python -m torch.distributed.run
  --nproc_per_node=2`): both ranks print the all-reduced (averaged) gradient 3.5,
  exit 0, and rank 0's profiler trace names gonccl's collectives ("gonccl:...").
* examples/ddp_example.py, run unchanged inside workers/ddp_example_wrapper.py with
  different seeds per rank (different initial weights and data): DDP's broadcast makes
  the weights identical, 10 training steps run, the trace (exported by rank 0) holds
  gonccl:all_reduce events, and the final weights and gradients are bit-identical on
  both ranks. It is heavy (3 Linear 4000x4000 layers, batch 1000): about a minute and
  a half on 2 cores, run once.
"""

import json
import os

import pytest

import _harness

SIMPLE_TIMEOUT = 240
EXAMPLE_TIMEOUT = 600


@pytest.fixture(scope="module")
def ddp_simple(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("ddp_simple")
    port = _harness.free_port()
    argv = [
        _harness.PYTHON, "-m", "torch.distributed.run",
        "--nproc_per_node=2", "--nnodes=1",
        "--master_addr=127.0.0.1", f"--master_port={port}",
        os.path.join(_harness.EXAMPLES_DIR, "ddp_simple.py"),
    ]
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    run = _harness.run_processes([argv], timeout=SIMPLE_TIMEOUT, envs=[env], cwd=str(cwd), names=["torchrun"])
    return run, cwd


@pytest.mark.timeout(SIMPLE_TIMEOUT + 60)
def test_ddp_simple_exit_and_gradient(ddp_simple):
    run, _ = ddp_simple
    run.assert_ok("torchrun examples/ddp_simple.py")
    out = run.procs[0].stdout
    for rank in (0, 1):
        assert f"rank {rank}: reduced dy/dw: 3.5" in out, (
            f"rank {rank} did not print the averaged gradient 3.5:\n{run.describe()}"
        )
    # the local gradients were 7*rank: 0 and 7, so 3.5 really is their average
    assert "rank 0: dy/dw=7*x: 0.0" in out and "rank 1: dy/dw=7*x: 7.0" in out, run.describe()


@pytest.mark.timeout(SIMPLE_TIMEOUT + 60)
def test_ddp_simple_trace_names_gonccl(ddp_simple):
    run, cwd = ddp_simple
    trace = cwd / "trace_ddp_simple.json"
    assert trace.is_file(), f"no {trace}; files: {os.listdir(cwd)}\n{run.describe()}"
    text = trace.read_text()
    assert "gonccl:" in text, "the profiler trace does not name any gonccl collective"
    names = {e.get("name") for e in json.loads(text).get("traceEvents", [])}
    ours = sorted(n for n in names if isinstance(n, str) and n.startswith("gonccl:"))
    assert ours, f"no trace event is named gonccl:*; names: {sorted(map(str, names))[:50]}"


def warn_lines(text: str) -> list[str]:
    """gonccl's WARN log lines in text ("... [rank] GONCCL WARN SUBSYS message")."""
    return [line for line in text.splitlines() if " GONCCL WARN " in line]


@pytest.mark.timeout(SIMPLE_TIMEOUT + 60)
def test_ddp_simple_prints_no_warning(ddp_simple):
    """A normal run, its end included, prints no WARN line: ranks that finish and exit
    are not failures of their peers."""
    run, _ = ddp_simple
    run.assert_ok("torchrun examples/ddp_simple.py")
    warned = warn_lines(run.procs[0].stdout + run.procs[0].stderr)
    assert not warned, "a normal run of ddp_simple.py printed WARN lines:\n" + "\n".join(warned)


@pytest.fixture(scope="module")
def ddp_example(tmp_path_factory):
    report_dir = str(tmp_path_factory.mktemp("ddp_example"))
    return _harness.WorkerRun(
        "ddp_example_wrapper.py", 2, report_dir, timeout=EXAMPLE_TIMEOUT,
        args=[os.path.join(_harness.EXAMPLES_DIR, "ddp_example.py")], grace=60,
    )


@pytest.mark.timeout(EXAMPLE_TIMEOUT + 60)
def test_ddp_example_runs(ddp_example):
    ddp_example.section("run_example")
    ddp_example.run.assert_ok("examples/ddp_example.py (2 ranks)")
    for proc in ddp_example.run.procs:
        assert f"Start running basic DDP example on {proc.name}." in proc.stdout, proc.describe()


@pytest.mark.timeout(EXAMPLE_TIMEOUT + 60)
def test_ddp_example_prints_no_warning(ddp_example):
    """ddp_example.py never destroys its process group: each rank's process ends with it
    alive, and its peer sees the connection close. With nothing pending that is a normal
    end (logged at INFO), not a WARN."""
    ddp_example.run.assert_ok("examples/ddp_example.py (2 ranks)")
    warned = [line for proc in ddp_example.run.procs for line in warn_lines(proc.stderr)]
    assert not warned, "a normal run of ddp_example.py printed WARN lines:\n" + "\n".join(warned)


@pytest.mark.timeout(EXAMPLE_TIMEOUT + 60)
def test_ddp_example_ten_steps_and_trace(ddp_example):
    records = ddp_example.section("steps_and_trace")
    assert [r["data"]["forward_calls"] for r in records] == [10, 10]
    assert records[0]["data"]["gonccl_all_reduce_events"] >= 10
    assert os.path.isfile(os.path.join(ddp_example.report_dir, "trace_ddp_example.json"))


@pytest.mark.timeout(EXAMPLE_TIMEOUT + 60)
def test_ddp_example_weights_bit_identical(ddp_example):
    records = ddp_example.section("checksums")
    # The worker compared them; compare the gathered values here too.
    for key in ("after_ddp", "final_params", "final_grads"):
        values = {tuple(v) for rec in records for v in rec["data"][key]}
        assert len(values) == 1, f"{key} differ across ranks: {values}"
    before = {tuple(v) for v in records[0]["data"]["before_ddp"]}
    assert len(before) == 2, "ranks started from equal weights: the check above would prove nothing"

"""Misuse of the gonccl backend raises a clear Python exception, promptly, and never hangs.

One 2-rank run of workers/bad_input_worker.py (process-group timeout 30 s, the whole
run under the harness's hard timeout) checks: non-contiguous and sparse tensors,
unsupported dtypes (TypeError naming the dtype), all_gather outputs of the wrong
count/size/dtype, unsupported collectives and reduce ops ("not supported"), and
mismatches between ranks (sizes, dtypes, collectives, large pipelined messages):
those fail on *both* ranks with a DistBackendError naming the peer within seconds,
and a process whose default group was broken that way still exits at once. A
collective the peer never joins fails at the group's timeout (3 s), and one whose
peer exits fails at once, naming that rank; aborting or destroying a group fails its
pending ops at once ("abort unblocks everything"). SIGINT (Ctrl-C) during a blocked
collective raises KeyboardInterrupt within seconds (DESIGN.md, "Signals": waits are
sliced so Ctrl-C works).
Local misuse must leave the process group usable (the worker checks an all_reduce
after each kind).
"""

import re

import pytest

RUN_TIMEOUT = 180
SECTIONS = [
    "init",
    "non_contiguous",
    "sparse",
    "dtype",
    "all_gather_sizes",
    "size_overflow",
    "unsupported_ops",
    "mismatch_size",
    "mismatch_dtype",
    "mismatch_collective",
    "mismatch_large",
    "timeout",
    "abort",
    "ctrl_c",
    "mismatch_default_then_exit",
    "peer_exited",
]
# section -> (case recorded by the worker, strings that the message of at least one
# rank must contain besides "mismatch": both sides' views)
MISMATCHES = {
    "mismatch_size": ("all_reduce 1024 vs 2048 elements", ["1024", "2048"]),
    "mismatch_dtype": ("all_reduce float32 vs int32", ["float32", "int32"]),
    "mismatch_collective": ("all_reduce vs broadcast", ["all_reduce", "broadcast"]),
    "mismatch_large": ("all_reduce 1M vs 2M elements", ["1048576", "2097152"]),
    "mismatch_default_then_exit": ("default group: all_reduce 1024 vs 2048 elements", ["1024", "2048"]),
}


def bad_input_run(worker_runs):
    return worker_runs("bad-input", "bad_input_worker.py", 2, timeout=RUN_TIMEOUT, grace=15)


@pytest.mark.timeout(RUN_TIMEOUT + 60)
@pytest.mark.parametrize("section", SECTIONS)
def test_bad_input_section(worker_runs, section):
    run = bad_input_run(worker_runs)
    records = run.section(section)
    if section in MISMATCHES:
        case, both_sides = MISMATCHES[section]
        errors = [rec["data"][case]["error"] for rec in records]
        for rank, err in enumerate(errors):
            assert err.startswith("DistBackendError"), (rank, err)
            assert f"rank {1 - rank}" in err, f"rank {rank}'s error does not name its peer: {err}"
        explained = [
            err for err in errors
            if "mismatch" in err.lower() and all(s in err for s in both_sides)
        ]
        assert explained, (
            f"no rank's error explains the mismatch (wanted 'mismatch' and {both_sides}): {errors}"
        )


@pytest.mark.timeout(RUN_TIMEOUT + 60)
def test_exits_promptly_after_mismatch(worker_runs):
    """With its default group broken by a mismatch, each rank still exits promptly and
    by itself (exit code 0, or 1 only when failed checks were reported above)."""
    run = bad_input_run(worker_runs)
    assert not run.run.timed_out, run.run.describe()
    for proc, rep in zip(run.run.procs, run.reports):
        assert not proc.killed, f"{proc.name} had to be killed:\n{run.run.describe()}"
        m = re.search(r"EXITING AT (\d+\.\d+)", proc.stdout)
        assert m, f"{proc.name} never reached the end of main:\n{run.run.describe()}"
        delay = proc.end_time - float(m.group(1))
        assert delay < 10, f"{proc.name} took {delay:.1f} s to exit after main returned:\n{run.run.describe()}"
        failed = [name for name, sec in rep["sections"].items() if sec["failures"]]
        if failed:
            assert proc.returncode == 1 and rep["finished"], (
                f"{proc.name}: exit code {proc.returncode}\n{run.run.describe()}"
            )
        else:
            assert proc.returncode == 0, f"{proc.name}: exit code {proc.returncode}\n{run.run.describe()}"

"""examples/elastic_ddp.py: 4 CPU ranks train the lecture's ToyModel with DDP on gonccl,
rank 2 is SIGKILLed at step 5, the 3 survivors shrink the group, reload the state they
saved in memory and finish 10 steps with bit-identical parameters. The example checks
through the store, not through gonccl: the ranks started from different weights, DDP's
broadcast made them equal, the survivors end bit-identical, and the loss on their data
fell. A narrow ToyModel (--size 256) keeps it to seconds, and --lr 0.5 makes the loss's
fall plain in 10 steps; the recovery times it reports are printed."""

from __future__ import annotations

import os
import re

import pytest

import _harness

TIMEOUT = 300


@pytest.mark.timeout(TIMEOUT + 60)
def test_elastic_ddp_survivors_finish(tmp_path):
    argv = [_harness.PYTHON, os.path.join(_harness.EXAMPLES_DIR, "elastic_ddp.py"), "--size", "256", "--batch", "32",
            "--lr", "0.5"]
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    run = _harness.run_processes([argv], timeout=TIMEOUT, envs=[env], cwd=str(tmp_path), names=["elastic_ddp"])
    run.assert_ok("examples/elastic_ddp.py")
    out = run.procs[0].stdout
    assert "[launcher] rank 2 was killed" in out, run.describe()
    for step in range(1, 6):
        assert re.search(rf"step {step}: loss \S+ on 4 ranks", out), (
            f"step {step} not run on 4 ranks:\n{run.describe()}"
        )
    for step in range(6, 11):
        assert re.search(rf"step {step}: loss \S+ on 3 ranks", out), (
            f"step {step} not run on 3 ranks:\n{run.describe()}"
        )
    done = re.findall(
        r"\[rank (\d)\] done: 10 steps, parameters identical on all 3 survivors: (\w+); "
        r"weights differed before DDP: (\w+), equal after its broadcast: (\w+); "
        r"loss on the survivors' data ([\d.]+) -> ([\d.]+), fell: (\w+)",
        out,
    )
    assert sorted((r, same, differed, synced, fell) for r, same, differed, synced, _, _, fell in done) == [
        (r, "True", "True", "True", "True") for r in ("0", "1", "3")
    ], run.describe()
    before, after = float(done[0][4]), float(done[0][5])
    assert after < 0.99 * before, f"the loss barely fell ({before} -> {after}):\n{run.describe()}"
    recovered = re.findall(
        r"\[rank (\d)\] recovered: rank 2 lost; error ([\d.]+) s after the kill, "
        r"new group of 3 ready ([\d.]+) s after it; now rank (\d)/3",
        out,
    )
    assert sorted((r, new) for r, _, _, new in recovered) == [("0", "0"), ("1", "1"), ("3", "2")], run.describe()
    worst_error = max(float(e) for _, e, _, _ in recovered)
    worst_ready = max(float(t) for _, _, t, _ in recovered)
    print(
        f"elastic_ddp: survivors' error within {worst_error:.3f} s of the kill, new group ready within {worst_ready:.3f} s"
    )

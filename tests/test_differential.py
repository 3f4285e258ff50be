"""Differential test: gonccl against Gloo (and a local reference) on a seeded random
sequence of operations (workers/differential_worker.py).

Each configuration starts its ranks once: the default group is on gonccl, a Gloo group
over the same ranks is the oracle, plus three random subsets of ranks with a gonccl and
a Gloo group each. Every operation (broadcast, all_reduce, reduce, all_gather,
all_gather_into_tensor, gather, scatter, reduce_scatter, reduce_scatter_tensor,
all_to_all_single with uneven splits, all_to_all, send/recv, barrier) with a random
dtype, reduce op (PREMUL_SUM included), size (0, 1, primes, up to 4 MiB a rank), root,
group, async/sync and in-place/out-of-place choice runs on both and is compared with
Gloo's result and with the reference. The run counts (operations per kind, dtype, op)
are printed; run pytest with -s or -rA to see them.

GONCCL_DIFF_LONG=1 runs the long mode: thousands of operations, and world size 8 too.
GONCCL_DIFF_SEED=N changes the seed (a failure names its op#; the seed reproduces it).
GONCCL_DIFF_SKIP=kind,... leaves kinds out, to see what else differs while one is broken.
The self-test runs the same harness with Gloo as the candidate, over the combinations
Gloo supports: it must find nothing, which shows the harness and its reference are sound.
"""

import json
import os

import pytest

import _harness

LONG = os.environ.get("GONCCL_DIFF_LONG", "") not in ("", "0")
SEED = int(os.environ.get("GONCCL_DIFF_SEED", "20261122"))
if LONG:
    CONFIGS = {"ws2": (2, 5000), "ws3": (3, 5000), "ws4": (4, 4000), "ws8": (8, 2000)}
    TIMEOUT = 3600
else:
    CONFIGS = {"ws2": (2, 600), "ws3": (3, 600), "ws4": (4, 500)}
    TIMEOUT = 420


# Every config on CPU tensors and (where there is a GPU) on CUDA tensors, the Gloo
# oracle staying on the CPU; see _harness.DEVICES.
CASES = _harness.device_cases(CONFIGS, "ws2")


def diff_run(worker_runs, config, env=None, key=None):
    ws, nops = CONFIGS[config]
    seed = SEED + ws
    return worker_runs(key or f"differential-{config}", "differential_worker.py", ws, timeout=TIMEOUT,
                       env=env or {}, args=(str(nops), str(seed)), grace=60)


def summary(counts: dict) -> str:
    groups = {}
    for k, v in counts.items():
        head, _, rest = k.partition("/")
        if head in ("kind", "dtype", "op"):
            groups.setdefault(head, []).append(f"{rest}={v}")
    flat = {k: v for k, v in counts.items() if "/" not in k}
    lines = [f"  {k}: {', '.join(vs)}" for k, vs in groups.items()]
    return json.dumps(flat) + "\n" + "\n".join(lines)


@pytest.mark.timeout(TIMEOUT + 120)
@pytest.mark.parametrize("config,device", CASES)
def test_differential(worker_runs, config, device):
    run = diff_run(worker_runs, config, env=_harness.device_env(device),
                   key=_harness.device_key(f"differential-{config}", device))
    first = [rep["sections"].get("differential", {}).get("data", {}).get("first_failure") for rep in run.reports]
    if any(first):
        print(f"\nfirst failure per rank: {first}")
    recs = run.section("differential")
    counts = [r["data"]["counts"] for r in recs]
    ws, nops = CONFIGS[config]
    print(f"\ndifferential {config} (seed {SEED + ws}, {nops} planned ops, "
          f"{recs[0]['data']['seconds']} s), rank 0 counts:\n{summary(counts[0])}")
    total = sum(c.get("total", 0) for c in counts)
    vs_gloo = sum(c.get("vs_gloo", 0) for c in counts)
    assert total >= nops, counts[0]
    # Gloo really served as the oracle for most operations (the rest: dtypes and ops
    # Gloo lacks, checked against the reference only).
    assert vs_gloo >= 0.6 * total, (vs_gloo, total)
    run.run.assert_ok(f"differential {config}")


@pytest.mark.timeout(TIMEOUT + 120)
def test_harness_self_test_gloo_vs_gloo(worker_runs):
    """The harness with Gloo as the candidate finds no difference (no false alarms), and
    its reference agrees with Gloo on every combination Gloo supports."""
    run = worker_runs("differential-selftest", "differential_worker.py", 3, timeout=TIMEOUT,
                      env={"GONCCL_DIFF_CANDIDATE": "gloo"}, args=("200", str(SEED)), grace=60)
    recs = run.section("differential")
    print(f"\nself-test counts:\n{summary(recs[0]['data']['counts'])}")
    assert recs[0]["data"]["counts"]["total"] >= 100
    run.run.assert_ok("differential self-test")

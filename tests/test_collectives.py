"""gonccl's collectives give the right answers, checked against Gloo and a local torch
reference.

For world sizes 1-4 (and on 3 and 4 ranks again with the bandwidth algorithms forced
and 4 KiB chunks, so every message is pipelined), one run per configuration starts
every rank with the default process group on "gonccl" and a Gloo group over the same
ranks as the oracle (workers/collectives_worker.py). Each rank also regenerates every
rank's seeded input and computes the expected result with torch, so a bug gonccl
shared with Gloo would still show. Covered:
  * all_reduce: SUM, AVG, MIN, MAX, PRODUCT x 8 dtypes x sizes 0, 1, 7, 1000 and ~1M
    (float32 for every op, all dtypes for SUM and MAX); NaN, infinities, signed zeros;
  * broadcast from every root; all_gather (separate outputs, views of one buffer, in
    place); all_gather_into_tensor (concatenated, stacked, in place); barrier (it
    really holds everyone until the last rank arrives);
  * async_op=True: wait, futures and .then, is_completed, out-of-order waits, 60 mixed
    ops in flight, a tensor that only its Work keeps alive;
  * in-place/view semantics, 0-dim and complex tensors, all_reduce_coalesced and the
    coalescing manager;
  * bitwise-identical results on every rank; subgroups, also used from two threads at
    once; create/destroy cycles without fd leaks; collectives while faulthandler is on
    and a SIGALRM handler fires every millisecond (DESIGN.md, "Signals");
    destroy_process_group.

Each test below asserts one section of one run; the run itself happens once, on the
first test that needs it.
"""

import pytest

import _harness

CONFIGS = {
    "ws1": (1, {}),
    "ws2": (2, {}),
    "ws3": (3, {}),
    "ws4": (4, {}),
    # Ring all_reduce and chain broadcast at every size, in 4 KiB chunks.
    "ws3-ring-chain": (3, {"GONCCL_ALGO": "allreduce:ring,broadcast:chain", "GONCCL_CHUNKSIZE": "4096"}),
    "ws4-ring-chain": (4, {"GONCCL_ALGO": "allreduce:ring,broadcast:chain", "GONCCL_CHUNKSIZE": "4096"}),
}
SECTIONS = [
    "init",
    "all_reduce",
    "all_reduce_special_values",
    "broadcast",
    "all_gather",
    "all_gather_into_tensor",
    "barrier",
    "async",
    "async_stress",
    "in_place",
    "all_reduce_coalesced",
    "identical_across_ranks",
    "subgroups",
    "threads",
    "group_churn",
    "signals",
    "shutdown",
]
RUN_TIMEOUT = 240


# Every config on CPU tensors and (where there is a GPU) on CUDA tensors; see
# _harness.DEVICES.
CASES = _harness.device_cases(CONFIGS, "ws2")


def collectives_run(worker_runs, config, device="cpu"):
    world_size, env = CONFIGS[config]
    env = {**env, **_harness.device_env(device)}
    return worker_runs(
        _harness.device_key(f"collectives-{config}", device), "collectives_worker.py", world_size,
        timeout=RUN_TIMEOUT, env=env
    )


@pytest.mark.timeout(RUN_TIMEOUT + 60)
@pytest.mark.parametrize("section", SECTIONS)
@pytest.mark.parametrize("config,device", CASES)
def test_collective_section(worker_runs, config, device, section):
    run = collectives_run(worker_runs, config, device)
    records = run.section(section)
    if section in ("all_reduce", "all_gather_into_tensor"):
        # The comparison with Gloo must actually have happened for every combination.
        for r, rec in enumerate(records):
            missing = rec["data"].get("gloo_missing")
            assert missing == [], f"rank {r}: Gloo could not serve as the oracle for {section}: {missing}"
    if section == "identical_across_ranks":
        assert records[0]["data"]["cases"] > 250, records[0]["data"]


@pytest.mark.timeout(RUN_TIMEOUT + 60)
@pytest.mark.parametrize("config,device", CASES)
def test_all_ranks_exit_cleanly(worker_runs, config, device):
    """Every rank finished every section and exited 0 (no crash or hang at exit)."""
    run = collectives_run(worker_runs, config, device)
    run.run.assert_ok(f"collectives {config}")
    for r, rep in enumerate(run.reports):
        assert rep["finished"] and rep["order"] == SECTIONS, (r, rep["order"])

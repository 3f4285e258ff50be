"""FSDP2 (torch.distributed.fsdp.fully_shard) on CPU over gonccl gives the same losses and
final parameters as the same run over Gloo (two separate runs, same seeds;
workers/fsdp_worker.py). fully_shard drives all_gather_into_tensor (parameters) and
reduce_scatter_tensor (gradients) on the default group."""

import pytest

TIMEOUT = 240


def fsdp_run(worker_runs, backend, ws):
    return worker_runs(f"fsdp-{backend}-ws{ws}", "fsdp_worker.py", ws, timeout=TIMEOUT, args=(backend,))


@pytest.mark.timeout(2 * TIMEOUT + 60)
@pytest.mark.parametrize("ws", [2, 3])
def test_fsdp2_matches_gloo(worker_runs, ws):
    ref = fsdp_run(worker_runs, "gloo", ws)
    ref_recs = ref.section("fsdp")
    run = fsdp_run(worker_runs, "gonccl", ws)
    recs = run.section("fsdp")
    losses, want = recs[0]["data"]["losses"], ref_recs[0]["data"]["losses"]
    print(f"\nws={ws} gonccl losses {losses}\n     gloo   losses {want}")
    assert len(losses) == len(want) == 5
    for a, b in zip(losses, want):
        assert abs(a - b) <= 1e-5 * max(1.0, abs(b)), (losses, want)
    for r in range(ws):  # every rank reports the same full parameters, equal to Gloo's
        p, q = recs[r]["data"]["params"], ref_recs[r]["data"]["params"]
        assert p == recs[0]["data"]["params"], f"rank {r}'s parameters differ from rank 0's"
        worst = max(abs(x - y) for x, y in zip(p, q))
        assert worst <= 1e-4, f"gonccl vs gloo parameters differ by {worst}"
    run.run.assert_ok("fsdp gonccl")

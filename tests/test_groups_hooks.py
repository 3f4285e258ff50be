"""Groups, futures, DDP comm hooks and object collectives on gonccl
(workers/groups_hooks_worker.py), on 2 and 3 ranks:
  new_group        arbitrary subsets in arbitrary order, every rank calling new_group
                   (non-members get NON_GROUP_MEMBER); all_reduce/broadcast/all_gather on each
  new_subgroups    new_subgroups and new_subgroups_by_enumeration
  split_group      torch.distributed.split_group of the default gonccl group into halves
  threads          three groups used at once from three threads (async and blocking ops)
  destruction      create/use/destroy cycles; the default group keeps working
  object_collectives all_gather_object, broadcast_object_list, gather_object, scatter_object_list
  ddp_hooks        a few DDP steps of a small model with no hook, allreduce_hook,
                   fp16_compress_hook, bf16_compress_hook and PowerSGD: parameters identical
                   on every rank and equal (within tolerance) to the same run over Gloo
  futures          Work.wait(timeout), get_future().then() chains, and wait(timeout=2 s) on an
                   irecv nobody answers raises within 20 s
"""

import pytest

import _harness

CONFIGS = {"ws2": 2, "ws3": 3}
SECTIONS = ["init", "new_group", "new_subgroups", "split_group", "threads", "destruction", "object_collectives",
            "ddp_hooks", "futures"]
TIMEOUT = 300


# Every config on CPU tensors and (where there is a GPU) on CUDA tensors; see
# _harness.DEVICES. (DDP itself trains a CPU model: its hooks' collectives move.)
CASES = _harness.device_cases(CONFIGS, "ws2")


def gh_run(worker_runs, config, device="cpu"):
    return worker_runs(_harness.device_key(f"groups-hooks-{config}", device), "groups_hooks_worker.py",
                       CONFIGS[config], timeout=TIMEOUT, env=_harness.device_env(device))


@pytest.mark.timeout(TIMEOUT + 60)
@pytest.mark.parametrize("section", SECTIONS)
@pytest.mark.parametrize("config,device", CASES)
def test_groups_hooks_section(worker_runs, config, device, section):
    run = gh_run(worker_runs, config, device)
    recs = run.section(section)
    if section == "ddp_hooks":
        print({k: v for k, v in recs[0]["data"].items()})


@pytest.mark.timeout(TIMEOUT + 60)
@pytest.mark.parametrize("config,device", CASES)
def test_groups_hooks_ranks_exit_cleanly(worker_runs, config, device):
    gh_run(worker_runs, config, device).run.assert_ok(f"groups/hooks {config} on {device}")

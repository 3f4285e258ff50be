"""The torch Backend contract, gonccl against Gloo in the same processes
(workers/contract_worker.py):
  split              split_group with ranks left out (NON_GROUP_MEMBER), uneven, reordered
                     and nested splits, 3 and 4 ranks: the same groups and sums as Gloo's
  timeouts           set_timeout and barrier(timeout=) end an op a rank never joins within
                     the new limit (both backends); gonccl's error says "Timed out", the op's
                     sequence number and the missing rank; an ephemeral extension lasts until
                     its first op finished; Work.timeout
  monitored_barrier  Gloo's messages on rank 0 (first missing rank, or all with
                     wait_all_ranks); the ranks that arrived fail at once naming it
  work               _get_duration with timing, get_future_result, get_error, the
                     on-completion hook, Work.wait(timeout)
  sparse             sparse COO all_reduce bit-identical to Gloo's; DDP with a sparse
                     embedding trains to bit-identical parameters
  flight_recorder    torch's flight recorder dumps on failure: the stuck op open, the
                     finished ones with durations
  options            GoncclOptions through new_group / split_group(pg_options=): the
                     algorithm restriction and chunk size reach the communicator; bad
                     or disagreeing options are clear errors; errors name global ranks
  device, mixed      init_process_group("gonccl", device_id=cpu), "cpu:gloo,cuda:gonccl"

Where a torch release refuses something on its own (workers/_torch_since.py: split_group
without a bound device before 2.15, monitored_barrier on a backend other than Gloo before
2.14, device_id=cpu before 2.15), the workers check that refusal, then what gonccl does
where that torch allows it (a bound device).
"""

import pytest
import torch

TORCH = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])
MAIN = ["split", "timeouts", "monitored_barrier", "work", "sparse", "options"]
TIMEOUT = 240


def contract_run(worker_runs, mode, world_size):
    return worker_runs(f"contract-{mode}", "contract_worker.py", world_size, args=[mode], timeout=TIMEOUT)


@pytest.mark.timeout(TIMEOUT + 60)
@pytest.mark.parametrize("section", MAIN)
def test_contract(worker_runs, section):
    recs = contract_run(worker_runs, "main", 3).section(section)
    print({k: v for k, v in recs[0]["data"].items()})


@pytest.mark.timeout(TIMEOUT + 60)
@pytest.mark.parametrize("mode,section,world_size", [
    ("split4", "split4", 4), ("fr", "flight_recorder", 3), ("device", "device", 3), ("mixed", "mixed", 2)])
def test_contract_mode(worker_runs, mode, section, world_size):
    if mode == "fr" and TORCH < (2, 15):
        pytest.skip(f"torch {torch.__version__}: gonccl's flight recorder hooks need torch >= 2.15")
    run = contract_run(worker_runs, mode, world_size)
    if mode == "device" and TORCH < (2, 15):
        run.section("device_id=cpu")  # torch's refusal, checked by the worker
    recs = run.section(section)
    print({k: v for k, v in recs[0]["data"].items()})


def _no_gpu_reason():
    import torch

    if not torch.cuda.is_available():
        return "no GPU here (torch.cuda.is_available() is False): scripts/gpu-check.sh runs it on a GPU machine"
    from gonccl import _C

    if not _C.cuda_support():
        return "this gonccl build has no CUDA support"
    return None


@pytest.mark.timeout(TIMEOUT + 60)
@pytest.mark.parametrize("mode", ["mixed-cuda", "device-cuda"])
def test_contract_cuda(worker_runs, mode):
    """"cpu:gloo,cuda:gonccl" with CUDA tensors on gonccl and CPU ones on Gloo, and
    init_process_group("gonccl", device_id=cuda:N) then new_group / split_group."""
    reason = _no_gpu_reason()
    if reason:
        pytest.skip(reason)
    recs = contract_run(worker_runs, mode, 2).section(mode)
    print({k: v for k, v in recs[0]["data"].items()})

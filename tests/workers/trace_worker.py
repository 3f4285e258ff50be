"""One rank of the flight-recorder test (tests/test_trace.py).

    trace_worker.py SKIP_RANK

Every rank runs three all_reduces on a group whose timeout is 3 s; then every rank
but SKIP_RANK calls a fourth, which SKIP_RANK skips (it is "stuck elsewhere" for
longer than the timeout), so the others time out. Every rank then destroys its
groups; GONCCL_TRACE_DUMP_DIR (set by the test) collects the flight recorders.
Exit status 0 means the ranks behaved as described.
"""

import datetime
import sys
import time

import torch
import torch.distributed as dist

import gonccl  # noqa: F401


def main() -> int:
    skip = int(sys.argv[1])
    dist.init_process_group("gonccl", timeout=datetime.timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    group = dist.new_group(list(range(world)), timeout=datetime.timedelta(seconds=3))
    t = torch.ones(1024)
    for _ in range(3):
        dist.all_reduce(t, group=group)
    assert t[0].item() == world**3, t[0].item()
    if rank == skip:
        time.sleep(8)  # past the others' timeout
    else:
        try:
            dist.all_reduce(torch.ones(1024), group=group)
        except Exception as e:  # noqa: BLE001 - the expected timeout
            print(f"rank {rank}: all_reduce failed as expected: {e}", file=sys.stderr)
        else:
            print(f"rank {rank}: all_reduce without rank {skip} succeeded", file=sys.stderr)
            return 2
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())

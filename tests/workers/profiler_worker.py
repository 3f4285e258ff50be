"""One rank of the profiler test (tests/test_profiler.py): torch.profiler sessions
around asynchronous gonccl ops whose futures are waited on, the way DDP's reducer
waits, each session stopped right after the last future completes.

usage: profiler_worker.py SESSIONS OPS   (env: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)

Each session must record every op ("gonccl:all_reduce" events with the op's shapes),
every result must be exact, and the process must exit cleanly: ending an op's
profiler range on gonccl's completion thread after its future was marked complete
raced with the profiler collecting its trace and corrupted the heap (glibc's
"free(): invalid next size", or a SIGSEGV in kineto's destructors at exit).
"""

from __future__ import annotations

import sys

import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile

import gonccl  # noqa: F401  (registers the backend)


def main() -> int:
    sessions, ops = int(sys.argv[1]), int(sys.argv[2])
    dist.init_process_group("gonccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    want = float(sum(r + 1 for r in range(world)))
    bad = []
    for s in range(sessions):
        with profile(record_shapes=True, activities=[ProfilerActivity.CPU]) as prof:
            for i in range(ops):
                t = torch.full((1024,), float(rank + 1))
                dist.all_reduce(t, async_op=True).get_future().wait()
                if not torch.equal(t, torch.full((1024,), want)):
                    bad.append(f"session {s} op {i}: got {t[0].item()}, want {want}")
        seen = sum(e.count for e in prof.key_averages() if e.key == "gonccl:all_reduce")
        if seen != ops:
            bad.append(f"session {s}: the profiler saw {seen} gonccl:all_reduce events, want {ops}")
        del prof
    dist.destroy_process_group()
    for line in bad[:10]:
        print(f"rank {rank}: {line}", file=sys.stderr)
    print(f"rank {rank}: {sessions} profiler sessions x {ops} ops, {len(bad)} problems")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

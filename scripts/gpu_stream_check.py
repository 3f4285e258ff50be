"""Stream-ordering checks of gonccl on CUDA tensors, one process per rank (torchrun).

    torchrun --nproc_per_node=2 scripts/gpu_stream_check.py [--device cuda] [--size-mib 256]

Each check puts values in tensors with kernels on the caller's current stream (the
default stream, as most scripts do), runs a collective, and then at once reads the
result with another kernel on that same stream, with no synchronize in between: if
gonccl's work did not make the current stream wait for everything it queued (the
host-to-device copies, and copy-outs such as all_gather's into a list), the check kernel
reads stale bytes and the mismatch count is not zero.

  sync_all_reduce   a sync all_reduce of --size-mib MiB, checked at once, --iters times
  all_gather_list   all_gather into a list of tensors, each output checked at once
  chained_async     two async ops in a row on one tensor (all_reduce then all_reduce,
                    all_reduce then broadcast), waited, checked at once

Ranks use cuda:LOCAL_RANK % device_count, so 2 ranks on one GPU share it. With --device
cpu the same checks run on CPU tensors (the checker's own test, e.g. in a dry run).
--init-only joins the group, runs one barrier and leaves (for the INIT log lines).
Prints one JSON line per check ("STREAMCHECK {...}") and exits 1 if any failed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist


def emit(**record):
    print("STREAMCHECK " + json.dumps(record), flush=True)


def wrong(t: torch.Tensor, want: float) -> torch.Tensor:
    """Number of elements of t that differ from want, as a tensor (a kernel on the current stream)."""
    return (t != want).sum()


def check_sync_all_reduce(device, rank, world, n, iters):
    base = world * (world + 1) / 2
    t = torch.empty(n, dtype=torch.float32, device=device)
    bad = []
    for i in range(iters):
        t.fill_(float(rank + 1 + i))
        dist.all_reduce(t)
        w = wrong(t, base + world * i)  # queued right behind the collective, same stream
        bad.append(w)
    counts = [int(w.item()) for w in bad]
    return sum(counts), {"iterations": iters, "bytes": n * 4, "wrong_per_iteration": [c for c in counts if c][:10]}


def check_all_gather_list(device, rank, world, n, iters):
    src = torch.empty(n, dtype=torch.float32, device=device)
    outs = [torch.empty(n, dtype=torch.float32, device=device) for _ in range(world)]
    bad = []
    for i in range(iters):
        for o in outs:
            o.fill_(-1.0)
        src.fill_(float(100 * i + rank))
        dist.all_gather(outs, src)
        bad.extend(wrong(outs[r], float(100 * i + r)) for r in range(world))
    return sum(int(w.item()) for w in bad), {"iterations": iters, "bytes_per_rank": n * 4}


def check_chained_async(device, rank, world, n, iters):
    s1 = world * (world + 1) / 2
    t = torch.empty(n, dtype=torch.float32, device=device)
    bad = []
    for i in range(iters):
        t.fill_(float(rank + 1))
        w1 = dist.all_reduce(t, async_op=True)
        w2 = dist.all_reduce(t, async_op=True)  # its input is the first one's output
        w1.wait()
        w2.wait()
        bad.append(wrong(t, world * s1))
        t.fill_(float(rank + 1 + i))
        w1 = dist.all_reduce(t, async_op=True)
        w2 = dist.broadcast(t, src=world - 1, async_op=True)
        w2.wait()
        bad.append(wrong(t, s1 + world * i))
    return sum(int(w.item()) for w in bad), {"iterations": iters, "bytes": n * 4}


CHECKS = {
    "sync_all_reduce": check_sync_all_reduce,
    "all_gather_list": check_all_gather_list,
    "chained_async": check_chained_async,
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--backend", default="gonccl")
    ap.add_argument("--size-mib", type=float, default=256.0, help="sync_all_reduce's tensor (MiB)")
    ap.add_argument("--iters", type=int, default=50, help="sync_all_reduce's repetitions")
    ap.add_argument("--small-mib", type=float, default=16.0, help="the other checks' tensors (MiB)")
    ap.add_argument("--small-iters", type=int, default=20, help="the other checks' repetitions")
    ap.add_argument("--init-only", action="store_true", help="init, one barrier, destroy")
    args = ap.parse_args()

    if args.device == "cuda":
        if not torch.cuda.is_available():
            print("gpu_stream_check: torch sees no GPU (torch.cuda.is_available() is False)", file=sys.stderr)
            return 2
        local = int(os.environ.get("LOCAL_RANK", "0"))
        device = torch.device("cuda", local % torch.cuda.device_count())
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    dist.init_process_group(args.backend, device_id=device if device.type == "cuda" else None)
    rank, world = dist.get_rank(), dist.get_world_size()
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    emit(check="setup", rank=rank, world=world, device=str(device), name=where, torch=torch.__version__,
         alloc_conf=os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""), ok=True)
    if args.init_only:
        dist.barrier()
        dist.destroy_process_group()
        return 0

    failed = 0
    n = int(args.size_mib * (1 << 20)) // 4
    small = int(args.small_mib * (1 << 20)) // 4
    for name, fn in CHECKS.items():
        count, iters = (n, args.iters) if name == "sync_all_reduce" else (small, args.small_iters)
        start = time.monotonic()
        try:
            bad, detail = fn(device, rank, world, count, iters)
            ok, error = bad == 0, None
        except Exception as e:  # a failure to report, not to hide: the record says what it was
            bad, detail, ok, error = None, {}, False, f"{type(e).__name__}: {e}"
        failed += not ok
        emit(check=name, rank=rank, ok=ok, wrong_elements=bad, seconds=round(time.monotonic() - start, 2),
             error=error, **detail)
        if error is not None:
            break  # the process group may be unusable now
    if failed == 0:
        dist.barrier()
    dist.destroy_process_group()
    print(f"gpu_stream_check: rank {rank}: {len(CHECKS) - failed}/{len(CHECKS)} checks passed", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

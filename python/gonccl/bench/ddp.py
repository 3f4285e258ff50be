"""`python -m gonccl.bench ddp`: ms per training step of examples/ddp_example.py.

The model is examples/ddp_example.py's ToyModel (3 x Linear(size, size) with ReLU,
size 4000 there), batch 1000, MSE loss, SGD, DDP with bucket_cap_mb=25; the step is
the example's: zero_grad, forward, backward (DDP all-reduces the gradients), step.
Each backend gets its own process group and a fresh model with the same weights;
backends take turns for --rounds rounds; the reported time of a step is the max over
ranks of its average over -n steps after -w warm-up steps.
"""

from __future__ import annotations

import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.optim as optim
from torch.nn.parallel import DistributedDataParallel as DDP

from gonccl.bench import variants


class ToyModel(nn.Module):
    def __init__(self, size: int):
        super().__init__()
        self.net1 = nn.Linear(size, size)
        self.relu = nn.ReLU()
        self.net2 = nn.Linear(size, size)
        self.net3 = nn.Linear(size, size)

    def forward(self, x):
        return self.net3(self.relu(self.net2(self.relu(self.net1(x)))))


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _time_steps(group, size: int, batch: int, warmup: int, iters: int, seed: int,
                device: torch.device) -> float:
    torch.manual_seed(seed)
    model = ToyModel(size).to(device)
    ids = [device.index] if device.type == "cuda" else None
    ddp = DDP(model, device_ids=ids, process_group=group, bucket_cap_mb=25)
    loss_fn = nn.MSELoss()
    opt = optim.SGD(ddp.parameters(), lr=0.001)
    gen = torch.Generator().manual_seed(seed + dist.get_rank())
    x = torch.randn(batch, size, generator=gen).to(device)
    y = torch.randn(batch, size, generator=gen).to(device)

    def step():
        opt.zero_grad()
        loss_fn(ddp(x), y).backward()
        opt.step()

    for _ in range(warmup):
        step()
    _sync(device)
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        step()
    _sync(device)
    local = (time.perf_counter() - t0) / iters
    t = torch.tensor([local], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def run(args) -> int:
    rank = int(os.environ["RANK"])
    nranks = int(os.environ["WORLD_SIZE"])
    timeout = timedelta(seconds=args.pg_timeout)
    dist.init_process_group("gloo", rank=rank, world_size=nranks, timeout=timeout)
    try:
        if args.backends is None:
            args.backends = variants.default_backends(args.device, nranks)
        groups = {b: variants.new_group(b, timeout) for b in args.backends}
        say = rank == 0
        device = torch.device("cpu")
        if args.device == "cuda":
            device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank)) % torch.cuda.device_count())
            torch.cuda.set_device(device)
        nparams = 3 * (args.size * args.size + args.size)
        if say:
            print(
                f"# gonccl.bench ddp: ToyModel 3 x Linear({args.size},{args.size}) ({nparams * 4 / 1e6:.1f} MB of "
                f"fp32 gradients), batch {args.batch}, {nranks} ranks, DDP bucket_cap_mb=25, "
                f"{args.warmup_iters} warm-up + {args.iters} timed steps, {args.rounds} round(s), "
                f"intra-op threads per rank {torch.get_num_threads()}, tensors on {args.device}; "
                f"time = max over ranks",
                flush=True,
            )
        times: dict[str, list[float]] = {b: [] for b in groups}
        for rnd in range(args.rounds):
            for b, g in groups.items():
                sec = _time_steps(g, args.size, args.batch, args.warmup_iters, args.iters, seed=1234,
                                  device=device)
                times[b].append(sec)
                if say:
                    print(f"#   round {rnd}: {b:>13}  {sec * 1e3:10.1f} ms/step", flush=True)
        if say:
            best = {b: min(v) for b, v in times.items()}
            print(f"# {'backend':>13}  {'ms/step':>10}  (best round)", flush=True)
            for b, sec in best.items():
                print(f"  {b:>13}  {sec * 1e3:10.1f}", flush=True)
            for name in variants.ratio_pairs(list(best)):
                r = best[name] / best["gloo"]
                print(f"# ratio {name}/gloo time per step: {r:.3f} ({'faster' if r < 1 else 'slower'} "
                      f"than gloo by {abs(1 - r) * 100:.1f}%)", flush=True)
            if args.json:
                from gonccl.bench import report

                report.write_json(args.json, {
                    "tool": "gonccl.bench", "mode": "ddp", "nranks": nranks, "size": args.size,
                    "batch": args.batch, "device": args.device, "iters": args.iters, "warmup_iters": args.warmup_iters,
                    "rounds": args.rounds, "sec_per_step": times,
                    "best_ms_per_step": {b: s * 1e3 for b, s in best.items()},
                })
                print(f"# wrote {args.json}", flush=True)
        return 0
    finally:
        dist.destroy_process_group()

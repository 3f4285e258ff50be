"""One rank of the FSDP2 test: a small model sharded with fully_shard on CPU, trained for
a few steps on the default group's backend (argv[2]: "gonccl" or "gloo"); the losses and
the final full parameters go into the report, and tests/test_fsdp.py compares the two runs.

usage: fsdp_worker.py REPORT_DIR BACKEND   (env: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)
"""

from __future__ import annotations

import math
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn

from _common import Checker

RANK = int(os.environ["RANK"])
WS = int(os.environ["WORLD_SIZE"])


def main():
    report_dir, backend = sys.argv[1], sys.argv[2]
    ck = Checker(report_dir, RANK)
    with ck.section("init"):
        dist.init_process_group(backend, timeout=timedelta(seconds=60))
    with ck.section("fsdp"):
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh("cpu", (WS,))
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(24, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 5))
        for layer in model:
            if isinstance(layer, nn.Linear):
                fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        g = torch.Generator().manual_seed(1000 + RANK)
        losses = []
        for _ in range(5):
            x = torch.randn(16, 24, generator=g)
            y = torch.randn(16, 5, generator=g)
            loss = ((model(x) - y) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            # the mean loss over ranks (through the backend under test)
            t = loss.detach().clone()
            dist.all_reduce(t)
            losses.append(t.item() / WS)
        full = [p.full_tensor().reshape(-1) for p in model.parameters()]
        # The comparison between backends is the test's; here, what one run must satisfy.
        want = sum(i * o + o for i, o in ((24, 64), (64, 64), (64, 5)))
        ck.check(sum(f.numel() for f in full) == want, f"unsharded parameters hold {sum(f.numel() for f in full)} "
                 f"elements, want {want}")
        ck.check(all(bool(torch.isfinite(f).all()) for f in full), "non-finite unsharded parameters")
        ck.check(all(math.isfinite(x) for x in losses), f"non-finite losses {losses}")
        ck.data("losses", losses)
        ck.data("params", torch.cat(full).tolist())
    with ck.section("shutdown"):
        dist.destroy_process_group()
    ck.finish()


if __name__ == "__main__":
    main()

"""One rank of examples/ddp_example.py, run unchanged, with checks around it.

usage: ddp_example_wrapper.py REPORT_DIR EXAMPLE_PATH     (cwd: where the trace goes)

Before the example runs, each rank seeds torch differently, so the ranks start from
different weights and train on different random data: only DDP's initial broadcast
and its gradient all_reduce (both through gonccl) can make them agree. The wrapper
wraps DistributedDataParallel.__init__ (to capture the model and checksum its weights
before and after DDP's broadcast) and .forward (to count steps), runs the example's
demo_basic() as is, then all_gathers checksums of the final weights and gradients
over the process group the example left behind and records whether every rank holds
bit-identical values.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from _common import Checker

RANK = int(os.environ["RANK"])
WS = int(os.environ["WORLD_SIZE"])
TRACE = "trace_ddp_example.json"
CK: Checker
captured: dict = {"forward_calls": 0}


def checksum(tensors) -> tuple[float, bytes]:
    """(sum in float64, sha256 of the raw bytes) of a sequence of tensors."""
    h = hashlib.sha256()
    total = 0.0
    for t in tensors:
        t = t.detach().contiguous()
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
        total += float(t.double().sum())
    return total, h.digest()


def gather_checksums(name: str, cs: tuple[float, bytes]) -> list[tuple[float, bytes]]:
    """Every rank's checksum, through the example's (gonccl) default group."""
    s = torch.tensor([cs[0]], dtype=torch.float64)
    d = torch.tensor(list(cs[1]), dtype=torch.uint8)
    ss = [torch.zeros(1, dtype=torch.float64) for _ in range(WS)]
    ds = [torch.zeros(32, dtype=torch.uint8) for _ in range(WS)]
    dist.all_gather(ss, s)
    dist.all_gather(ds, d)
    out = [(float(a), bytes(b.tolist())) for a, b in zip(ss, ds)]
    CK.check(out[RANK] == (cs[0], cs[1]), f"{name}: all_gather returned a different checksum for this rank")
    CK.data(name, [[a, b.hex()] for a, b in out])
    return out


def install_wrappers() -> None:
    orig_init = DDP.__init__
    orig_forward = DDP.forward

    def init(self, module, *args, **kwargs):
        captured["before_ddp"] = checksum(list(module.parameters()))
        orig_init(self, module, *args, **kwargs)
        captured["ddp"] = self
        captured["after_ddp"] = checksum(list(module.parameters()))

    def forward(self, *args, **kwargs):
        captured["forward_calls"] += 1
        return orig_forward(self, *args, **kwargs)

    DDP.__init__ = init
    DDP.forward = forward


def main() -> None:
    global CK
    CK = Checker(sys.argv[1], RANK)
    example = sys.argv[2]
    with CK.section("run_example"):
        torch.manual_seed(1234 + 1000 * RANK)
        install_wrappers()
        spec = importlib.util.spec_from_file_location("ddp_example", example)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)  # defines demo_basic; __name__ is not __main__
        t0 = time.monotonic()
        mod.demo_basic()
        CK.data("seconds", time.monotonic() - t0)
        CK.check("ddp" in captured, "demo_basic() never constructed DistributedDataParallel")
        CK.check(dist.is_initialized() and dist.get_backend() == "gonccl",
                 "the example's gonccl process group is not there after demo_basic()")
    if "ddp" not in captured or not dist.is_initialized():
        CK.finish()
        return

    with CK.section("steps_and_trace"):
        CK.check(captured["forward_calls"] == 10, f"{captured['forward_calls']} training steps ran, expected 10")
        CK.data("forward_calls", captured["forward_calls"])
        if RANK == 0:
            CK.check(os.path.isfile(TRACE), f"rank 0 exported no {TRACE} in {os.getcwd()}")
            with open(TRACE) as f:
                text = f.read()
            CK.check("gonccl:all_reduce" in text, f"{TRACE} does not mention gonccl:all_reduce")
            events = json.loads(text).get("traceEvents", [])
            n = sum(1 for e in events if e.get("name") == "gonccl:all_reduce")
            CK.data("gonccl_all_reduce_events", n)
            # DDP all_reduces every gradient bucket once per step.
            CK.check(n >= 10, f"{TRACE} has {n} gonccl:all_reduce events, expected at least one per step (10)")

    with CK.section("checksums"):
        ddp = captured["ddp"]
        params = list(ddp.module.parameters())
        before = gather_checksums("before_ddp", captured["before_ddp"])
        after = gather_checksums("after_ddp", captured["after_ddp"])
        final = gather_checksums("final_params", checksum(params))
        grads = gather_checksums("final_grads", checksum([p.grad for p in params]))
        if WS > 1:
            CK.check(len({b for _, b in before}) == WS,
                     "the ranks' weights were equal before DDP (the test's seeding did not work)")
        CK.check(len({b for _, b in after}) == 1, f"weights differ across ranks after DDP's broadcast: {after}")
        CK.check(after[RANK] == after[0], "this rank did not get rank 0's weights from DDP's broadcast")
        CK.check(len({b for _, b in final}) == 1 and len({s for s, _ in final}) == 1,
                 f"final weights are not bit-identical across ranks: {[(s, b.hex()[:16]) for s, b in final]}")
        CK.check(len({b for _, b in grads}) == 1,
                 f"final gradients are not bit-identical across ranks: {[(s, b.hex()[:16]) for s, b in grads]}")
        CK.check(final[0][1] != after[0][1], "the weights did not change in 10 steps of training")
    CK.finish()


if __name__ == "__main__":
    main()

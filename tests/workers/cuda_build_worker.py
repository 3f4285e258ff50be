"""One rank of the CUDA-build test: the CPU path of an extension built with CUDA
support, and (only where torch sees a GPU) the CUDA path on one device shared by
every rank.

usage: cuda_build_worker.py REPORT_DIR      (env: RANK, WORLD_SIZE, MASTER_*)

Sections
  cpu             all_reduce / broadcast / all_gather on CPU tensors give the exact
                  expected values, and the backend says it was built with CUDA support
                  iff torch has CUDA;
  cuda_one_device (GPU only) every rank uses cuda:0: all_reduce, then a kernel on the
                  caller's stream reading the result after work.wait(); the Work's
                  future completes with the tensor; mixed CPU/CUDA tensors are refused.
  cuda_ordering   (GPU only) issue 13's stream-ordering bugs, each read right away on
                  the GPU: a blocking all_reduce of 64 MiB then a check on the default
                  stream, 10 times; all_gather into a list of separate tensors; two
                  chained async ops (the second reads the first's list output); the same
                  on a side stream; an op while the current stream is being captured
                  into a CUDA graph is refused; a send/recv ring.
"""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist

from _common import Checker

RANK = int(os.environ["RANK"])
WORLD = int(os.environ["WORLD_SIZE"])


def cuda_ordering(ck: Checker, dev: torch.device) -> None:
    total = float(sum(range(1, WORLD + 1)))
    big = 16 << 20  # 64 MiB of float32
    for i in range(10):
        t = torch.full((big,), float(RANK + 1), device=dev)
        dist.all_reduce(t)  # blocking: the default stream reads it next
        ok = bool((t == total).all())
        ck.check(ok, f"round {i}: a check on the default stream right after all_reduce saw stale data")
        if not ok:
            break
    x = torch.full((1000,), float(RANK), device=dev)
    outs = [torch.empty(1000, device=dev) for _ in range(WORLD)]
    dist.all_gather(outs, x)
    ck.check(all(bool((o == r).all()) for r, o in enumerate(outs)), "all_gather into a list")
    for side in (False, True):
        stream = torch.cuda.Stream(device=dev) if side else torch.cuda.current_stream(dev)
        with torch.cuda.stream(stream):
            outs = [torch.full((1000,), -1.0, device=dev) for _ in range(WORLD)]
            w1 = dist.all_gather(outs, torch.full((1000,), float(RANK + 1), device=dev), async_op=True)
            w2 = dist.all_reduce(outs[WORLD - 1], async_op=True)  # reads w1's copy-out
            w2.wait()
            w1.wait()
            ok = bool((outs[WORLD - 1] == WORLD * WORLD).all())
        ck.check(ok, f"chained async ops (side stream {side}): {outs[WORLD - 1][:4].tolist()}")
    s = torch.cuda.Stream(device=dev)
    g = torch.cuda.CUDAGraph()
    y = torch.ones(4, device=dev)
    torch.cuda.synchronize(dev)
    try:
        with torch.cuda.graph(g, stream=s):
            dist.all_reduce(y)
        ck.check(False, "all_reduce under CUDA graph capture was accepted")
    except ValueError as e:
        ck.check("captured into a CUDA graph" in str(e), f"capture: {e}")
    except RuntimeError as e:  # the capture itself failing after the refusal
        ck.check("captured into a CUDA graph" in str(e), f"capture: {e}")
    nxt, prv = (RANK + 1) % WORLD, (RANK - 1) % WORLD
    send = torch.full((5000,), float(RANK), device=dev)
    recv = torch.empty(5000, device=dev)
    ops = [dist.P2POp(dist.isend, send, nxt), dist.P2POp(dist.irecv, recv, prv)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    ck.check(bool((recv == prv).all()), f"send/recv ring: {recv[:4].tolist()}")


def main() -> None:
    ck = Checker(sys.argv[1], RANK)
    import gonccl
    from gonccl import _C

    dist.init_process_group("gonccl")
    with ck.section("cpu"):
        ck.check(_C.cuda_support() == (torch.version.cuda is not None),
                 f"cuda_support() {_C.cuda_support()} with torch.version.cuda {torch.version.cuda}")
        t = torch.arange(6, dtype=torch.float32) + RANK
        dist.all_reduce(t)
        want = torch.arange(6, dtype=torch.float32) * WORLD + sum(range(WORLD))
        ck.check(torch.equal(t, want), f"all_reduce: {t} != {want}")
        b = torch.full((5,), float(RANK))
        dist.broadcast(b, src=WORLD - 1)
        ck.check(torch.equal(b, torch.full((5,), float(WORLD - 1))), f"broadcast: {b}")
        out = [torch.empty(3, dtype=torch.int64) for _ in range(WORLD)]
        dist.all_gather(out, torch.full((3,), RANK, dtype=torch.int64))
        ck.check(all(torch.equal(o, torch.full((3,), r, dtype=torch.int64)) for r, o in enumerate(out)),
                 f"all_gather: {out}")
        ck.data("gonccl_version", gonccl.version())

    if torch.cuda.is_available():
        with ck.section("cuda_one_device"):
            dev = torch.device("cuda", 0)
            t = torch.full((1 << 16,), float(RANK + 1), device=dev)
            work = dist.all_reduce(t, async_op=True)
            work.wait()
            total = float(sum(range(1, WORLD + 1)))
            ck.check(bool((t * 2 == 2 * total).all()), "all_reduce on cuda:0 gave the wrong sum")
            fut = dist.all_reduce(torch.ones(4, device=dev), async_op=True).get_future()
            got = fut.wait()[0]
            ck.check(got.device == dev and bool((got == WORLD).all()), f"future value {got}")
            try:
                dist.all_gather([torch.empty(2) for _ in range(WORLD)], torch.ones(2, device=dev))
                ck.check(False, "mixed CPU and CUDA tensors were accepted")
            except ValueError as e:
                ck.check("tensors must all be on CPU or all on CUDA" in str(e), f"mixed devices: {e}")
        with ck.section("cuda_ordering"):
            cuda_ordering(ck, torch.device("cuda", 0))
    dist.barrier()
    dist.destroy_process_group()
    ck.finish()


if __name__ == "__main__":
    main()

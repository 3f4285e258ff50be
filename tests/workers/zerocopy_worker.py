"""Zero-copy collectives on backend-allocated CPU tensors (tests/test_zerocopy.py): one
run of WORLD_SIZE ranks on one host, GONCCL_ZEROCOPY_THRESHOLD lowered by the test so
that small tensors take the path. Each section runs on a gonccl group of its own whose
flight recorder is dumped when the group is destroyed, so the section can check which
algorithm every op ran with ("zerocopy" or not), beside its values. Sections:

  reductions  all_reduce on allocate_tensor tensors for every dtype x reduce op
              (PREMUL_SUM too) equals the local reference, and ran zero-copy.
  collectives all_gather_into_tensor, all_gather into views of one allocated tensor,
              reduce_scatter_tensor and broadcast from every root, in place and not:
              right, and zero-copy.
  views       a contiguous view at an offset into an allocated tensor runs zero-copy;
              a non-contiguous view (staged through an ordinary tensor) and an op with
              one rank's tensor ordinary run the usual path; all are right.
  reuse       back-to-back all_reduce / all_gather / broadcast on the same allocated tensors, each
              rank checking its result and overwriting its input the moment an op
              returns: every result right.
  faults      GONCCL_TEST_ZEROCOPY_FAULT on a group of its own: skip-peer (a peer's
              data left out) gives wrong all_reduce results and skip-done (no wait for
              the peers to be finished with this rank's buffers) wrong results in the
              reuse loop: the checks above would catch both.
"""

from __future__ import annotations

import glob
import json
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist

from _common import Checker
from _reference import FLOATS, OPS, make_input, mismatch, reduce_reference, valid_ops

RANK = int(os.environ["RANK"])
WS = int(os.environ["WORLD_SIZE"])
CPU = torch.device("cpu")
CK: Checker
REPORT_DIR = ""
DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64, torch.uint8,
          torch.int8)
N = 3000  # elements: above the test's threshold for every dtype, with a shard per rank


class Group:
    """A gonccl group of its own whose flight recorder lands in a directory of its own
    (GONCCL_TRACE_DUMP_DIR, read when the communicator is made); algos() reads it back
    after close()."""

    def __init__(self, name: str, **env):
        self.dir = os.path.join(REPORT_DIR, f"trace-{name}-rank{RANK}")
        os.makedirs(self.dir, exist_ok=True)
        saved = {k: os.environ.get(k) for k in ["GONCCL_TRACE_DUMP_DIR", *env]}
        os.environ.update({"GONCCL_TRACE_DUMP_DIR": self.dir, **env})
        try:
            self.pg = dist.new_group(backend="gonccl", timeout=timedelta(seconds=60))
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        self.backend = self.pg._get_backend(CPU)

    def alloc(self, n: int, dtype=torch.float32) -> torch.Tensor:
        return self.backend.allocate_tensor(n, dtype=dtype, device=CPU)

    def close(self) -> list[str]:
        """Destroys the group and returns the algorithm of each of its ops, in order."""
        dist.destroy_process_group(self.pg)
        files = glob.glob(os.path.join(self.dir, f"gonccl_trace_*_rank{RANK}_pid{os.getpid()}.json"))
        if not CK.check(len(files) == 1, f"expected one flight-recorder file in {self.dir}, found {files}"):
            return []
        with open(files[0]) as f:
            return [o["algo"] for o in json.load(f)["ops"]]


def inputs(dtype, opname: str, seed: int, n: int = N) -> list[torch.Tensor]:
    return [make_input(dtype, n, opname, WS, seed * 1000 + r) for r in range(WS)]


def expect(what: str, got: torch.Tensor, ref) -> None:
    bad = mismatch(got, ref)
    CK.check(bad is None, lambda: f"{what}: {bad}")


def reductions() -> None:
    g = Group("reductions")
    seed = 0
    for dtype in DTYPES:
        ops = valid_ops(dtype) + (["PREMUL"] if dtype in FLOATS else [])
        for opname in ops:
            seed += 1
            xs = inputs(dtype, "SUM" if opname == "PREMUL" else opname, seed)
            if opname == "PREMUL":
                op, ref = dist._make_nccl_premul_sum(0.5), reduce_reference(xs, "PREMUL", dtype, premul=0.5)
            else:
                op, ref = OPS[opname], reduce_reference(xs, opname, dtype)
            t = g.alloc(N, dtype)
            t.copy_(xs[RANK])
            dist.all_reduce(t, op=op, group=g.pg)
            expect(f"all_reduce {opname} {dtype}", t, ref)
    algos = g.close()
    CK.check(algos and all(a == "zerocopy" for a in algos), f"not every all_reduce ran zero-copy: {algos}")
    CK.data("ops", len(algos))


def collectives() -> None:
    g = Group("collectives")
    for in_place in (False, True):
        xs = inputs(torch.float32, "SUM", 50 + in_place, N * WS)
        want_rs = reduce_reference(xs, "SUM", torch.float32)
        # reduce_scatter_tensor
        big = g.alloc(N * WS)
        big.copy_(xs[RANK])
        out = big[RANK * N:(RANK + 1) * N] if in_place else g.alloc(N)
        dist.reduce_scatter_tensor(out, big, group=g.pg)
        expect(f"reduce_scatter_tensor in_place={in_place}", out,
               ("close", want_rs[1][RANK * N:(RANK + 1) * N], want_rs[2][RANK * N:(RANK + 1) * N]))
        # all_gather_into_tensor
        out = g.alloc(N * WS)
        inp = out[RANK * N:(RANK + 1) * N] if in_place else g.alloc(N)
        inp.copy_(xs[RANK][:N])
        dist.all_gather_into_tensor(out, inp, group=g.pg)
        CK.check(torch.equal(out, torch.cat([x[:N] for x in xs])), f"all_gather_into_tensor in_place={in_place}")
        # all_gather into a list of views of one allocated tensor
        flat = g.alloc(N * WS)
        outs = list(flat.split(N))
        inp = g.alloc(N)
        inp.copy_(xs[RANK][N:2 * N])
        dist.all_gather(outs, inp, group=g.pg)
        CK.check(all(torch.equal(outs[r], xs[r][N:2 * N]) for r in range(WS)), "all_gather into views")
        # broadcast from every root
        for root in range(WS):
            t = g.alloc(N)
            t.copy_(xs[RANK][:N])
            dist.broadcast(t, src=root, group=g.pg)
            CK.check(torch.equal(t, xs[root][:N]), f"broadcast from {root}")
    algos = g.close()
    CK.check(algos and all(a == "zerocopy" for a in algos), f"not every op ran zero-copy: {algos}")
    CK.data("ops", len(algos))


def views() -> None:
    g = Group("views")
    xs = inputs(torch.float32, "SUM", 70)
    want = reduce_reference(xs, "SUM", torch.float32)
    # A contiguous view at an offset (3 elements in) of a larger allocated tensor.
    base = g.alloc(N + 10)
    base.fill_(-7)
    v = base[3:3 + N]
    v.copy_(xs[RANK])
    dist.all_reduce(v, group=g.pg)
    expect("all_reduce on an offset view", v, want)
    CK.check(torch.equal(base[:3], torch.full((3,), -7.0)) and torch.equal(base[3 + N:], torch.full((7,), -7.0)),
             "all_reduce on a view wrote outside it")
    # A non-contiguous view (every other element): staged through an ordinary tensor.
    base = g.alloc(2 * N)
    base.fill_(-7)
    v = base[::2]
    v.copy_(xs[RANK])
    dist.all_reduce(v, group=g.pg)
    expect("all_reduce on a strided view", v, want)
    CK.check(torch.equal(base[1::2], torch.full((N,), -7.0)), "all_reduce on a strided view wrote between")
    # One rank's tensor ordinary, the others' allocated, for each rank in turn.
    for odd in range(WS):
        t = torch.empty(N) if RANK == odd else g.alloc(N)
        t.copy_(xs[RANK])
        dist.all_reduce(t, group=g.pg)
        expect(f"all_reduce with rank {odd}'s tensor ordinary", t, want)
    algos = g.close()
    want_algos = ["zerocopy", "not"] + ["not"] * WS
    got = [a if a == "zerocopy" else "not" for a in algos]
    CK.check(got == want_algos, f"algorithms {algos}, expected {want_algos} (zerocopy / anything else)")


def reuse_loop(g: Group, iters: int, n: int = 1 << 20) -> int:
    """Back-to-back ops on the same allocated tensors; each rank checks every result and
    writes its next input the moment an op returns (the expected values are made
    beforehand, so that nothing slows the rank down in between). The broadcast's root,
    which has nothing to do but wait, overwrites its tensor from the end, where the
    others copy from last. Returns the wrong results seen."""
    wrong = 0
    t, gathered, b = g.alloc(n), g.alloc(n * WS), g.alloc(4 * n)
    mine = gathered[RANK * n:(RANK + 1) * n]
    idx = torch.arange(n, dtype=torch.float32) % 7
    ins = [idx + (RANK + 1) * (it + 1) for it in range(iters + 1)]
    sums = [idx * WS + sum(r + 1 for r in range(WS)) * (it + 1) for it in range(iters)]
    blocks = [idx + 100 * RANK + it for it in range(iters + 1)]
    gathers = [torch.cat([idx + 100 * r + it for r in range(WS)]) for it in range(iters)]
    casts = [torch.full((4 * n,), float(it)) for it in range(iters + 1)]
    t.copy_(ins[0])
    mine.copy_(blocks[0])
    b.copy_(casts[0])
    for it in range(iters):
        dist.all_reduce(t, group=g.pg)
        wrong += not torch.equal(t, sums[it])
        t.copy_(ins[it + 1])
        dist.all_gather_into_tensor(gathered, mine, group=g.pg)
        wrong += not torch.equal(gathered, gathers[it])
        mine.copy_(blocks[it + 1])
        dist.broadcast(b, src=0, group=g.pg)
        if RANK == 0:
            b[2 * n:].copy_(casts[it + 1][2 * n:])
            b[:2 * n].copy_(casts[it + 1][:2 * n])
        else:
            wrong += not torch.equal(b, casts[it])
            b.copy_(casts[it + 1])
    return wrong


def reuse() -> None:
    g = Group("reuse")
    wrong = reuse_loop(g, 10)
    CK.check(wrong == 0, f"{wrong} wrong results when buffers are reused at once")
    algos = g.close()
    CK.check(algos and all(a == "zerocopy" for a in algos), f"not every op ran zero-copy: {set(algos)}")


def faults() -> None:
    g = Group("skip-peer", GONCCL_TEST_ZEROCOPY_FAULT="skip-peer")
    xs = inputs(torch.float32, "SUM", 90)
    t = g.alloc(N)
    t.copy_(xs[RANK])
    dist.all_reduce(t, group=g.pg)
    CK.check(mismatch(t, reduce_reference(xs, "SUM", torch.float32)) is not None,
             "the skip-peer fault went unnoticed: all_reduce was right without one peer's data")
    g.close()
    g = Group("skip-done", GONCCL_TEST_ZEROCOPY_FAULT="skip-done")
    wrong = reuse_loop(g, 10)
    # Every rank must see the loop go wrong: each reports what it saw to all.
    seen = torch.tensor([wrong])
    dist.all_reduce(seen)
    CK.data("wrong_results_with_skip_done", int(seen.item()))
    CK.check(seen.item() > 0, "the skip-done fault went unnoticed: reusing buffers at once gave no wrong result")
    g.close()


def main() -> None:
    global CK, REPORT_DIR
    REPORT_DIR = sys.argv[1]
    CK = Checker(REPORT_DIR, RANK)
    dist.init_process_group("gloo", rank=RANK, world_size=WS, timeout=timedelta(seconds=60))
    has_alloc = hasattr(dist.ProcessGroup, "allocate_tensor") or hasattr(torch._C._distributed_c10d.Backend,
                                                                         "allocate_tensor")
    for name, fn in (("reductions", reductions), ("collectives", collectives), ("views", views), ("reuse", reuse),
                     ("faults", faults)):
        with CK.section(name):
            if not has_alloc:
                CK.skip(f"torch {torch.__version__} has no Backend.allocate_tensor")
            else:
                fn()
        dist.barrier()
    dist.destroy_process_group()
    CK.finish()


if __name__ == "__main__":
    main()

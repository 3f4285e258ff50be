"""torch 2.12-2.15's Backend contract on gonccl (tests/test_backend215.py): one run of
WORLD_SIZE ranks, sections:

  estimator   inside dist._time_estimator collectives are recorded, not run (the
              tensors keep their values, the group stays in step: a real op after it
              is right); the estimate is positive, grows with the size, and two ops
              cost their sum. Before torch 2.15 torch refuses it (no
              start/endTimeEstimate to call). A group made while
              GONCCL_CALIBRATION names a file with an entry for this host and size
              estimates from its times; GONCCL_CALIBRATION=none gives the built-in
              rates.
  alloc       allocate_tensor on CPU returns a tensor in gonccl's shared memory (a
              memfd mapping named gonccl-alloc in /proc/self/maps); all_reduce,
              all_gather and reduce_scatter on such tensors equal local references.
  eager       eager_connect_single_device leaves this rank connected to every peer.
  merge       each rank's own one-rank gonccl group merges with the others'
              (merge_remote_group over a new store): the merged group has every rank
              once and all_reduce on it is right.
  suspend     getMemoryStats is nonzero, suspend frees it all (zero), an op on the
              suspended group fails saying so, resume makes it work again.
"""

from __future__ import annotations

import os
import re
import sys
from datetime import timedelta

import torch
import torch.distributed as dist

import gonccl
from _common import Checker
from gonccl.bench import calibration
from _torch_since import TORCH

# The estimator's checks compare with the built-in rates: no calibration file of the
# machine's own (the calibration section makes its own).
os.environ["GONCCL_CALIBRATION"] = "none"
RANK = int(os.environ["RANK"])
WS = int(os.environ["WORLD_SIZE"])
CPU = torch.device("cpu")
CK: Checker
CK_DIR = sys.argv[1] if len(sys.argv) > 1 else "."


def values(rank: int, n: int) -> torch.Tensor:
    return (torch.arange(n, dtype=torch.float32) % 97) * (rank + 1)


def estimator() -> None:
    g = dist.group.WORLD
    if TORCH < (2, 15):
        try:
            with dist._time_estimator(group=g):
                pass
            CK.check(False, "torch < 2.15 estimated with gonccl")
        except (AttributeError, NotImplementedError, RuntimeError) as e:
            CK.check(True, "")
            CK.data("refusal", f"{type(e).__name__}: {e}")
        return
    t = values(RANK, 1024)
    before = t.clone()
    with dist._time_estimator(group=g) as est:
        w = dist.all_reduce(t, async_op=True)
    w.wait()
    CK.check(torch.equal(t, before), "all_reduce inside the estimator changed the tensor: it ran")
    one = est.estimated_time
    CK.check(one > 0, f"estimate {one} is not positive")
    with dist._time_estimator(group=g) as est2:
        dist.all_reduce(t)
        dist.all_reduce(t)
    CK.check(abs(est2.estimated_time - 2 * one) < 1e-3 * one + 1e-3,
             f"two all_reduces estimated {est2.estimated_time}, one {one}")
    series = {}
    for coll in ("all_reduce", "all_gather", "reduce_scatter"):
        prev = 0.0
        series[coll] = []
        for n in (2, 256, 16384, 1 << 20):
            x = torch.ones(n * (WS if coll == "reduce_scatter" else 1))
            out = torch.empty(n * WS) if coll == "all_gather" else torch.empty(n)
            with dist._time_estimator(group=g) as e:
                if coll == "all_reduce":
                    dist.all_reduce(x)
                elif coll == "all_gather":
                    dist.all_gather_into_tensor(out, x)
                else:
                    dist.reduce_scatter_tensor(out, x)
            series[coll].append(e.estimated_time)
            CK.check(e.estimated_time > prev, f"{coll}: {n} floats estimated {e.estimated_time} <= {prev}")
            prev = e.estimated_time
    CK.data("estimates_us", series)
    # Nothing ran, so every rank is still in step: a real all_reduce is right.
    t = values(RANK, 1024)
    dist.all_reduce(t)
    want = sum(values(r, 1024) for r in range(WS))
    CK.check(torch.equal(t, want), "all_reduce after the estimator is wrong")
    calibrated(series)


# Synthetic measurements for the calibration check: far slower than anything the
# built-in rates give (1 ms a call, 10 MB/s), so an estimate that ignored them shows.
def synthetic_us(nbytes: int) -> float:
    return 1000.0 + nbytes / 10.0


def estimate(g, coll: str, n: int) -> float:
    x = torch.ones(n * (WS if coll == "reduce_scatter" else 1))
    out = torch.empty(n * WS) if coll == "all_gather" else torch.empty(n)
    with dist._time_estimator(group=g) as e:
        if coll == "all_reduce":
            dist.all_reduce(x, group=g)
        elif coll == "all_gather":
            dist.all_gather_into_tensor(out, x, group=g)
        else:
            dist.reduce_scatter_tensor(out, x, group=g)
    return e.estimated_time


def calibrated(builtin: dict) -> None:
    """A group made while GONCCL_CALIBRATION names a file with an entry for this host,
    size and transport estimates from that file's times; an entry for another size
    is ignored (the built-in rates)."""
    file = os.path.join(CK_DIR, "calibration.json")
    sizes = [4 << k for k in range(0, 23, 2)]  # 4 B .. 16 MiB
    if RANK == 0:
        for n in (WS, WS + 1):  # this group's entry, and one that must not be used
            key = {**calibration.key(WS), "nranks": n}
            calibration.write(file, {**key, "measured": "test", "points": [
                {"op": c, "bytes": b, "us": synthetic_us(b) * (3 if n != WS else 1)}
                for c in ("all_reduce", "all_gather", "reduce_scatter") for b in sizes]})
    dist.barrier()
    groups = {}
    for name, value in (("calibrated", file), ("none", "none")):
        os.environ["GONCCL_CALIBRATION"] = value
        try:
            groups[name] = dist.new_group(backend="gonccl")
            dist.barrier(group=groups[name])  # the communicator exists, its settings read
        finally:
            os.environ["GONCCL_CALIBRATION"] = "none"
    got = {}
    for coll in ("all_reduce", "all_gather", "reduce_scatter"):
        got[coll] = []
        for i, n in enumerate((2, 256, 16384, 1 << 20)):
            nbytes = 4 * n
            us = estimate(groups["calibrated"], coll, n)
            got[coll].append(us)
            want = synthetic_us(nbytes)
            # The model's shape is not the file's (one rate for every collective's
            # bytes), so the fit is near, not exact; the built-in rates are far off.
            CK.check(want / 2 < us < want * 2,
                     f"{coll} of {nbytes} bytes: calibrated estimate {us:.1f} us, the file says {want:.1f}")
            plain = estimate(groups["none"], coll, n)
            CK.check(abs(plain - builtin[coll][i]) < 1e-3 * plain,
                     f"{coll} of {nbytes} bytes with GONCCL_CALIBRATION=none: {plain}, built-in {builtin[coll][i]}")
    CK.data("calibrated_us", got)
    for g in groups.values():
        dist.destroy_process_group(g)


def in_shared_memory(t: torch.Tensor) -> bool:
    addr = t.data_ptr()
    with open("/proc/self/maps") as f:
        for line in f:
            if "gonccl-alloc" not in line:
                continue
            lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
            if lo <= addr < hi:
                return True
    return False


def alloc() -> None:
    b = dist.group.WORLD._get_backend(CPU)
    CK.check(b.supports_tensor_alloc(CPU), "supports_tensor_alloc(cpu) is False")
    n = 10000

    def shared(k):
        return b.allocate_tensor(k, dtype=torch.float32, device=CPU)

    t = shared(n)
    CK.check(t.numel() == n and t.dtype == torch.float32 and t.device == CPU, f"allocate_tensor gave {t}")
    CK.check(in_shared_memory(t), "allocate_tensor's tensor is not in gonccl's shared memory")
    CK.check(not in_shared_memory(torch.empty(n)), "an ordinary tensor counted as shared memory")
    t.copy_(values(RANK, n))
    dist.all_reduce(t)
    CK.check(torch.equal(t, sum(values(r, n) for r in range(WS))), "all_reduce on an allocated tensor is wrong")
    x, out = shared(n), shared(n * WS)
    x.copy_(values(RANK, n))
    dist.all_gather_into_tensor(out, x)
    CK.check(torch.equal(out, torch.cat([values(r, n) for r in range(WS)])), "all_gather on allocated tensors")
    big, small = shared(n * WS), shared(n)
    big.copy_(values(RANK, n * WS))
    dist.reduce_scatter_tensor(small, big)
    want = sum(values(r, n * WS) for r in range(WS))[RANK * n:(RANK + 1) * n]
    CK.check(torch.equal(small, want), "reduce_scatter on allocated tensors is wrong")
    try:
        b.allocate_tensor(4, dtype=torch.float32, device=torch.device("meta"))
        CK.check(False, "allocate_tensor on the meta device did not fail")
    except (ValueError, RuntimeError) as e:
        CK.check("CPU tensors only" in str(e), f"unclear refusal: {e}")


def eager() -> None:
    g = dist.new_group(backend="gonccl")
    b = g._get_backend(CPU)
    b.eager_connect_single_device(CPU)
    CK.check(gonccl._C._connected_peers(b) == WS - 1,
             f"after eager connect: {gonccl._C._connected_peers(b)} peers of {WS - 1}")
    dist.destroy_process_group(g)


def merge() -> None:
    singles = [dist.new_group([r], backend="gonccl") for r in range(WS)]
    mine = singles[RANK]
    port = [0]
    if RANK == 0:
        store = dist.TCPStore("127.0.0.1", 0, WS, is_master=True, timeout=timedelta(seconds=30),
                             wait_for_workers=False)
        port = [store.port]
    dist.broadcast_object_list(port, src=0)
    if RANK != 0:
        store = dist.TCPStore("127.0.0.1", port[0], WS, is_master=False, timeout=timedelta(seconds=30))
    merged = mine.merge_remote_group(store, WS, timedelta(seconds=30))
    CK.check(merged.size() == WS, f"merged group of size {merged.size()}")
    ranks = torch.zeros(WS, dtype=torch.int64)
    ranks[merged.rank()] = RANK
    merged.allreduce([ranks]).wait()
    CK.check(sorted(ranks.tolist()) == list(range(WS)), f"merged ranks map to {ranks.tolist()}")
    t = values(RANK, 4096)
    merged.allreduce([t]).wait()
    CK.check(torch.equal(t, sum(values(r, 4096) for r in range(WS))), "all_reduce on the merged group")
    CK.data("merged_order", ranks.tolist())
    merged.shutdown()
    dist.barrier()
    for s in singles:
        if s is not None and s != dist.GroupMember.NON_GROUP_MEMBER:
            dist.destroy_process_group(s)


def suspend() -> None:
    g = dist.new_group(backend="gonccl")
    b = g._get_backend(CPU)
    t = values(RANK, 1 << 16)
    dist.all_reduce(t, group=g)
    stats = gonccl._C._memory_stats(b)
    CK.data("held", stats)
    CK.check(stats["host_scratch_bytes"] > 0, f"no scratch held: {stats}")
    CK.check(stats["shm_ring_bytes"] > 0, f"no shared-memory rings held: {stats}")
    gonccl._C._suspend(b)
    freed = gonccl._C._memory_stats(b)
    CK.data("suspended", freed)
    CK.check(all(v == 0 for v in freed.values()), f"suspended, still held: {freed}")
    try:
        dist.all_reduce(t, group=g)
        CK.check(False, "all_reduce on a suspended group ran")
    except Exception as e:  # noqa: BLE001 - the message is what is checked
        CK.check(re.search("suspended", str(e)) is not None, f"unclear error on a suspended group: {e}")
    dist.barrier()
    gonccl._C._resume(b)
    t = values(RANK, 1 << 16)
    dist.all_reduce(t, group=g)
    CK.check(torch.equal(t, sum(values(r, 1 << 16) for r in range(WS))), "all_reduce after resume is wrong")
    CK.check(gonccl._C._memory_stats(b)["host_scratch_bytes"] > 0, "resume did not restore the scratch")
    dist.destroy_process_group(g)


def main() -> None:
    global CK
    CK = Checker(sys.argv[1], RANK)
    dist.init_process_group("gonccl", rank=RANK, world_size=WS, timeout=timedelta(seconds=60))
    for name, fn in (("estimator", estimator), ("alloc", alloc), ("eager", eager), ("merge", merge),
                     ("suspend", suspend)):
        with CK.section(name):
            fn()
        dist.barrier()
    dist.destroy_process_group()
    CK.finish()


if __name__ == "__main__":
    main()

"""torch's reconfigure API on gonccl (tests/test_reconfigure.py), 4 processes:

phase 1  ranks 0, 1, 2 create the default group with enable_reconfigure (no
         communicator yet), exchange handles through the store and reconfigure
         (uuid 1) into a group of 3; collectives are exact.
phase 2  rank 2 SIGKILLs itself; ranks 0 and 1 see their all_reduce fail, naming the
         lost rank, and reconfigure (uuid 2) into a group of 2; exact.
phase 3  process 3, a newcomer started only now, creates its default group with
         enable_reconfigure and joins: ranks 0, 1 and it reconfigure (uuid 3) into a
         group of 3; exact. Every member agrees on the generation (epoch). The
         newcomer injects a late frame of the old generation (epoch 2) into every
         link of the new one (GONCCL_TEST_INJECT_STALE), shaped like the first
         all_reduce with a payload that would spoil it: the peers that read it drop
         it (stale_frames, a WARN line) and the collectives stay exact.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

from _common import Checker, exact_mismatch

RANK = int(os.environ["RANK"])
CK: Checker


def members_handles(store, uuid: int, names: list[int], mine: str) -> list[str]:
    store.set(f"h{uuid}/{RANK}", mine)
    return [store.get(f"h{uuid}/{n}").decode() for n in names]


def exact_collectives(be, tag: str, names: list[int]) -> None:
    """all_reduce, all_gather and broadcast through the backend (whose rank and size
    reconfigure changed), checked exactly against what every member contributes."""
    n, r = be.size(), be.rank()
    CK.check(
        n == len(names) and r == names.index(RANK), f"{tag}: rank {r} of {n}, want {names.index(RANK)} of {len(names)}"
    )
    mine = torch.arange(1000, dtype=torch.int64) * (RANK + 1) + RANK
    every = [torch.arange(1000, dtype=torch.int64) * (q + 1) + q for q in names]
    t = mine.clone()
    be.allreduce([t]).wait()
    bad = exact_mismatch(t, torch.stack(every).sum(0))
    CK.check(bad is None, f"{tag} all_reduce: {bad}")
    out = [[torch.empty_like(mine) for _ in range(n)]]
    be.allgather(out, [mine]).wait()
    for q in range(n):
        bad = exact_mismatch(out[0][q], every[q])
        CK.check(bad is None, f"{tag} all_gather[{q}]: {bad}")
    t = mine.clone()
    opts = dist.BroadcastOptions()
    opts.rootRank = n - 1
    be.broadcast([t], opts).wait()
    bad = exact_mismatch(t, every[n - 1])
    CK.check(bad is None, f"{tag} broadcast: {bad}")


def main() -> None:
    global CK
    report_dir = sys.argv[1]
    CK = Checker(report_dir, RANK)
    newcomer = RANK == 3
    if newcomer:  # a replacement process, started once the job has lost rank 2
        flag = os.path.join(report_dir, "phase2_done")
        deadline = time.monotonic() + 120
        while not os.path.exists(flag):
            if time.monotonic() > deadline:
                raise SystemExit("the others never finished phase 2")
            time.sleep(0.05)
    dist.init_process_group(
        "gonccl",
        init_method=f"file://{report_dir}/store",
        rank=RANK,
        world_size=4,
        timeout=timedelta(seconds=60),
        enable_reconfigure=True,
    )
    store = dist.distributed_c10d._get_default_store()
    pg = dist.group.WORLD
    be = pg._get_backend(torch.device("cpu"))
    with CK.section("setup"):
        CK.check(dist._supports_reconfigure(), "supports_reconfigure is false")
        handle = dist._get_reconfigure_handle()
        CK.check(handle.startswith("gonccl:"), f"handle {handle!r}")
        try:
            dist.all_reduce(torch.ones(4))
            CK.check(False, "a collective before the first reconfigure did not fail")
        except Exception as e:  # noqa: BLE001
            CK.check("reconfigure first" in str(e), f"unclear error before reconfigure: {e}")
    if not newcomer:
        with CK.section("phase1"):
            names = [0, 1, 2]
            dist._reconfigure(uuid=1, handles=members_handles(store, 1, names, handle)).wait()
            exact_collectives(be, "phase 1", names)
            CK.data("epoch", be.epoch)
        with CK.section("phase2"):
            if RANK == 2:
                with open(os.path.join(report_dir, "killed_at"), "w") as f:
                    f.write(repr(time.time()))
                os.kill(os.getpid(), signal.SIGKILL)
            err = None
            t = torch.ones(1 << 12)
            for _ in range(10**6):
                try:
                    dist.all_reduce(t)
                except Exception as e:  # noqa: BLE001
                    err = e
                    break
            t_err = time.time()
            CK.check(isinstance(err, dist.DistBackendError) and "rank 2" in str(err), f"phase 2 error: {err!r}")
            names = [0, 1]
            dist._reconfigure(uuid=2, handles=members_handles(store, 2, names, handle)).wait()
            t_ready = time.time()
            exact_collectives(be, "phase 2", names)
            CK.data("epoch", be.epoch)
            CK.data("times", {"t_error": t_err, "t_ready": t_ready})
            if RANK == 0:
                open(os.path.join(report_dir, "phase2_done"), "w").close()
    with CK.section("phase3"):
        if newcomer:  # read by Go when the communicator is made (C getenv)
            os.environ["GONCCL_TEST_INJECT_STALE"] = "1000"
        names = [0, 1, 3]
        dist._reconfigure(uuid=3, handles=set(members_handles(store, 3, names, handle))).wait()
        # A set lets the backend order the members: the handles, sorted.
        order = sorted(store.get(f"h3/{n}").decode() for n in names)
        CK.check(be.rank() == order.index(handle), f"phase 3: rank {be.rank()}, want {order.index(handle)}")
        names = [n for _, n in sorted((store.get(f"h3/{n}").decode(), n) for n in names)]
        exact_collectives(be, "phase 3", names)
        CK.data("epoch", be.epoch)
        CK.data("stale_frames", be.stale_frames)
    with CK.section("end"):
        dist.destroy_process_group()
    CK.finish()


if __name__ == "__main__":
    main()

"""Fault injection on 4 ranks (tests/test_faults.py): every survivor must name the rank
at fault, promptly.

Sections:
  timeout_missing_rank  rank 2 skips one all_reduce on a group with a 3 s timeout:
                        ranks 0, 1 and 3 raise DistBackendError within the timeout plus
                        a few seconds, naming the operation, its number and rank 2.
  mismatch_everywhere   rank 1 calls all_reduce with 2048 elements, the others 1024:
                        every rank's error names both sizes (not only the ranks that
                        read rank 1's frame).
  dataloader_fork       a DataLoader with forked workers after init works, and so does
                        the process group after it.
  kill9                 the last section: a loop of all_reduce in which rank 1 SIGKILLs
                        itself; ranks 0, 2 and 3 raise within 30 s naming rank 1 (the
                        group's timeout is 120 s, so only detection can explain it), then
                        destroy_process_group returns promptly and the process exits.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

from _common import Checker, scaled

RANK = int(os.environ["RANK"])
WS = int(os.environ["WORLD_SIZE"])
CK: Checker


def expect_error(what: str, fn, *, words=(), fast: float) -> str:
    t0 = time.monotonic()
    try:
        fn()
    except Exception as e:  # noqa: BLE001
        took = time.monotonic() - t0
        msg = f"{type(e).__name__}: {e}"
        CK.check(isinstance(e, dist.DistBackendError), f"{what}: raised {type(e).__name__}, not DistBackendError: {msg[:600]}")
        missing = [w for w in words if w.lower() not in str(e).lower()]
        CK.check(not missing, f"{what}: the message does not mention {missing}: {msg[:1500]}")
        CK.check(took < fast, f"{what}: took {took:.1f} s to raise (limit {fast:.0f} s)")
        CK.data(what, {"error": msg[:3000], "seconds": round(took, 3)})
        return msg
    CK.check(False, f"{what}: no exception was raised")
    return ""


def sec_timeout_missing_rank() -> None:
    g = dist.new_group(backend="gonccl", timeout=timedelta(seconds=3))
    t = torch.ones(1024)
    dist.all_reduce(t, group=g)  # operation #1 on g: everyone
    CK.check(bool((t == WS).all()), f"warm-up all_reduce gave {t[:4]}")
    if RANK != 2:
        expect_error("all_reduce #2 that rank 2 skips", lambda: dist.all_reduce(torch.ones(1024), group=g),
                     words=("missing: rank 2", "all_reduce #2", "rank 2 has not called"),
                     fast=scaled(3 + 20))  # the 3 s timeout, long before the default group's 60 s
    else:
        time.sleep(4)  # past the others' timeout
    dist.barrier()  # the default group is unharmed


def sec_mismatch_everywhere() -> None:
    g = dist.new_group(backend="gonccl", timeout=timedelta(seconds=20))
    n = 2048 if RANK == 1 else 1024
    expect_error("all_reduce 1024 vs 2048 elements", lambda: dist.all_reduce(torch.ones(n), group=g),
                 words=("1024", "2048"), fast=scaled(20))
    dist.barrier()


class Squares(torch.utils.data.Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        return torch.tensor([float(i * i)])


def sec_dataloader_fork() -> None:
    # Forked DataLoader workers after init (the Go runtime is running in the parent):
    # the children only run Python, so they must work and exit, and the parent's
    # process group must keep working afterwards.
    loader = torch.utils.data.DataLoader(Squares(), batch_size=8, num_workers=2,
                                         multiprocessing_context="fork")
    total = sum(float(b.sum()) for b in loader)
    CK.check(total == float(sum(i * i for i in range(64))), f"DataLoader with forked workers gave {total}")
    t = torch.full((8,), float(RANK))
    dist.all_reduce(t)
    CK.check(bool((t == sum(range(WS))).all()), f"all_reduce after forked DataLoader workers gave {t}")


def sec_kill9() -> None:
    g = dist.new_group(backend="gonccl", timeout=timedelta(seconds=120))
    t = torch.ones(1 << 16)

    def loop():
        for i in range(100000):
            if RANK == 1 and i == 50:
                os.kill(os.getpid(), signal.SIGKILL)
            dist.all_reduce(t, group=g)
            t.fill_(1.0)

    msg = expect_error("all_reduce loop while rank 1 is killed", loop, words=("rank 1",), fast=scaled(40))
    # Ranks 2 and 3 may fail first and close their groups: they are named as having
    # left, never as gone; the killed rank 1 is the only one gone.
    CK.check("gone: rank 1" in msg, f"the killed rank is not named as gone: {msg[:1500]}")
    CK.check("gone: ranks" not in msg, f"more than the killed rank called gone: {msg[:1500]}")
    t0 = time.monotonic()
    dist.destroy_process_group(g)
    CK.check(time.monotonic() - t0 < 10, f"destroy_process_group(g) took {time.monotonic() - t0:.1f} s")
    CK.data("destroyed", True)


def main() -> None:
    global CK
    CK = Checker(sys.argv[1], RANK)
    assert WS == 4, "this worker is written for 4 ranks"
    with CK.section("init"):
        dist.init_process_group("gonccl", timeout=timedelta(seconds=60))
        CK.check(dist.get_backend() == "gonccl" and dist.get_world_size() == WS and dist.get_rank() == RANK,
                 f"default group: backend {dist.get_backend()}, rank {dist.get_rank()}/{dist.get_world_size()}")
    with CK.section("timeout_missing_rank"):
        sec_timeout_missing_rank()
    with CK.section("mismatch_everywhere"):
        sec_mismatch_everywhere()
    with CK.section("dataloader_fork"):
        sec_dataloader_fork()
    with CK.section("kill9"):
        sec_kill9()
    print(f"EXITING AT {time.time():.3f}", flush=True)
    CK.finish()
    # The default group still has rank 1 in it, which is dead: leave it to exit.
    os._exit(0 if not any(s["failures"] for s in CK.sections.values()) else 1)


if __name__ == "__main__":
    main()

"""One rank of the panic test (2 ranks): a panic on one of gonccl's goroutines fails
that operation with a Python exception naming it, and the process lives on.

usage: panic_worker.py REPORT_DIR        (env: RANK, WORLD_SIZE=2, MASTER_*)

Rank 0 sets GONCCL_TEST_INJECT_PANIC (a TEST-ONLY hook, read when the communicator is
created) so that its second collective panics inside the executor. Without the
recovery the Go runtime would kill the Python process there and then. With it: rank
0's all_reduce raises DistBackendError naming the panic, rank 1's fails too (its peer
broke the links) instead of hanging, later collectives on rank 0 fail at once naming
the same panic, and both processes carry on to tear the group down and exit 0.
"""

from __future__ import annotations

import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

from _common import Checker

RANK = int(os.environ["RANK"])
WS = int(os.environ["WORLD_SIZE"])
SITE = "collective"


def all_reduce_error() -> tuple[str, float]:
    t = torch.full((1024,), float(RANK + 1))
    t0 = time.monotonic()
    try:
        dist.all_reduce(t)
    except Exception as e:  # noqa: BLE001
        return f"{type(e).__name__}: {e}", time.monotonic() - t0
    return "", time.monotonic() - t0


def main() -> None:
    ck = Checker(sys.argv[1], RANK)
    assert WS == 2, "this worker is written for 2 ranks"
    if RANK == 0:
        os.environ["GONCCL_TEST_INJECT_PANIC"] = f"{SITE}@2"
    with ck.section("init"):
        dist.init_process_group("gonccl", timeout=timedelta(seconds=60))
        t = torch.full((16,), float(RANK + 1))
        dist.all_reduce(t)
        ck.check(bool((t == 3.0).all()), f"the first all_reduce gave {t}")
    with ck.section("panic"):
        err, took = all_reduce_error()
        ck.data("panicked all_reduce", {"error": err[:3000], "seconds": round(took, 3)})
        ck.check(err.startswith("DistBackendError"), f"the second all_reduce did not raise DistBackendError: {err[:600]}")
        if RANK == 0:
            ck.check(f"panic in gonccl's {SITE} goroutine" in err and "injected panic" in err,
                     f"rank 0's error does not name the panic: {err[:600]}")
        else:
            ck.check("rank 0" in err, f"rank 1's error does not name rank 0: {err[:600]}")
    with ck.section("later"):
        # The communicator is broken: later calls fail at once, clearly.
        for i in range(3):
            err, took = all_reduce_error()
            ck.data(f"later all_reduce {i}", {"error": err[:3000], "seconds": round(took, 3)})
            ck.check(err.startswith("DistBackendError"), f"later all_reduce {i}: {err[:600] or 'no error'}")
            if RANK == 0:
                ck.check("injected panic" in err and "failed earlier" in err,
                         f"later all_reduce {i} on rank 0 does not name the panic: {err[:600]}")
    with ck.section("exit"):
        dist.destroy_process_group()
        ck.check(not dist.is_initialized(), "destroy_process_group() left the default group")
        print(f"rank {RANK}: survived the panic", flush=True)
    ck.finish()


if __name__ == "__main__":
    main()

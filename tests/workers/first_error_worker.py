"""One rank of a job that hits one bad input, as a new user would: prints the first error.

usage: first_error_worker.py CASE

Each rank runs CASE (see CASES below), catches the first exception and prints one line
`FIRST ERROR <seconds> <type>: <message>` (seconds since the case began), or `NO ERROR`.
tests/test_first_errors.py checks the message and the time.
"""

import datetime
import os
import signal
import sys
import time

import torch
import torch.distributed as dist

TIMEOUT = datetime.timedelta(seconds=float(os.environ.get("FIRST_ERROR_TIMEOUT_S", "3")))


def init():
    dist.init_process_group("gonccl", timeout=TIMEOUT)


def settings():
    """A bad setting in the environment: the error comes at init."""
    init()
    t = torch.ones(4)
    dist.all_reduce(t)


def missing_rank():
    """Rank 1 joins the group only after rank 0's timeout: rank 0 is told which rank never came."""
    init()
    if dist.get_rank() == 1:
        time.sleep(TIMEOUT.total_seconds() * 3)
        os._exit(0)
    dist.new_group([0, 1], timeout=TIMEOUT)
    dist.all_reduce(torch.ones(4))


def late_group():
    """Rank 1 never calls new_group: rank 0's fails at the group's timeout (new_group's
    timeout=), whatever GONCCL_TIMEOUT_MS says."""
    dist.init_process_group("gonccl", timeout=datetime.timedelta(seconds=60))
    if dist.get_rank() == 1:
        time.sleep(TIMEOUT.total_seconds() * 2)
        os._exit(0)
    dist.new_group([0, 1], timeout=TIMEOUT)


def dtype_mismatch():
    init()
    t = torch.ones(1024, dtype=torch.float32 if dist.get_rank() == 0 else torch.int32)
    dist.all_reduce(t)


def shape_mismatch():
    init()
    dist.all_reduce(torch.ones(1024 if dist.get_rank() == 0 else 512))


def uneven_all_gather():
    """Rank 1 hands all_gather outputs of another size than its input: its own check
    fails before the call, which rank 0 makes. Rank 1 then exits (main's os._exit)."""
    init()
    dist.all_reduce(torch.ones(4))
    out = [torch.empty(4 if dist.get_rank() == 0 else 5) for _ in range(2)]
    dist.all_gather(out, torch.ones(4))


def uneven_reduce_scatter_alive():
    """As uneven_all_gather, for reduce_scatter_tensor, but rank 1 lives on after its
    error until rank 0 has had its own, so rank 0 cannot learn of it from an exit."""
    init()
    store = dist.distributed_c10d._get_default_store()
    dist.all_reduce(torch.ones(4))
    if dist.get_rank() == 1:
        try:
            dist.reduce_scatter_tensor(torch.empty(4), torch.ones(9))
        except ValueError:
            try:
                store.wait(["rank 0 failed"], TIMEOUT * 3)
            except Exception:  # noqa: BLE001 - rank 0, the store's host, may be gone
                pass
            raise
    try:
        dist.reduce_scatter_tensor(torch.empty(4), torch.ones(8))
    finally:
        store.set("rank 0 failed", "1")
        time.sleep(0.5)  # rank 1 reads the key before this process, the store's host, ends


def timeout():
    """Rank 1 never calls the collective rank 0 waits in."""
    init()
    dist.all_reduce(torch.ones(4))
    if dist.get_rank() == 1:
        time.sleep(TIMEOUT.total_seconds() * 3)
        os._exit(0)
    dist.all_reduce(torch.ones(4))


def peer_exited():
    """Rank 1 exits (cleanly, its group destroyed) while rank 0 still has work for it."""
    init()
    dist.all_reduce(torch.ones(4))
    if dist.get_rank() == 1:
        dist.destroy_process_group()
        os._exit(0)
    time.sleep(0.5)
    dist.all_reduce(torch.ones(4))


def sigterm_behind():
    """Rank 1 sleeps instead of calling all_reduce #3; once rank 0 has failed in it,
    rank 1 gets SIGTERM, as torchrun sends the ranks left when one fails."""
    init()
    store = dist.distributed_c10d._get_default_store()
    for _ in range(2):
        dist.all_reduce(torch.ones(4))
    if dist.get_rank() == 1:
        store.wait(["rank 0 failed"], datetime.timedelta(seconds=60))
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(30)  # SIGTERM's default action ends the process first
        os._exit(3)
    try:
        dist.all_reduce(torch.ones(4))
    finally:
        store.set("rank 0 failed", "1")
        time.sleep(2)  # rank 1 reads the key before this process, the store's host, ends


def debug_file():
    """A clean run with GONCCL_DEBUG_FILE set: nothing is expected to fail."""
    init()
    dist.all_reduce(torch.ones(4))
    dist.destroy_process_group()


CASES = {f.__name__: f for f in (settings, missing_rank, late_group, dtype_mismatch, shape_mismatch, uneven_all_gather,
                                  uneven_reduce_scatter_alive, timeout, peer_exited, debug_file, sigterm_behind)}


def main():
    case = CASES[sys.argv[1]]
    start = time.monotonic()
    try:
        case()
    except Exception as e:  # noqa: BLE001 - the point is to print whatever comes
        msg = str(e).replace("\n", " | ")
        print(f"FIRST ERROR {time.monotonic() - start:.2f} {type(e).__name__}: {msg}", flush=True)
        os._exit(0)
    print("NO ERROR", flush=True)


if __name__ == "__main__":
    main()

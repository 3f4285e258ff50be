"""A rank that dies of SIGSEGV on purpose once the Go runtime runs (test_crash_report.py):
`crash_worker.py main` faults in crash_here() on the main thread, `crash_worker.py thread`
on a Python thread of its own, both through ctypes.string_at(0), i.e. in C code, which
Go's signal handler forwards to the handler installed before it."""

from __future__ import annotations

import ctypes
import sys
import threading

import torch
import torch.distributed as dist

import gonccl  # noqa: F401  (registers the backend)


def crash_here() -> None:
    ctypes.string_at(0)


def main() -> None:
    where = sys.argv[1]
    dist.init_process_group("gonccl", init_method="env://")
    t = torch.ones(4)
    dist.all_reduce(t)
    with open("/proc/self/maps") as f:
        loaded = "libgonccl" in f.read()
    print(f"go runtime started: {loaded}", flush=True)
    if where == "thread":
        th = threading.Thread(target=crash_here, name="crasher")
        th.start()
        th.join()
    else:
        crash_here()
    print("survived", flush=True)


if __name__ == "__main__":
    main()

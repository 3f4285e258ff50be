"""One rank of the collectives test: gonccl (default group) vs Gloo (a subgroup over the
same ranks) vs a torch reference computed locally from every rank's seeded input.

usage: collectives_worker.py REPORT_DIR      (env: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)

Every input is generated from a seed that depends only on (case number, rank), so each
rank can regenerate every other rank's input and compute the expected result itself:
a bug that gonccl shared with Gloo could not hide. Integer ranges are chosen so no
reduction overflows (the result is then exact and unambiguous); an integer AVG is the
sum divided by the world size, truncated (NCCL's semantics). Integers and MIN/MAX are
compared exactly; so are float SUM/AVG/PRODUCT on 1 or 2 ranks, where the correctly
rounded result is unique (this checks fp16/bf16 round-to-nearest-even bit for bit);
on 3-4 ranks floats are compared within the worst-case rounding error of any order
of operations in the dtype.

Checks are grouped in sections (see _common.Checker); the report of each rank says
which sections ran and which checks failed, and tests/test_collectives.py asserts on
it section by section. This file runs the sections in order; they live by family in
_collectives_values.py (results), _collectives_semantics.py (barrier, async, in place)
and _collectives_lifecycle.py (groups, threads, signals, shutdown), and share
_collectives_common.py (rank, checker, Gloo group, inputs, reference).
"""

from __future__ import annotations

import os
from datetime import timedelta

import torch.distributed as dist

import _device
from _collectives_common import CK, RANK, WS, gloo, new_gloo_group
from _collectives_lifecycle import sec_group_churn, sec_shutdown, sec_signals, sec_subgroups, sec_threads
from _collectives_semantics import sec_async, sec_async_stress, sec_barrier, sec_in_place
from _collectives_values import (
    sec_all_gather, sec_all_gather_into_tensor, sec_all_reduce, sec_all_reduce_coalesced, sec_all_reduce_special,
    sec_broadcast, sec_identical,
)


def main() -> None:
    _device.install()  # GONCCL_TEST_DEVICE=cuda: gonccl's ops on CUDA tensors
    with CK.section("init"):
        dist.init_process_group("gonccl", timeout=timedelta(seconds=60))
        CK.check(dist.get_backend() == "gonccl", f"default backend is {dist.get_backend()}")
        CK.check(dist.get_rank() == RANK and dist.get_world_size() == WS,
                 f"rank/size {dist.get_rank()}/{dist.get_world_size()} != {RANK}/{WS}")
        new_gloo_group()
        CK.data("algo", os.environ.get("GONCCL_ALGO", ""))
    if gloo() is None:
        CK.finish()
        return
    case_no = 0
    with CK.section("all_reduce"):
        case_no = sec_all_reduce(case_no)
    case_no = 5000
    with CK.section("all_reduce_special_values"):
        case_no = sec_all_reduce_special(case_no)
    case_no = 10000
    with CK.section("broadcast"):
        case_no = sec_broadcast(case_no)
    case_no = 20000
    with CK.section("all_gather"):
        case_no = sec_all_gather(case_no)
    case_no = 30000
    with CK.section("all_gather_into_tensor"):
        case_no = sec_all_gather_into_tensor(case_no)
    with CK.section("barrier"):
        sec_barrier()
    with CK.section("async"):
        sec_async()
    with CK.section("async_stress"):
        sec_async_stress()
    with CK.section("in_place"):
        sec_in_place()
    case_no = 40000
    with CK.section("all_reduce_coalesced"):
        sec_all_reduce_coalesced(case_no)
    with CK.section("identical_across_ranks"):
        sec_identical()
    with CK.section("subgroups"):
        sec_subgroups()
    with CK.section("threads"):
        sec_threads()
    with CK.section("group_churn"):
        sec_group_churn()
    with CK.section("signals"):
        sec_signals()
    with CK.section("shutdown"):
        sec_shutdown()
    CK.finish()


if __name__ == "__main__":
    main()

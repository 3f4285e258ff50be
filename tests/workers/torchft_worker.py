"""torchft's reconfigurable-group contract (tests/test_torchft.py), 4 processes, on the
wrapper named by argv[2]: "gonccl" (gonccl.torchft.ProcessGroupGonccl) or "gloo"
(torchft's own ProcessGroupGloo, the anchor). The store is a TCPStore the test hosts.

q0  processes 0, 1, 2 configure on prefix q0 as a group of 3; collectives are exact.
    Process 2 SIGKILLs itself; 0 and 1 see an operation fail (fast), errored() reports
    it (gonccl; torchft's Gloo wrapper has no errored()), and they abort.
q1  0 and 1 configure on q1 as a group of 2; exact.
q2  process 3, a newcomer started only now, and 0, 1 configure on q2 as a group of 3;
    exact. Then shutdown.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import AllgatherOptions

from _common import Checker, exact_mismatch

RANK = int(os.environ["RANK"])
PORT = int(os.environ["TORCHFT_STORE_PORT"])
CK: Checker


def make_pg(kind: str):
    timeout = timedelta(seconds=20)
    if kind == "gonccl":
        from gonccl.torchft import ProcessGroupGonccl

        return ProcessGroupGonccl(timeout=timeout)
    from torchft.process_group import ProcessGroupGloo

    return ProcessGroupGloo(timeout=timeout)


def value(q: int, n: int, salt: int) -> torch.Tensor:
    return torch.arange(n, dtype=torch.int64) * (q + 2) + 100 * q + salt


def exact(pg, kind: str, tag: str, names: list[int], salt: int) -> None:
    """Every collective of the wrapper on the current group, checked exactly. names:
    the processes of the group, in rank order."""
    n, r = len(names), names.index(RANK)
    CK.check(pg.size() == n, f"{tag}: size {pg.size()}, want {n}")
    count = 333
    every = [value(q, count, salt) for q in names]
    t = every[r].clone()
    pg.allreduce([t], dist.AllreduceOptions()).wait()
    CK.check(exact_mismatch(t, torch.stack(every).sum(0)) is None, f"{tag} allreduce")
    out = [[torch.empty(count, dtype=torch.int64) for _ in range(n)]]
    pg.allgather(out, [every[r]], AllgatherOptions()).wait()
    for q in range(n):
        CK.check(exact_mismatch(out[0][q], every[q]) is None, f"{tag} allgather[{q}]")
    t = every[r].clone()
    opts = dist.BroadcastOptions()
    opts.rootRank = n - 1
    pg.broadcast([t], opts).wait()
    CK.check(exact_mismatch(t, every[n - 1]) is None, f"{tag} broadcast")
    send = torch.cat([value(names[r], 5, salt + q) for q in range(n)])
    recv = torch.empty_like(send)
    pg.alltoall_base(recv, send, [], [], dist.AllToAllOptions()).wait()
    want = torch.cat([value(q, 5, salt + r) for q in names])
    CK.check(exact_mismatch(recv, want) is None, f"{tag} alltoall_base")
    if kind == "gonccl":  # torchft's Gloo wrapper raises: Gloo has no reduce_scatter
        part = torch.empty(count, dtype=torch.int64)
        ins = [value(names[r], count, salt + q) for q in range(n)]
        pg.reduce_scatter([part], [ins], dist.ReduceScatterOptions()).wait()
        want = torch.stack([value(q, count, salt + r) for q in names]).sum(0)
        CK.check(exact_mismatch(part, want) is None, f"{tag} reduce_scatter")
        outs = [torch.empty(count, dtype=torch.int64)]
        pg.reduce_scatter_tensor_coalesced(outs, [torch.cat(ins)], dist.ReduceScatterOptions()).wait()
        CK.check(exact_mismatch(outs[0], want) is None, f"{tag} reduce_scatter_tensor_coalesced")
    pg.barrier(dist.BarrierOptions()).wait()


def stop_if_failed(rec: dict) -> None:
    """A failed phase ends this process: the later ones depend on it."""
    if rec["failures"]:
        CK.finish()
        raise SystemExit(1)


def configure(pg, quorum: str, names: list[int]) -> None:
    pg.configure(f"127.0.0.1:{PORT}/{quorum}", f"replica{RANK}", names.index(RANK), len(names))


def main() -> None:
    global CK
    report_dir, kind = sys.argv[1], sys.argv[2]
    CK = Checker(report_dir, RANK)
    newcomer = RANK == 3
    pg = make_pg(kind)
    if not newcomer:
        with CK.section("q0") as rec:
            names = [0, 1, 2]
            configure(pg, "q0", names)
            exact(pg, kind, "q0", names, 0)
            CK.check(not pg.errored() if kind == "gonccl" else True, f"q0: errored() is {pg.errored()!r}")
            if RANK == 2:
                with open(os.path.join(report_dir, "killed_at"), "w") as f:
                    f.write(repr(time.time()))
                os.kill(os.getpid(), signal.SIGKILL)
            err = None
            t = torch.ones(1 << 12)
            for _ in range(10**6):
                try:
                    pg.allreduce([t], dist.AllreduceOptions()).wait()
                except Exception as e:  # noqa: BLE001 - checked below
                    err = e
                    break
            t_err = time.time()
            CK.check(err is not None, "q0: no operation failed after the kill")
            if kind == "gonccl":
                CK.check("rank 2" in str(err), f"q0: the error does not name rank 2: {err}")
                CK.check(pg.errored() is not None, "q0: errored() is None after a failed operation")
            pg.abort()
            CK.data("error", f"{type(err).__name__}: {str(err)[:300]}")
        stop_if_failed(rec)
        with CK.section("q1") as rec:
            names = [0, 1]
            configure(pg, "q1", names)
            t_ready = time.time()
            CK.check(not pg.errored() if kind == "gonccl" else True, f"q1: errored() is {pg.errored()!r}")
            exact(pg, kind, "q1", names, 1)
            CK.data("times", {"t_error": t_err, "t_ready": t_ready})
            if RANK == 0:
                open(os.path.join(report_dir, "q1_done"), "w").close()
        stop_if_failed(rec)
    else:
        flag = os.path.join(report_dir, "q1_done")
        deadline = time.monotonic() + 120
        while not os.path.exists(flag):
            if time.monotonic() > deadline:
                raise SystemExit("the others never finished q1")
            time.sleep(0.05)
    with CK.section("q2"):
        names = [0, 1, 3]
        configure(pg, "q2", names)
        exact(pg, kind, "q2", names, 2)
        if kind == "gonccl":
            pg.shutdown()
            try:
                pg.allreduce([torch.ones(2)], dist.AllreduceOptions())
                CK.check(False, "an operation after shutdown did not fail")
            except Exception as e:  # noqa: BLE001
                CK.check("not initialized" in str(e), f"after shutdown: {e}")
        else:
            pg.abort(errored=False)
    CK.finish()


if __name__ == "__main__":
    main()

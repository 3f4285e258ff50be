"""One rank of a 2-host job (tests/test_two_hosts.py): ranks run in two network
namespaces, so gonccl joins them over TCP between the namespaces and shared memory
within each.

usage: two_hosts_worker.py REPORT_DIR collectives
       two_hosts_worker.py REPORT_DIR ddp EXAMPLE_PATH STEPS SIZE
       two_hosts_worker.py REPORT_DIR fault
       two_hosts_worker.py REPORT_DIR windows
       two_hosts_worker.py REPORT_DIR chaos SECONDS

fault: a loop of all_reduce (group timeout 120 s) during which the test cuts host 1's
link or kills host 1's ranks; every rank still alive records the error it got, how
long after the fault it came, and exits. Rank 0 writes REPORT_DIR/started once the
loop runs; the test writes REPORT_DIR/fault_at (a time.time()) when it strikes.

chaos (tests/test_network_faults.py): a mixed loop of all_reduce, all_gather,
broadcast (every root in turn) and send/recv with the rank at the same place on the
other host, of 1 to 300,000 elements, each result checked against plain torch, until
the test writes REPORT_DIR/stop (rank 0 reads it and broadcasts the verdict) or
SECONDS pass. Every rank records its iterations (when each started and how long it
took), every wrong result, and the error it got if any (how long after
REPORT_DIR/fault_at).

collectives: all_reduce, all_gather, send/recv (with the rank at the same place on
the other host) and broadcast of sizes from one element to
several MiB (large enough for the TCP links to cut frames into stripes), each
checked against the value computed here with plain torch from every rank's
(reproducible) input.

ddp: the lecture's examples/ddp_example.py, its demo_basic() run as is except for
its model width (SIZE) and number of steps (STEPS), so that 4 ranks on a 2-core
machine finish in seconds; checks as in ddp_example_wrapper.py: the ranks start
from different weights, DDP's broadcast makes them equal, training changes them,
and the final weights and gradients are bit-identical on every rank.
"""

from __future__ import annotations

import builtins
import importlib.util
import os
import sys

import torch
import torch.distributed as dist

import ddp_example_wrapper as wrapper
from _common import Checker, exact_mismatch

RANK = int(os.environ["RANK"])
WS = int(os.environ["WORLD_SIZE"])


def rank_input(rank: int, n: int, dtype=torch.float32) -> torch.Tensor:
    """Rank r's input: small integers (so float sums are exact in any order)."""
    g = torch.Generator().manual_seed(1000 + rank * 7 + n)
    return torch.randint(-50, 50, (n,), generator=g).to(dtype)


def all_reduce(ck: Checker, sizes: list[int]) -> None:
    with ck.section("all_reduce"):
        for n in sizes:
            t = rank_input(RANK, n)
            dist.all_reduce(t)
            want = sum(rank_input(r, n) for r in range(WS))
            bad = exact_mismatch(t, want)
            ck.check(bad is None, f"all_reduce of {n} floats: {bad}")
            t = rank_input(RANK, n, torch.float64)
            dist.all_reduce(t, op=dist.ReduceOp.AVG)
            want = sum(rank_input(r, n, torch.float64) for r in range(WS)) / WS
            bad = exact_mismatch(t, want)
            ck.check(bad is None, f"all_reduce avg of {n} doubles: {bad}")


def collectives(ck: Checker, only_all_reduce: bool = False) -> None:
    dist.init_process_group("gonccl")
    sizes = [1, 1000, (1 << 20) + 3]  # elements; 4 MiB + 12 B is striped
    all_reduce(ck, sizes)
    if only_all_reduce:
        dist.destroy_process_group()
        return
    with ck.section("all_gather"):
        for n in sizes:
            out = [torch.empty(n) for _ in range(WS)]
            dist.all_gather(out, rank_input(RANK, n))
            for r in range(WS):
                bad = exact_mismatch(out[r], rank_input(r, n))
                ck.check(bad is None, f"all_gather of {n} floats, rank {r}'s part: {bad}")
    with ck.section("send_recv"):
        peer = (RANK + WS // 2) % WS  # on the other host
        for n in sizes:
            got = torch.empty(n)
            reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, rank_input(RANK, n), peer),
                                           dist.P2POp(dist.irecv, got, peer)])
            for req in reqs:
                req.wait()
            bad = exact_mismatch(got, rank_input(peer, n))
            ck.check(bad is None, f"send/recv of {n} floats from rank {peer}: {bad}")
    with ck.section("broadcast"):
        for root in range(WS):
            for n in sizes:
                t = rank_input(RANK, n, torch.float64)
                dist.broadcast(t, src=root)
                bad = exact_mismatch(t, rank_input(root, n, torch.float64))
                ck.check(bad is None, f"broadcast of {n} doubles from rank {root}: {bad}")
    dist.destroy_process_group()


def ddp(ck: Checker, example: str, steps: int, size: int) -> None:
    wrapper.CK = ck
    with ck.section("run_example"):
        torch.manual_seed(1234 + 1000 * RANK)
        wrapper.install_wrappers()
        spec = importlib.util.spec_from_file_location("ddp_example", example)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        mod.SIZE = size
        mod.range = lambda n: builtins.range(min(n, steps))  # the example's loop only
        mod.demo_basic()
        ck.check("ddp" in wrapper.captured, "demo_basic() never constructed DistributedDataParallel")
        ck.check(wrapper.captured["forward_calls"] == steps,
                 f"{wrapper.captured['forward_calls']} training steps ran, expected {steps}")
        ck.check(dist.get_backend() == "gonccl", "the example's process group is not gonccl")
    with ck.section("checksums"):
        params = list(wrapper.captured["ddp"].module.parameters())
        before = wrapper.gather_checksums("before_ddp", wrapper.captured["before_ddp"])
        after = wrapper.gather_checksums("after_ddp", wrapper.captured["after_ddp"])
        final = wrapper.gather_checksums("final_params", wrapper.checksum(params))
        grads = wrapper.gather_checksums("final_grads", wrapper.checksum([p.grad for p in params]))
        ck.check(len({b for _, b in before}) == WS, "the ranks' weights were equal before DDP")
        ck.check(len({b for _, b in after}) == 1, "weights differ across ranks after DDP's broadcast")
        ck.check(len({b for _, b in final}) == 1, "final weights are not bit-identical across ranks")
        ck.check(len({b for _, b in grads}) == 1, "final gradients are not bit-identical across ranks")
        ck.check(final[0][1] != after[0][1], "the weights did not change in training")
    dist.destroy_process_group()


def fault(ck: Checker, report_dir: str) -> None:
    import time
    from datetime import timedelta

    dist.init_process_group("gonccl", timeout=timedelta(seconds=120))
    t = torch.ones(1 << 14)
    with ck.section("fault"):
        try:
            for i in range(10**9):
                dist.all_reduce(t)
                t.fill_(1.0)
                if RANK == 0 and i == 20:
                    with open(os.path.join(report_dir, "started"), "w") as f:
                        f.write("1")
                if i >= 20:
                    time.sleep(0.01)
        except Exception as e:  # noqa: BLE001
            now = time.time()
            at = os.path.join(report_dir, "fault_at")
            since = now - float(open(at).read()) if os.path.exists(at) else None
            ck.data("error", {"type": type(e).__name__, "message": str(e)[:3000], "after_fault_s": since})
    print("EXITING", flush=True)
    ck.finish()
    os._exit(0)


def chaos(ck: Checker, report_dir: str, seconds: float) -> None:
    import time
    from datetime import timedelta

    dist.init_process_group("gonccl", timeout=timedelta(seconds=90))
    other = (RANK + WS // 2) % WS
    flag = torch.zeros(1)
    res: dict = {"iterations": 0, "wrong": [], "error": None, "slowest_s": 0.0, "times": []}
    start = time.time()
    with ck.section("chaos"):
        try:
            i = 0
            while True:
                if RANK == 0:
                    stop = os.path.exists(os.path.join(report_dir, "stop")) or time.time() - start > seconds
                    flag.fill_(1.0 if stop else 0.0)
                t0 = time.time()
                dist.broadcast(flag, 0)
                if flag.item() == 1.0:
                    break
                n = [1, 1000, 70_000, 300_000][i % 4] + i % 7
                wrong = []
                t = rank_input(RANK, n)
                dist.all_reduce(t)
                if (bad := exact_mismatch(t, sum(rank_input(r, n) for r in range(WS)))) is not None:
                    wrong.append(f"all_reduce {n}: {bad}")
                outs = [torch.empty(n) for _ in range(WS)]
                dist.all_gather(outs, rank_input(RANK, n + 1)[:n].clone())
                for r in range(WS):
                    if (bad := exact_mismatch(outs[r], rank_input(r, n + 1)[:n])) is not None:
                        wrong.append(f"all_gather {n} from rank {r}: {bad}")
                root = i % WS
                b = rank_input(RANK, n + 2)
                dist.broadcast(b, root)
                if (bad := exact_mismatch(b, rank_input(root, n + 2))) is not None:
                    wrong.append(f"broadcast {n} from rank {root}: {bad}")
                got = torch.empty(n)
                reqs = [dist.isend(rank_input(RANK, n + 3)[:n].clone(), other), dist.irecv(got, other)]
                for q in reqs:
                    q.wait()
                if (bad := exact_mismatch(got, rank_input(other, n + 3)[:n])) is not None:
                    wrong.append(f"recv {n} from rank {other}: {bad}")
                if wrong:
                    res["wrong"].append({"iteration": i, "what": wrong[:4]})
                ck.check(not wrong, f"iteration {i}: {wrong[:2]}")
                res["slowest_s"] = max(res["slowest_s"], time.time() - t0)
                if len(res["times"]) < 5000:
                    res["times"].append((round(t0, 3), round(time.time() - t0, 4)))
                i += 1
                res["iterations"] = i
                if RANK == 0 and i == 3:
                    with open(os.path.join(report_dir, "started"), "w") as f:
                        f.write("1")
        except Exception as e:  # noqa: BLE001
            at = os.path.join(report_dir, "fault_at")
            since = time.time() - float(open(at).read()) if os.path.exists(at) else None
            res["error"] = {"type": type(e).__name__, "message": str(e)[:3000], "after_fault_s": since}
        res["seconds"] = time.time() - start
        ck.data("result", res)
    print("EXITING", flush=True)
    ck.finish()
    if res["error"] is None:
        dist.destroy_process_group()
    os._exit(0)


def windows(ck: Checker) -> None:
    """window_worker's checks with two ranks per host: peers on this host are mapped
    (UNIFIED), the others reached over TCP (SEPARATE, map_remote_tensor refused)."""
    import datetime

    from window_worker import window_checks

    dist.init_process_group("gonccl", timeout=datetime.timedelta(seconds=60))
    per_host = int(os.environ["LOCAL_WORLD_SIZE"])
    window_checks(ck, lambda peer: peer // per_host == RANK // per_host)
    dist.destroy_process_group()


def main() -> None:
    ck = Checker(sys.argv[1], RANK)
    if sys.argv[2] == "collectives":
        collectives(ck)
    elif sys.argv[2] == "all_reduce":
        collectives(ck, only_all_reduce=True)
    elif sys.argv[2] == "fault":
        fault(ck, sys.argv[1])
    elif sys.argv[2] == "chaos":
        chaos(ck, sys.argv[1], float(sys.argv[3]))
    elif sys.argv[2] == "windows":
        windows(ck)
    else:
        ddp(ck, sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
    ck.finish()


if __name__ == "__main__":
    main()

"""One rank of the groups / futures / DDP comm hooks / object collectives test.

usage: groups_hooks_worker.py REPORT_DIR   (env: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)

The default group is on gonccl; a Gloo group over the same ranks is the oracle for DDP
(the same training run over Gloo must give the same parameters).
"""

from __future__ import annotations

import os
import random
import sys
import threading
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn

import _device
import _torch_since as since
from _common import Checker

RANK = int(os.environ["RANK"])
WS = int(os.environ["WORLD_SIZE"])
CK: Checker
GLOO = None


def tri(members):
    return float(sum(r + 1 for r in members))


def check_group(g, members, what):
    """all_reduce, broadcast (from the last member) and all_gather on group g."""
    if RANK not in members:
        CK.check(g == dist.GroupMember.NON_GROUP_MEMBER, f"{what}: non-member got {g}")
        return
    CK.check(dist.get_rank(g) == sorted(members).index(RANK) and dist.get_world_size(g) == len(members),
             f"{what}: rank/size {dist.get_rank(g)}/{dist.get_world_size(g)}")
    t = torch.full((11,), float(RANK + 1))
    dist.all_reduce(t, group=g)
    CK.check(bool((t == tri(members)).all()), f"{what}: all_reduce gave {t[:3]}, want {tri(members)}")
    src = max(members)
    x = torch.full((5,), float(RANK))
    dist.broadcast(x, src=src, group=g)
    CK.check(bool((x == src).all()), f"{what}: broadcast from {src} gave {x}")
    outs = [torch.zeros(2, dtype=torch.int64) for _ in members]
    dist.all_gather(outs, torch.tensor([RANK, -RANK]), group=g)
    CK.check([o.tolist() for o in outs] == [[m, -m] for m in sorted(members)], f"{what}: all_gather gave {outs}")


def sec_new_group():
    rng = random.Random(11)
    subsets = [list(range(WS)), list(reversed(range(WS))), [0], [WS - 1]]
    for _ in range(4):
        k = rng.randint(1, WS)
        subsets.append(rng.sample(range(WS), k))  # arbitrary order
    groups = []
    for s in subsets:
        g = dist.new_group(ranks=s, backend="gonccl")  # every rank calls it, members or not
        groups.append((g, s))
        check_group(g, s, f"new_group({s})")
    for g, s in groups:
        if RANK in s:
            dist.destroy_process_group(g)
    CK.data("subsets", subsets)


def sec_new_subgroups():
    size = 2 if WS % 2 == 0 else 1
    cur, subs = dist.new_subgroups(group_size=size, backend="gonccl")
    members = [r for r in range(WS) if r // size == RANK // size]
    check_group(cur, members, f"new_subgroups(group_size={size})")
    by = [list(range(WS))[::-1]] if WS == 1 else [[r for r in range(WS) if r % 2 == 0], [r for r in range(WS) if r % 2]]
    cur2, _ = dist.new_subgroups_by_enumeration(ranks_per_subgroup_list=by, backend="gonccl")
    mine = [s for s in by if RANK in s][0]
    check_group(cur2, mine, f"new_subgroups_by_enumeration({by})")


def sec_split_group():
    if not hasattr(dist, "split_group"):
        CK.skip(f"torch {torch.__version__} has no torch.distributed.split_group")
        return
    halves = [list(range(0, (WS + 1) // 2)), list(range((WS + 1) // 2, WS))]
    halves = [h for h in halves if h]
    if not since.SPLIT_WITHOUT_DEVICE:
        # torch < 2.15 splits only a default group bound to a device (it refuses first).
        try:
            dist.split_group(split_ranks=halves, timeout=timedelta(seconds=60))
            err = None
        except Exception as e:  # noqa: BLE001 - the refusal is what is checked
            err = f"{type(e).__name__}: {e}"
        CK.check(since.refused(err, since.SPLIT_REFUSAL), f"split_group without a bound device: {err}")
    with since.bound_device():
        sub = dist.split_group(split_ranks=halves, timeout=timedelta(seconds=60))
    mine = [h for h in halves if RANK in h][0]
    CK.check(sub is not None, "split_group returned None for a member")
    if sub is not None:
        CK.check(dist.get_backend(sub) == "gonccl", f"split group backend {dist.get_backend(sub)}")
        check_group(sub, mine, f"split_group({halves})")


def sec_threads():
    groups = [dist.new_group(backend="gonccl") for _ in range(3)]
    errors = []

    def loop(i):
        try:
            for k in range(20):
                g = groups[i]
                t = torch.full((1 << 12,), float(RANK + i + k))
                w = dist.all_reduce(t, group=g, async_op=True)
                x = torch.full((9,), float(RANK * 100 + i))
                dist.broadcast(x, src=(i + k) % WS, group=g)
                w.wait()
                want = sum(r + i + k for r in range(WS))
                if not bool((t == want).all()):
                    errors.append(f"thread {i} it {k}: all_reduce {t[:2]} want {want}")
                if not bool((x == ((i + k) % WS) * 100 + i).all()):
                    errors.append(f"thread {i} it {k}: broadcast {x[:2]}")
                outs = [torch.zeros(3) for _ in range(WS)]
                dist.all_gather(outs, torch.full((3,), float(RANK + k)), group=g)
                if [o[0].item() for o in outs] != [float(r + k) for r in range(WS)]:
                    errors.append(f"thread {i} it {k}: all_gather {outs}")
        except Exception as e:  # noqa: BLE001
            errors.append(f"thread {i}: {type(e).__name__}: {e}")

    ths = [threading.Thread(target=loop, args=(i,)) for i in range(3)]
    for th in ths:
        th.start()
    for th in ths:
        th.join(timeout=150)
    CK.check(not any(th.is_alive() for th in ths), "three threads on three groups did not finish in 150 s")
    CK.check(not errors, lambda: f"threads: {errors[:5]}")
    for g in groups:
        dist.destroy_process_group(g)


def sec_destruction():
    t0 = time.monotonic()
    for k in range(8):
        g = dist.new_group(backend="gonccl")
        t = torch.ones(4)
        dist.all_reduce(t, group=g)
        CK.check(bool((t == WS).all()), f"cycle {k}: {t}")
        dist.destroy_process_group(g)
    CK.data("seconds_8_cycles", round(time.monotonic() - t0, 2))
    t = torch.ones(4)
    dist.all_reduce(t)
    CK.check(bool((t == WS).all()), f"default group after 8 create/destroy cycles: {t}")


def sec_futures():
    t = torch.full((100,), float(RANK + 1))
    w = dist.all_reduce(t, async_op=True)
    ok = w.wait(timeout=timedelta(seconds=30))
    CK.check(ok is True or ok is None, f"Work.wait(timeout) returned {ok!r}")
    CK.check(bool((t == tri(range(WS))).all()), f"after wait(timeout): {t[:3]}")
    # then() chains, on several in-flight ops, completing in issue order
    results = []
    futs = []
    for k in range(5):
        x = torch.full((1000,), float(k + RANK))
        fut = dist.all_reduce(x, async_op=True).get_future()
        f2 = fut.then(lambda f, k=k: f.value()[0] * 2 if isinstance(f.value(), list) else f.value() * 2)
        f3 = f2.then(lambda f, k=k: (k, float(f.value()[0])))
        futs.append(f3)
    for f in futs:
        results.append(f.wait())
    want = [(k, 2.0 * sum(k + r for r in range(WS))) for k in range(5)]
    CK.check(results == want, f"then() chains gave {results}, want {want}")
    # a future's callback sees an error
    CK.data("then_results", results)
    # wait(timeout) that cannot complete: an irecv nobody answers, on its own group
    if WS >= 2:
        g = dist.new_group(backend="gonccl")
        if RANK == 0:
            buf = torch.zeros(4)
            w = dist.irecv(buf, src=1, group=g)
            t0 = time.monotonic()
            raised = None
            try:
                w.wait(timeout=timedelta(seconds=2))
            except Exception as e:  # noqa: BLE001
                raised = f"{type(e).__name__}: {str(e)[:200]}"
            took = time.monotonic() - t0
            CK.check(raised is not None, f"Work.wait(timeout=2 s) on an unanswered irecv returned after {took:.1f} s")
            CK.check(took < 20, f"Work.wait(timeout=2 s) took {took:.1f} s")
            CK.data("timeout_error", raised)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(16, 32)
        self.b = nn.Linear(32, 8)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


def train(hook_name, pg, steps=6):
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    model = Net()
    ddp = DDP(model, process_group=pg)
    hook_pg = pg  # None = default group
    if hook_name == "fp16":
        ddp.register_comm_hook(hook_pg, default_hooks.fp16_compress_hook)
    elif hook_name == "bf16":
        ddp.register_comm_hook(hook_pg, default_hooks.bf16_compress_hook)
    elif hook_name == "allreduce":
        ddp.register_comm_hook(hook_pg, default_hooks.allreduce_hook)
    elif hook_name == "powersgd":
        state = powerSGD_hook.PowerSGDState(process_group=hook_pg, matrix_approximation_rank=2,
                                            start_powerSGD_iter=2, min_compression_rate=0.5, random_seed=0)
        ddp.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(100 + RANK)
    losses = []
    for _ in range(steps):
        x = torch.randn(20, 16, generator=g)
        y = torch.randn(20, 8, generator=g)
        loss = ((ddp(x) - y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]), losses


def sec_ddp_hooks():
    tol = {"none": 1e-5, "allreduce": 1e-5, "fp16": 2e-3, "bf16": 2e-2, "powersgd": 1e-4}
    for hook in ["none", "allreduce", "fp16", "bf16", "powersgd"]:
        try:
            mine, losses = train(hook, None)
        except Exception as e:  # noqa: BLE001
            CK.check(False, f"DDP hook={hook} over gonccl raised {type(e).__name__}: {str(e)[:300]}")
            dist.barrier(group=GLOO)
            continue
        ref, ref_losses = train(hook, GLOO)
        every = [None] * WS
        dist.all_gather_object(every, mine.tolist(), group=GLOO)
        same = all(e == every[0] for e in every)
        CK.check(same, f"DDP hook={hook}: parameters differ between ranks")
        err = (mine - ref).abs().max().item()
        scale = ref.abs().max().item()
        CK.check(err <= tol[hook] * max(1.0, scale), f"DDP hook={hook}: gonccl vs gloo parameters differ by {err:.3g}"
                                                    f" (tol {tol[hook]})")
        CK.check(all(abs(a - b) <= tol[hook] * max(1.0, abs(b)) for a, b in zip(losses, ref_losses)),
                 f"DDP hook={hook}: losses {losses} vs gloo {ref_losses}")
        CK.data(f"{hook}_max_param_diff", err)


def sec_object_collectives():
    objs = [None] * WS
    dist.all_gather_object(objs, {"rank": RANK, "s": "x" * (RANK * 100 + 1)})
    CK.check(objs == [{"rank": r, "s": "x" * (r * 100 + 1)} for r in range(WS)], f"all_gather_object gave {objs}")
    lst = [{"a": 1}, [1, 2, 3], "hello" * 50] if RANK == WS - 1 else [None, None, None]
    dist.broadcast_object_list(lst, src=WS - 1)
    CK.check(lst == [{"a": 1}, [1, 2, 3], "hello" * 50], f"broadcast_object_list gave {lst}")
    out = [None] * WS if RANK == 0 else None
    dist.gather_object((RANK, "y" * RANK), out, dst=0)
    if RANK == 0:
        CK.check(out == [(r, "y" * r) for r in range(WS)], f"gather_object gave {out}")
    recv = [None]
    dist.scatter_object_list(recv, [{"to": r, "pad": [0] * r} for r in range(WS)] if RANK == 0 else None, src=0)
    CK.check(recv[0] == {"to": RANK, "pad": [0] * RANK}, f"scatter_object_list gave {recv}")


SECTIONS = [("new_group", sec_new_group), ("new_subgroups", sec_new_subgroups), ("split_group", sec_split_group),
            ("threads", sec_threads), ("destruction", sec_destruction), ("object_collectives", sec_object_collectives),
            ("ddp_hooks", sec_ddp_hooks), ("futures", sec_futures)]


def main():
    global CK, GLOO
    CK = Checker(sys.argv[1], RANK)
    _device.install()  # GONCCL_TEST_DEVICE=cuda: gonccl's ops on CUDA tensors
    with CK.section("init"):
        dist.init_process_group("gonccl", timeout=timedelta(seconds=60))
        CK.check(dist.get_backend() == "gonccl" and dist.get_world_size() == WS and dist.get_rank() == RANK,
                 f"default group: backend {dist.get_backend()}, rank {dist.get_rank()}/{dist.get_world_size()}")
        GLOO = dist.new_group(backend="gloo")
    for name, fn in SECTIONS:
        with CK.section(name):
            fn()
        dist.barrier(group=GLOO)
    # The futures section leaves an unanswered irecv behind on purpose: exit without
    # waiting for it (os._exit), after reporting.
    code = 0
    try:
        CK.finish()
    except AssertionError as e:
        print(e, file=sys.stderr)
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    main()

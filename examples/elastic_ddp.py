"""Survivors keep training: DDP on gonccl loses a rank and carries on without it.

    python examples/elastic_ddp.py [--nproc 4] [--steps 10] [--kill-rank 2] [--kill-step 5]
                                   [--size 4000] [--batch 100] [--lr 0.01]

The launcher (this script) starts --nproc CPU ranks that train the lecture's ToyModel
(examples/ddp_example.py) with DDP on gonccl. At step --kill-step, rank --kill-rank
SIGKILLs itself. The survivors' next collective fails (gonccl sees the closed
connection at once), they catch the error, learn from the store which rank is gone,
call dist.shrink_group to make a group of the survivors, reload the state they held in
memory after the last step that completed everywhere, wrap the model in DDP again, and
finish the --steps steps.

The ranks start from different weights (seeded by rank), as real ranks would, so DDP's
broadcast at construction has something to do. At the end every survivor checks,
through the store rather than through gonccl itself, that the ranks' weights differed
before DDP and were equal after its broadcast, that its parameters equal every other
survivor's bit for bit, and that the loss on the survivors' data fell. Each rank trains
on a fixed batch of its own (the same whichever generation of the group runs it).

The launcher keeps the c10d store (a TCPStore) and watches its children, as torchrun's
agent does; unlike torchrun it does not tear the job down when a worker dies. It writes
each lost rank into the store, where the survivors read it: who is gone is the
launcher's knowledge, not something a survivor should guess from an error message.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import multiprocessing as mp
import multiprocessing.connection
import os
import signal
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.optim as optim
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ddp_example  # noqa: E402  (the lecture's ToyModel)


def log(rank: int, msg: str) -> None:
    print(f"[rank {rank}] {msg}", flush=True)


def batch(orig_rank: int, size: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A rank's data, the same at every step and whichever generation of the group runs it."""
    g = torch.Generator().manual_seed(1000 + orig_rank)
    return torch.randn(n, size, generator=g), torch.randn(n, size, generator=g)


def digest(model: nn.Module) -> str:
    """A hash of the model's parameters, bit for bit."""
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def survivors_loss(state: dict, members: list[int], args) -> float:
    """The loss of a ToyModel with these weights on every survivor's data (each rank can
    rebuild it)."""
    model = ddp_example.ToyModel()
    model.load_state_dict(state)
    loss_fn = nn.MSELoss()
    with torch.no_grad():
        return sum(loss_fn(model(x), y).item() for x, y in (batch(m, args.size, args.batch) for m in members))


def store_values(store, prefix: str, ranks: list[int]) -> list[str]:
    """The values ranks put under prefix/<rank> in the store (waiting for them)."""
    return [store.get(f"{prefix}/{r}").decode() for r in ranks]


def worker(orig_rank: int, args, port: int) -> None:
    torch.set_num_threads(1)
    store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=60))
    dist.init_process_group("gonccl", store=store, rank=orig_rank, world_size=args.nproc)
    ddp_example.SIZE = args.size  # ToyModel reads it when it is built
    torch.manual_seed(orig_rank)  # every rank starts from its own weights
    model = ddp_example.ToyModel()
    store.set(f"init/{orig_rank}", digest(model))
    ddp = DDP(model)  # broadcasts rank 0's weights
    store.set(f"synced/{orig_rank}", digest(model))
    start = copy.deepcopy(model.state_dict())  # the weights training starts from
    loss_fn = nn.MSELoss()
    opt = optim.SGD(model.parameters(), lr=args.lr)
    members = list(range(args.nproc))  # the current group, in original ranks
    saved = (0, copy.deepcopy(model.state_dict()), copy.deepcopy(opt.state_dict()))
    step, generation = 0, 0
    while step < args.steps:
        try:
            if orig_rank == args.kill_rank and step == args.kill_step:
                store.set("killed_at", repr(time.time()))
                os.kill(os.getpid(), signal.SIGKILL)
            x, y = batch(orig_rank, args.size, args.batch)
            opt.zero_grad()
            loss = loss_fn(ddp(x), y)
            loss.backward()
            opt.step()
            step += 1
            saved = (step, copy.deepcopy(model.state_dict()), copy.deepcopy(opt.state_dict()))
            if dist.get_rank() == 0:
                log(orig_rank, f"step {step}: loss {loss.item():.6f} on {dist.get_world_size()} ranks")
        except (dist.DistBackendError, RuntimeError) as e:
            t_error = time.time()
            first = str(e).strip().splitlines()[0]
            log(orig_rank, f"step {step + 1} failed: {type(e).__name__}: {first[:160]}")
            lost = int(store.get(f"lost/{generation}"))  # the launcher names the dead rank
            t_ready = shrink_and_restore(orig_rank, members, lost, model, opt, saved)
            killed_at = float(store.get("killed_at"))
            members = [m for m in members if m != lost]
            generation += 1
            step = saved[0]
            ddp = DDP(model)  # on the new default group; it broadcasts rank 0's state
            log(
                orig_rank,
                f"recovered: rank {lost} lost; error {t_error - killed_at:.3f} s after the kill, "
                f"new group of {len(members)} ready {t_ready - killed_at:.3f} s after it; "
                f"now rank {dist.get_rank()}/{dist.get_world_size()}, resuming after step {step}",
            )
    # The checks go through the store (a TCPStore the launcher keeps), not through
    # gonccl, whose results they judge.
    store.set(f"final/{orig_rank}", digest(model))
    everyone = list(range(args.nproc))
    differed = len(set(store_values(store, "init", everyone))) == args.nproc
    synced = len(set(store_values(store, "synced", everyone))) == 1
    same = len(set(store_values(store, "final", members))) == 1
    before, after = survivors_loss(start, members, args), survivors_loss(model.state_dict(), members, args)
    fell = after < before
    log(orig_rank, f"done: {step} steps, parameters identical on all {len(members)} survivors: {same}; "
                   f"weights differed before DDP: {differed}, equal after its broadcast: {synced}; "
                   f"loss on the survivors' data {before:.6f} -> {after:.6f}, fell: {fell}")
    dist.destroy_process_group()
    sys.exit(0 if same and differed and synced and fell else 1)


def shrink_and_restore(orig_rank, members, lost, model, opt, saved) -> float:
    """Shrinks the default group to the survivors and reloads the state saved in memory
    after the last completed step. Returns when the new group was ready."""
    dist.shrink_group([members.index(lost)])
    t_ready = time.time()
    done, model_state, opt_state = saved
    model.load_state_dict(model_state)
    opt.load_state_dict(opt_state)
    # Every survivor must resume from the same step: a rank that finished a step the
    # others did not would hold other weights.
    steps = torch.tensor([done, -done])
    dist.all_reduce(steps, op=dist.ReduceOp.MAX)
    if steps[0].item() != -steps[1].item():
        raise RuntimeError(f"survivors saved different steps: {steps[0].item()} and {-steps[1].item()}")
    return t_ready


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nproc", type=int, default=4)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--kill-rank", type=int, default=2)
    p.add_argument("--kill-step", type=int, default=5)
    p.add_argument("--size", type=int, default=ddp_example.SIZE, help="ToyModel width (the lecture's: 4000)")
    p.add_argument("--batch", type=int, default=100)
    p.add_argument("--lr", type=float, default=0.01, help="SGD learning rate (the lecture's: 0.01)")
    args = p.parse_args()
    if not 0 <= args.kill_rank < args.nproc or args.nproc < 2:
        p.error("--kill-rank must be below --nproc, and --nproc at least 2")
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=60))
    ctx = mp.get_context("spawn")  # never fork a process that may hold a Go runtime
    procs = {r: ctx.Process(target=worker, args=(r, args, store.port)) for r in range(args.nproc)}
    for proc in procs.values():
        proc.start()
    live, lost, failed = dict(procs), 0, False
    while live:
        ready = multiprocessing.connection.wait([proc.sentinel for proc in live.values()])
        for r, proc in list(live.items()):
            if proc.sentinel not in ready:
                continue
            proc.join()
            del live[r]
            if proc.exitcode == -signal.SIGKILL and r == args.kill_rank:
                print(f"[launcher] rank {r} was killed; telling the survivors", flush=True)
                store.set(f"lost/{lost}", str(r))
                lost += 1
            elif proc.exitcode != 0:
                print(f"[launcher] rank {r} exited with {proc.exitcode}", flush=True)
                failed = True
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()

"""torchft's Manager with a lighthouse and DDP across 2 replica groups of 1 rank each
(tests/test_torchft.py), on the wrapper named by argv[2]: "gonccl"
(gonccl.torchft.ProcessGroupGonccl) or "gloo" (torchft's own ProcessGroupGloo, the
anchor). 4 processes, coordinated through files in the report folder:

process 0  hosts torchft's LighthouseServer (min_replicas=1) and writes its address
           to `lighthouse` (or why it could not start to `lighthouse_error`); it shuts
           the lighthouse down once both replicas wrote `done_<replica>`.
process 1  replica 0: trains from step 0 to the end.
process 2  replica 1: trains and SIGKILLs itself in the middle of step KILL_STEP (after
           the quorum and the forward pass, before the backward pass, so that replica 0
           is left waiting in an allreduce with a dead peer).
process 3  replica 1 again: started with the others so that its imports are done, it
           waits until replica 0 committed 2 steps alone after the kill, then makes
           its Manager (a new replica of the same replica_id), its model initialised
           from another seed: it must recover the live replica's state
           (torchft's checkpoint transport) and train on with it.

Each replica owns a TCPStore for its Manager. Both train a small MLP on a fixed
synthetic regression set, data parallel: the gradients averaged by Manager.allreduce,
the step committed by torchft's OptimizerWrapper (use_async_quorum=False). Replica 0 trains alone after the kill, then holds at step
TARGET - 4 until the restarted replica is up, so that the two train together again;
both stop at max(TARGET, join + 4) where join is the first step they share after the
restart, and report their parameters and the loss on the whole data set.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from datetime import timedelta

import torch
from torch import nn

from _common import Checker

RANK = int(os.environ["RANK"])
TARGET = 14  # steps to train at least
KILL_STEP = 4
HARD_MAX = 60  # a run past this many steps has lost its way
WAIT = 120.0  # seconds any wait on another process may take

CK: Checker


def wait_file(report_dir: str, *names: str) -> str:
    """Waits until one of names exists in report_dir; returns it."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        for name in names:
            if os.path.exists(os.path.join(report_dir, name)):
                return name
        time.sleep(0.05)
    raise SystemExit(f"process {RANK}: none of {names} appeared in {WAIT:.0f} s")


def touch(report_dir: str, name: str, text: str = "") -> None:
    tmp = os.path.join(report_dir, name + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, os.path.join(report_dir, name))


def read(report_dir: str, name: str) -> str:
    with open(os.path.join(report_dir, name)) as f:
        return f.read()


def lighthouse(report_dir: str) -> None:
    try:
        from torchft.coordination import LighthouseServer

        server = LighthouseServer(bind="[::]:0", min_replicas=1, join_timeout_ms=20000, heartbeat_timeout_ms=3000)
    except Exception as e:  # noqa: BLE001 - reported to the test, which skips
        touch(report_dir, "lighthouse_error", f"{type(e).__name__}: {e}")
        return
    try:
        touch(report_dir, "lighthouse", server.address())
        for name in ("done_0", "done_1"):
            wait_file(report_dir, name, "failed")
    finally:
        server.shutdown()


def dataset() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(7)
    x = torch.randn(512, 8, generator=g)
    w = torch.randn(8, 1, generator=g)
    y = torch.tanh(x @ w) + 0.01 * torch.randn(512, 1, generator=g)
    return x, y


def batch(x: torch.Tensor, y: torch.Tensor, step: int, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The batch of replica rank `rank` of the quorum at `step`: fixed, so a run is
    reproducible."""
    start = ((step * 2 + rank) * 32) % x.shape[0]
    return x[start : start + 32], y[start : start + 32]


def make_pg(kind: str):
    timeout = timedelta(seconds=20)
    if kind == "gonccl":
        from gonccl.torchft import ProcessGroupGonccl

        return ProcessGroupGonccl(timeout=timeout)
    from torchft.process_group import ProcessGroupGloo

    return ProcessGroupGloo(timeout=timeout)


def flat(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def replica(report_dir: str, kind: str, replica_id: int, restarted: bool) -> None:
    import torch.distributed as dist
    from torchft.manager import Manager
    from torchft.optim import OptimizerWrapper

    if restarted:
        # Started with the others (so that its imports are done), this process
        # begins replica 1's second life only once replica 0 trained on alone.
        if wait_file(report_dir, "alone", "lighthouse_error") == "lighthouse_error":
            return
    if wait_file(report_dir, "lighthouse", "lighthouse_error") == "lighthouse_error":
        return
    addr = read(report_dir, "lighthouse")
    x, y = dataset()
    torch.manual_seed(1234 if restarted else 0)  # the restarted one must recover, not match by luck
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.2)
    loss_fn = nn.MSELoss()

    def load_state_dict(sd: dict) -> None:
        model.load_state_dict(sd["model"])
        opt.load_state_dict(sd["optim"])

    def state_dict() -> dict:
        return {"model": model.state_dict(), "optim": opt.state_dict()}

    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=60))
    manager = Manager(
        pg=make_pg(kind),
        load_state_dict=load_state_dict,
        state_dict=state_dict,
        min_replica_size=1,
        use_async_quorum=False,
        timeout=timedelta(seconds=30),
        quorum_timeout=timedelta(seconds=90),
        connect_timeout=timedelta(seconds=30),
        rank=0,
        world_size=1,
        store_addr="127.0.0.1",
        store_port=store.port,
        lighthouse_addr=addr,
        replica_id=str(replica_id),
        hostname="localhost",
    )
    try:
        fopt = OptimizerWrapper(manager, opt)
        touch(report_dir, f"up_{replica_id}{'_restarted' if restarted else ''}")
        if not restarted:
            # The first quorum should hold both replicas: the lighthouse waits for a
            # replica that heartbeats (its Manager exists) to join.
            wait_file(report_dir, f"up_{1 - replica_id}")
        with torch.no_grad():
            CK.data("initial_loss", loss_fn(model(x), y).item())
        history = []  # (step, participants, committed)
        join = stop_at = None
        while stop_at is None or manager.current_step() < stop_at:
            step = manager.current_step()
            if step > HARD_MAX or len(history) > HARD_MAX + 20:  # lost its way, or no step commits
                raise RuntimeError(f"still training at step {step}: {history}")
            if (
                replica_id == 0
                and join is None
                and step >= TARGET - 4
                and os.path.exists(os.path.join(report_dir, "killed_at"))
            ):
                wait_file(report_dir, "up_1_restarted")
            fopt.zero_grad()  # the quorum (synchronous), and recovery for a replica behind
            step = manager.current_step()
            n = manager.num_participants()
            xb, yb = batch(x, y, step, manager.participating_rank() or 0)
            loss = loss_fn(model(xb), yb)
            if replica_id == 1 and not restarted and step >= KILL_STEP:
                touch(report_dir, "killed_at", repr(time.time()))
                os.kill(os.getpid(), signal.SIGKILL)
            loss.backward()
            # Data parallel: the gradients averaged over the quorum's replicas. A failed
            # allreduce does not raise: the Manager records it and the step is not
            # committed. (torchft 0.2.0's DistributedDataParallel cannot be used here:
            # its comm hook asserts on the placeholder work a failed allreduce returns.)
            works = [manager.allreduce(p.grad) for p in model.parameters()]
            for w in works:
                w.wait()
            fopt.step()  # commits only if every participant's allreduce went through
            committed = manager.current_step() > step
            history.append((step, n, committed))
            if replica_id == 0 and sum(1 for h in history if h[1] == 1 and h[2]) == 2:
                touch(report_dir, "alone")
            if join is None and n == 2 and (restarted or any(h[1] == 1 for h in history)):
                join = step
                stop_at = max(TARGET, join + 4)
        with torch.no_grad():
            CK.data("final_loss", loss_fn(model(x), y).item())
        CK.data("history", history)
        CK.data("join", join)
        CK.data("params", flat(model).tolist())
    finally:
        touch(report_dir, f"done_{replica_id}")
        manager.shutdown(wait=False)


def watchdog(report_dir: str) -> None:
    """Ends this process soon after another one failed: torchft's Manager would go on
    retrying its quorum until the run's timeout."""
    path = os.path.join(report_dir, "failed")
    while not os.path.exists(path):
        time.sleep(0.2)
    time.sleep(2)  # the failed one's report first
    print(f"process {RANK}: another process failed, ending", file=sys.stderr, flush=True)
    os._exit(3)


def main() -> None:
    global CK
    report_dir, kind = sys.argv[1], sys.argv[2]
    CK = Checker(report_dir, RANK)
    threading.Thread(target=watchdog, args=(report_dir,), daemon=True).start()
    with CK.section("run") as rec:
        try:
            if RANK == 0:
                lighthouse(report_dir)
            else:
                replica(report_dir, kind, 0 if RANK == 1 else 1, restarted=RANK == 3)
        except BaseException:
            touch(report_dir, "failed")
            raise
    CK.finish()
    if rec["failures"]:
        raise SystemExit(1)


if __name__ == "__main__":
    main()

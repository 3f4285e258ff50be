"""Fault-tolerant data parallel training with torchft on gonccl: replicas that may die
and come back while the others train on. Needs `pip install torchft` (0.2.0).

    # shell 1: the lighthouse, which forms each step's quorum of live replicas
    python examples/torchft_ddp.py lighthouse
    # shell 2 and shell 3: two replicas (any number works), given the address shell 1 printed
    python examples/torchft_ddp.py replica --lighthouse http://HOST:PORT --replica-id 0
    python examples/torchft_ddp.py replica --lighthouse http://HOST:PORT --replica-id 1

Stop a replica (Ctrl-C, or kill -9) in the middle: the other one's step fails, it trains
on alone from the next step, and when the stopped replica is started again (the same
command) it fetches the live replica's model and optimizer state and the two train on
together. Each replica prints one line per step: its step, how many replicas took part
and whether the step was committed. Within a replica group the processes would use
gonccl as usual; here each replica is a single process, and gonccl carries the gradient
averaging between replicas (gonccl.torchft.ProcessGroupGonccl).
"""

from __future__ import annotations

import argparse
import socket
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn


def lighthouse(args: argparse.Namespace) -> None:
    from torchft.coordination import LighthouseServer

    server = LighthouseServer(bind=f"[::]:{args.port}", min_replicas=1, join_timeout_ms=args.join_timeout_ms)
    print(f"lighthouse at {server.address()} (Ctrl-C ends it)", flush=True)
    try:
        while True:
            time.sleep(1)
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown()


def data(step: int, replica: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A fixed regression task; each replica of the quorum takes its own batch of a step."""
    g = torch.Generator().manual_seed(step * 1000 + replica)
    x = torch.randn(64, 8, generator=g)
    return x, torch.tanh(x.sum(dim=1, keepdim=True) / 3)


def replica(args: argparse.Namespace) -> None:
    from torchft.manager import Manager
    from torchft.optim import OptimizerWrapper

    from gonccl.torchft import ProcessGroupGonccl

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def load_state_dict(sd: dict) -> None:
        model.load_state_dict(sd["model"])
        opt.load_state_dict(sd["optim"])

    def state_dict() -> dict:
        return {"model": model.state_dict(), "optim": opt.state_dict()}

    # The replica's own store, for its Manager (a replica of several ranks would share one).
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=60))
    manager = Manager(
        pg=ProcessGroupGonccl(timeout=timedelta(seconds=10)),
        load_state_dict=load_state_dict,
        state_dict=state_dict,
        min_replica_size=1,
        use_async_quorum=False,
        timeout=timedelta(seconds=10),
        rank=0,
        world_size=1,
        store_addr="127.0.0.1",
        store_port=store.port,
        lighthouse_addr=args.lighthouse,
        replica_id=f"replica_{args.replica_id}",
        hostname=socket.gethostname(),
    )
    fopt = OptimizerWrapper(manager, opt)
    loss_fn = nn.MSELoss()
    try:
        while manager.current_step() < args.steps:
            fopt.zero_grad()  # joins the step's quorum; a replica that is behind recovers here
            step = manager.current_step()
            x, y = data(step, manager.participating_rank() or 0)
            loss = loss_fn(model(x), y)
            loss.backward()
            # Average the gradients over the replicas of this step's quorum. A failed
            # allreduce (a replica died) does not raise: the step is just not committed.
            for w in [manager.allreduce(p.grad) for p in model.parameters()]:
                w.wait()
            fopt.step()  # commits the step only if every participant's allreduce went through
            committed = manager.current_step() > step
            print(f"replica {args.replica_id}: step {step}, {manager.num_participants()} replica(s), "
                  f"loss {loss.item():.4f}, {'committed' if committed else 'not committed'}", flush=True)
            time.sleep(args.pause)
    finally:
        manager.shutdown(wait=False)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="what", required=True)
    lh = sub.add_parser("lighthouse", help="run torchft's lighthouse")
    lh.add_argument("--port", type=int, default=29510)
    lh.add_argument("--join-timeout-ms", type=int, default=1000,
                    help="how long a quorum waits for more replicas to join")
    rp = sub.add_parser("replica", help="run one replica")
    rp.add_argument("--lighthouse", required=True, help="the address the lighthouse printed")
    rp.add_argument("--replica-id", type=int, required=True)
    rp.add_argument("--steps", type=int, default=200)
    rp.add_argument("--pause", type=float, default=0.2, help="seconds between steps, to watch them")
    args = ap.parse_args()
    try:
        import torchft  # noqa: F401
    except ModuleNotFoundError:
        sys.exit("torchft_ddp.py needs torchft, which is not installed in this Python: pip install torchft==0.2.0")
    (lighthouse if args.what == "lighthouse" else replica)(args)


if __name__ == "__main__":
    main()

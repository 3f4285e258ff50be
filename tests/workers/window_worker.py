"""One rank of a job that checks one-sided windows (tests/test_windows.py, and the
two-host run of tests/test_two_hosts.py through window_checks).

usage: window_worker.py REPORT_DIR

Every value read from a window is compared with what the writing rank put there,
computed here from its rank. Sections:
* put_signal: each rank puts its slot into the next rank's window and signals it; the
  receiving rank's *registered tensor* must hold it after wait_signal (its storage is
  the window), and -1 everywhere else, over three rounds;
* map_remote: map_remote_tensor of a same-host peer aliases that peer's window (a
  write through it is what the peer reads after a signal); of a peer on another host
  it is refused with an error that says so; get_attr says UNIFIED or SEPARATE to match;
* async_all_to_all: async put / signal / wait_signal Works, every rank writing into
  every window of a second window (int64, made empty then tensor_register'ed);
* bad_input: out-of-range put, a view, a bad rank: ValueError naming it; a put of
  another dtype than the window's: TypeError;
* deregister: after tensor_deregister the tensor keeps its values;
* wait_timeout: rank 0 waits for a signal from the last rank, which never signals:
  DistBackendError within the per-call timeout, naming the rank.

With WINDOW_WORKER_CUDA=1 (a GPU machine) the section is cuda_windows instead: rank r
on GPU r % device_count registers a CUDA tensor; puts from CUDA tensors (written by a
kernel queued just before) into every rank's window, signals, and after wait_signal
the window holds each peer's values; map_remote_tensor is a CUDA tensor showing what
this rank put into the peer's window; get_attr is UNIFIED; a CPU tensor put into the
CUDA window is refused with a ValueError; after tensor_deregister the tensor is torch's
memory again and keeps its values.
"""

from __future__ import annotations

import datetime
import os
import sys
import time

import torch
import torch.distributed as dist

from _common import Checker

RANK = int(os.environ.get("RANK", "0"))
WS = int(os.environ.get("WORLD_SIZE", "1"))
SLOT = 4


def slot_values(rank: int, round_: int) -> torch.Tensor:
    return torch.arange(SLOT, dtype=torch.float32) + 100 * round_ + 10 * rank


def expect_raises(ck: Checker, what: str, fn, exc_type, *needles: str) -> None:
    try:
        fn()
    except exc_type as e:
        msg = str(e)
        ck.check(all(n in msg for n in needles), f"{what}: message lacks {needles}: {msg}")
        return
    except Exception as e:  # noqa: BLE001 - the wrong type is the failure reported
        ck.check(False, f"{what}: raised {type(e).__name__}, want {exc_type.__name__}: {e}")
        return
    ck.check(False, f"{what}: did not raise")


def window_checks(ck: Checker, same_host) -> None:
    """same_host(peer) says whether peer runs on this rank's host."""
    from gonccl.window import new_window

    nxt, prv = (RANK + 1) % WS, (RANK - 1) % WS
    t = torch.full((SLOT * WS,), -1.0)
    win = new_window(t)

    with ck.section("put_signal"):
        ck.check(torch.equal(t, torch.full((SLOT * WS,), -1.0)), "registering changed the tensor's values")
        dist.barrier()  # every rank has looked before any puts
        for round_ in range(3):
            win.put(slot_values(RANK, round_), nxt, SLOT * RANK, False)
            win.signal(nxt, False)
            win.wait_signal(prv, False)
            want = torch.full((SLOT * WS,), -1.0)
            want[SLOT * prv:SLOT * (prv + 1)] = slot_values(prv, round_)
            ck.check(torch.equal(t, want), lambda: f"round {round_}: window {t.tolist()}, want {want.tolist()}")
            dist.barrier()  # the next round overwrites what a slower rank still reads

    with ck.section("map_remote"):
        for peer in range(WS):
            attr = win.get_attr(peer).access_type
            kinds = torch._C._distributed_c10d.WindowAccessType
            want = kinds.UNIFIED if same_host(peer) else kinds.SEPARATE
            ck.check(attr == want, f"get_attr({peer}) is {attr}, want {want}")
        if same_host(nxt):
            remote = win.map_remote_tensor(nxt)
            ck.check(remote.dtype == torch.float32 and remote.shape == (SLOT * WS,),
                     f"map_remote_tensor({nxt}): {remote.dtype} {tuple(remote.shape)}")
            ck.check(torch.equal(remote[SLOT * RANK:SLOT * (RANK + 1)], slot_values(RANK, 2)),
                     lambda: f"rank {nxt}'s window seen here: {remote.tolist()}")
            remote[-1] = 1000.0 + RANK  # a plain write into the peer's window
            del remote
        else:
            expect_raises(ck, f"map_remote_tensor({nxt}) on another host", lambda: win.map_remote_tensor(nxt),
                          ValueError, f"rank {nxt} is on another host", "put")
            win.put(torch.tensor([1000.0 + RANK]), nxt, SLOT * WS - 1, False)
        win.signal(nxt, False)
        win.wait_signal(prv, False)
        ck.check(t[-1].item() == 1000.0 + prv, f"last element {t[-1].item()}, want {1000.0 + prv} from rank {prv}")
        own = win.map_remote_tensor(RANK)
        ck.check(own.data_ptr() == t.data_ptr(), "map_remote_tensor(own rank) is not the registered tensor's memory")
        dist.barrier()

    with ck.section("async_all_to_all"):
        win2 = new_window()
        got = torch.zeros(WS, dtype=torch.int64)
        win2.tensor_register(got)
        works = []
        for peer in range(WS):
            works.append(win2.put(torch.tensor([RANK * 7 + 1], dtype=torch.int64), peer, RANK, True))
        for w in works:
            ck.check(w.wait(), "async put's wait() returned False")
        for peer in range(WS):
            win2.signal(peer, True).wait()
        for peer in range(WS):
            w = win2.wait_signal(peer, True)
            ck.check(w.wait(), f"wait_signal({peer}).wait() returned False")
        want = torch.arange(WS, dtype=torch.int64) * 7 + 1
        ck.check(torch.equal(got, want), lambda: f"window {got.tolist()}, want {want.tolist()}")
        win2.tensor_deregister()
        ck.check(torch.equal(got, want), "tensor_deregister changed the values")
        dist.barrier()

    with ck.section("bad_input"):
        expect_raises(ck, "put past the end", lambda: win.put(torch.zeros(SLOT + 1), nxt, SLOT * WS - SLOT, False),
                      ValueError, "do not fit")
        expect_raises(ck, "put of another dtype", lambda: win.put(torch.zeros(2, dtype=torch.float64), nxt, 0, False),
                      TypeError, "Double")
        expect_raises(ck, "signal to a bad rank", lambda: win.signal(WS + 3, False), ValueError, f"rank {WS + 3}")
        expect_raises(ck, "map_remote_tensor of a bad rank", lambda: win.map_remote_tensor(-1), ValueError, "rank -1")
        other = new_window()
        expect_raises(ck, "register a view", lambda: other.tensor_register(torch.zeros(8)[2:6]), ValueError,
                      "whole storage")
        expect_raises(ck, "put before register", lambda: other.put(torch.zeros(1), nxt, 0, False), ValueError,
                      "no buffer is registered")

    with ck.section("wait_timeout"):
        silent = WS - 1
        if RANK == 0:
            opts = torch._C._distributed_c10d.WaitSignalOptions()
            opts.timeout = datetime.timedelta(seconds=1)
            start = time.monotonic()
            expect_raises(ck, "wait for a signal that never comes", lambda: win.wait_signal(silent, False, opts),
                          dist.DistBackendError, f"from rank {silent}", "imed out")
            took = time.monotonic() - start
            ck.check(0.9 <= took < 15, f"the wait ended after {took:.1f} s, want about 1 s")
        else:
            ck.check(True, "not the waiting rank")
        dist.barrier()

    with ck.section("deregister"):
        win.tensor_deregister()
        want = torch.full((SLOT * WS,), -1.0)
        want[SLOT * prv:SLOT * (prv + 1)] = slot_values(prv, 2)
        want[-1] = 1000.0 + prv
        ck.check(torch.equal(t, want), lambda: f"after deregister: {t.tolist()}, want {want.tolist()}")
        t += 1  # still ordinary memory of its own
        ck.check(t[0].item() == want[0].item() + 1, "the tensor is not writable after deregister")


def cuda_window_checks(ck: Checker) -> None:
    from gonccl.window import new_window

    with ck.section("cuda_windows"):
        dev = torch.device("cuda", RANK % torch.cuda.device_count())
        torch.cuda.set_device(dev)
        n = 1 << 16
        t = torch.full((n * WS,), -1.0, device=dev)
        win = new_window(t)
        for p in range(WS):
            ck.check(win.get_attr(p).access_type == torch._C._distributed_c10d.WindowAccessType.UNIFIED,
                     f"get_attr({p}) is not UNIFIED")
        for k in range(3):
            src = torch.zeros(n, device=dev)
            src += torch.arange(n, device=dev, dtype=torch.float32) + 1000 * k + 100000 * RANK  # a kernel queued now
            for q in range(WS):
                win.put(src, q, n * RANK, False)
                win.signal(q, False)
            for p in range(WS):
                win.wait_signal(p, False)
                want = torch.arange(n, device=dev, dtype=torch.float32) + 1000 * k + 100000 * p
                got = t[n * p:n * (p + 1)]
                ck.check(torch.equal(got, want), lambda: f"round {k}: from rank {p}: {got[:4].tolist()}...")
            nxt = (RANK + 1) % WS
            remote = win.map_remote_tensor(nxt)
            ck.check(remote.is_cuda and remote.numel() == n * WS, f"map_remote_tensor({nxt}): {remote.device}, {remote.numel()}")
            ck.check(torch.equal(remote[n * RANK:n * (RANK + 1)], src), f"round {k}: rank {nxt}'s window as mapped here")
            del remote
            dist.barrier()
        expect_raises(ck, "a CPU tensor into a CUDA window", lambda: win.put(torch.zeros(4), 0, 0, False),
                      ValueError, "CUDA")
        win.tensor_deregister()
        t += 1
        ck.check(t[0].item() == 2001.0, lambda: f"after deregister: t[0] = {t[0].item()}, want 2001 (rank 0's last put, + 1)")


def main() -> None:
    ck = Checker(sys.argv[1], RANK)
    dist.init_process_group("gonccl", timeout=datetime.timedelta(seconds=60))
    if os.environ.get("WINDOW_WORKER_CUDA") == "1":
        cuda_window_checks(ck)
    else:
        window_checks(ck, lambda peer: True)
    dist.destroy_process_group()
    ck.finish()


if __name__ == "__main__":
    main()

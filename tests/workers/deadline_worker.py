"""One rank of the spent-deadline test: monitored_barrier and timed ops whose deadline
runs out before, between and during their steps, on gonccl and on Gloo in the same
processes, comparing what rank 0 (and the ranks that arrived) are told.

usage: deadline_worker.py REPORT_DIR   (env: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)

Sections
  before   timeout=0: the deadline has passed at the call. monitored_barrier on rank 0
           alone (torch's test_monitored_barrier_gloo_rank_0_timeout), and (gonccl) with
           wait_all_ranks and on every rank; barrier(timeout=0) and
           _set_pg_timeout(0) then all_reduce, rank 0 alone, and a negative ephemeral
           extension that leaves no time (gonccl)
  between  rank 1 arrives about when the shared timeout runs out (a sweep around it)
           and the ranks after it never come: whichever step the deadline falls in,
           rank 0 names a rank that did not pass, never a refused timeout
  during   the last rank sleeps through the timeout: rank 0 names it, the ranks that
           arrived fail naming it (gonccl)

A group a check breaks on purpose is a fresh one, destroyed once every rank is done.
"""

from __future__ import annotations

import os
import re
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

import gonccl  # noqa: F401 - registers the backend
from _common import Checker

RANK = int(os.environ["RANK"])
WS = int(os.environ["WORLD_SIZE"])
LAST = WS - 1
BACKENDS = ("gonccl", "gloo")
# What a spent deadline must never turn into.
REFUSALS = ("must be positive", "invalid argument", "Invalid argument")
KEY = "Rank 0 timed out in monitoredBarrier"
CK: Checker


def fresh(backend, timeout=60):
    return dist.new_group(list(range(WS)), backend=backend, timeout=timedelta(seconds=timeout))


_SETTLED = [0]


def store_barrier(limit=120.0):
    """Every rank reaches this point: through the store, not the default (Gloo) group. A
    Gloo operation that timed out in a test group can close the pairs of the default
    group too ("Application timeout caused pair closure"), and a Gloo barrier there then
    fails or waits its 60 s (seen in CI at 3 ranks, between and during)."""
    _SETTLED[0] += 1
    store = dist.distributed_c10d._get_default_store()
    key = f"deadline_settle_{_SETTLED[0]}"
    store.add(key, 1)
    end = time.monotonic() + limit
    while store.add(key, 0) < WS:
        if time.monotonic() > end:
            raise TimeoutError(f"rank {RANK}: not every rank reached {key} in {limit} s")
        time.sleep(0.01)


def settle(g):
    """Destroys g once every rank is done with it."""
    store_barrier()
    dist.destroy_process_group(g)
    store_barrier()


def outcome(fn):
    """(elapsed seconds, None or the exception's message) of fn()."""
    t0 = time.monotonic()
    try:
        fn()
        return round(time.monotonic() - t0, 3), None
    except Exception as e:  # noqa: BLE001 - the outcome is what we compare
        return round(time.monotonic() - t0, 3), f"{type(e).__name__}: {e}"


def first_line(err):
    return None if err is None else err.split(": ", 1)[1].split("\n")[0]


def on_rank0(backend, what, fn, limit_s=30.0):
    """Runs fn on a fresh group of backend on rank 0 only; returns rank 0's outcome."""
    g = fresh(backend)
    res = outcome(lambda: fn(g)) if RANK == 0 else None
    settle(g)
    if res is not None:
        CK.data(f"{what} [{backend}]", [res[0], res[1] and res[1][:600]])
        CK.check(res[1] is not None, f"{what} [{backend}]: no error")
        CK.check(res[0] < limit_s, f"{what} [{backend}]: took {res[0]} s")
        CK.check(res[1] is None or not any(r in res[1] for r in REFUSALS),
                 f"{what} [{backend}]: a spent deadline was refused: {res[1]!r}")
    return res


def mb(timeout, wait_all=False):
    return lambda g: dist.monitored_barrier(group=g, timeout=timeout, wait_all_ranks=wait_all)


def names_a_missing_rank(err, ranks):
    return err is not None and any(re.search(rf"\b{r}\b", err) for r in ranks)


# ---- before: the deadline has passed at the call ------------------------------------


def sec_before():
    others = list(range(1, WS))
    seen = {b: on_rank0(b, "monitored_barrier(timeout=0) on rank 0 alone", mb(timedelta(0))) for b in BACKENDS}
    if RANK == 0:
        want = "[Rank 0]: Rank 1 failed to pass monitoredBarrier in 0 ms"
        for b in BACKENDS:
            err = seen[b][1]
            CK.check(err is not None and KEY in err, f"[{b}] no {KEY!r} in {err!r}")
            CK.check(first_line(err) == want, f"[{b}] said {first_line(err)!r}, want {want!r}")
        want_rest = "not processed: " + ", ".join(map(str, others))
        CK.check(want_rest in (seen["gonccl"][1] or ""), f"gonccl does not name every rank: {seen['gonccl'][1]!r}")

    # gonccl only: with wait_all_ranks, Gloo waits for each rank without a limit of its
    # own when the timeout is 0 (until the group's timeout, then says the same line).
    res = on_rank0("gonccl", "monitored_barrier(timeout=0, wait_all_ranks) on rank 0 alone",
                   mb(timedelta(0), wait_all=True))
    if RANK == 0:
        # Gloo says "Ranks" with wait_all_ranks, even for one.
        want = f"[Rank 0]: Ranks {', '.join(map(str, others))} failed to pass monitoredBarrier in 0 ms"
        CK.check(first_line(res[1]) == want, f"said {first_line(res[1])!r}, want {want!r}")

    # Every rank calls with timeout 0 (gonccl only: Gloo's other ranks wait for rank 0
    # without a limit when the timeout is 0). Rank 0 names the others; they fail at
    # once, as what they waited for had no time left.
    g = fresh("gonccl")
    res = outcome(lambda: mb(timedelta(0))(g))
    settle(g)
    CK.data("monitored_barrier(timeout=0) on every rank [gonccl]", [res[0], res[1] and res[1][:600]])
    CK.check(res[1] is not None and res[0] < 30, f"every rank, timeout 0: {res}")
    CK.check(res[1] is None or not any(r in res[1] for r in REFUSALS), f"a spent deadline was refused: {res[1]!r}")
    if RANK == 0:
        CK.check(res[1] is not None and KEY in res[1], f"rank 0: no {KEY!r} in {res[1]!r}")
    else:
        want = f"Rank {RANK} successfully reached monitoredBarrier, but received errors"
        CK.check(res[1] is not None and want in res[1], f"rank {RANK}: want {want!r} in {res[1]!r}")

    # Collectives whose time is up before they start: a timeout naming a rank that did
    # not join. gonccl only: Gloo says "Timed out waiting 0ms for recv operation to
    # complete" here, but its timed-out op closes its pairs, and at 2 ranks the next
    # group's connection setup then failed now and then ("Connection closed by peer").
    def set_pg_then_all_reduce(g):
        dist.distributed_c10d._set_pg_timeout(timedelta(0), group=g)
        dist.all_reduce(torch.ones(2), group=g)

    for what, fn in (("barrier(timeout=0)", lambda g: dist.barrier(group=g, timeout=timedelta(0))),
                     ("_set_pg_timeout(0) then all_reduce", set_pg_then_all_reduce)):
        seen = {"gonccl": on_rank0("gonccl", what, fn)}
        if RANK == 0:
            err = seen["gonccl"][1]
            CK.check(err is not None and "Timed out" in err, f"{what} [gonccl]: no 'Timed out' in {err!r}")
            CK.check(err is not None and re.search(r"rank [1-9]", err), f"{what} [gonccl]: names no peer: {err!r}")

    # An ephemeral extension that takes away more than the timeout leaves none: the
    # op times out at once, and Work.timeout says 0, never a negative time.
    def shrunk(g):
        dist.set_timeout(timedelta(seconds=1), group=g)
        g._add_ephemeral_timeout(timedelta(seconds=-5))
        w = dist.all_reduce(torch.ones(2), group=g, async_op=True)
        CK.check(w.timeout == timedelta(0), f"Work.timeout {w.timeout}, want 0")
        w.wait()

    res = on_rank0("gonccl", "all_reduce with an extension of -5 s on a 1 s timeout", shrunk)
    if RANK == 0:
        CK.check(res[1] is not None and "Timed out" in res[1], f"no 'Timed out' in {res[1]!r}")


# ---- between: the deadline falls between two of rank 0's steps ----------------------


def sec_between():
    timeout = 0.6
    absent = list(range(2, WS))
    if RANK in absent:
        # It stays away from every barrier of the section; rank 0 checks what is said of it.
        CK.skip(f"rank {RANK} never calls the barrier here: rank 0 checks that it is named")
    # gonccl only: on Gloo, a late rank 1 whose rank 0 has already timed out waits for
    # rank 0's answer up to the group's timeout (60 s), not its own, and Gloo's timed-out
    # pairs can break the next Gloo group; Gloo's messages are compared in before/during.
    for offset in (-0.03, -0.005, 0.0, 0.005):
        for b in ("gonccl",):
            g = fresh(b)
            res = None
            if RANK == 0:
                res = outcome(lambda: mb(timedelta(seconds=timeout))(g))
            elif RANK == 1:
                time.sleep(timeout + offset)
                res = outcome(lambda: mb(timedelta(seconds=timeout))(g))
            settle(g)
            what = f"rank 1 arrives at {timeout + offset:.3f} s of {timeout} s [{b}]"
            if res is None:
                continue
            CK.data(what, [res[0], res[1] and res[1][:600]])
            CK.check(res[0] < 30, f"{what}: took {res[0]} s")
            CK.check(res[1] is None or not any(r in res[1] for r in REFUSALS), f"{what}: refused: {res[1]!r}")
            if RANK != 0:
                continue
            if res[1] is None:
                CK.check(not absent, f"{what}: passed although ranks {absent} never came")
                continue
            line = first_line(res[1])
            m = re.fullmatch(rf"\[Rank 0\]: Rank (\d+) failed to pass monitoredBarrier in {int(timeout * 1000)} ms",
                             line or "")
            CK.check(m is not None and 1 <= int(m.group(1)) <= LAST, f"{what}: rank 0 said {line!r}")
            if m and KEY in res[1] and b == "gonccl":
                first = int(m.group(1))
                want = "not processed: " + ", ".join(map(str, range(first, WS)))
                CK.check(want in res[1], f"{what}: want {want!r} in {res[1]!r}")


# ---- during: a rank sleeps through the timeout ---------------------------------------


def sec_during():
    timeout = 1.0
    seen = {}
    for b in BACKENDS:
        g = fresh(b)
        if RANK == LAST:
            time.sleep(2 * timeout)
        res = outcome(lambda: mb(timedelta(seconds=timeout))(g))
        settle(g)
        seen[b] = res
        CK.data(f"the last rank sleeps {2 * timeout} s [{b}]", [res[0], res[1] and res[1][:600]])
        CK.check(res[0] < 30, f"[{b}] took {res[0]} s")
        CK.check(res[1] is None or not any(r in res[1] for r in REFUSALS), f"[{b}] refused: {res[1]!r}")
    if RANK == 0:
        want = f"[Rank 0]: Rank {LAST} failed to pass monitoredBarrier in {int(timeout * 1000)} ms"
        for b in BACKENDS:
            CK.check(first_line(seen[b][1]) == want, f"[{b}] said {first_line(seen[b][1])!r}, want {want!r}")
    elif RANK != LAST:
        err = seen["gonccl"][1]
        want = f"Rank {RANK} successfully reached monitoredBarrier, but received errors"
        CK.check(err is not None and want in err, f"want {want!r} in {err!r}")
        CK.check(err is not None and f"rank {LAST}" in err, f"does not name rank {LAST}: {err!r}")


def main():
    global CK
    report_dir = sys.argv[1]
    CK = Checker(report_dir, RANK)
    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    for name, fn in (("before", sec_before), ("between", sec_between), ("during", sec_during)):
        with CK.section(name):
            fn()
    CK.finish()
    # Rank 0 serves the store: it leaves only once every rank is done with it.
    store = dist.distributed_c10d._get_default_store()
    store.add("deadline_done", 1)
    if RANK == 0:
        end = time.monotonic() + 120
        while store.add("deadline_done", 0) < WS and time.monotonic() < end:
            time.sleep(0.01)
    # A group a check broke may hold threads in Go or Gloo waiting out their timeouts.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()

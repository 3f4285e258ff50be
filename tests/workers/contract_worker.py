"""One rank of the torch Backend contract test: each check runs on gonccl and on Gloo
in the same processes and compares what a user sees.

usage: contract_worker.py REPORT_DIR MODE   (env: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)

MODE
  main    (3 ranks) split_group with ranks left out, set_timeout / barrier(timeout) /
          ephemeral timeouts, monitored_barrier, Work results and durations, sparse
          all_reduce and DDP with a sparse embedding
  split4  (4 ranks) uneven and nested split_group
  fr      (3 ranks) torch's flight recorder on gonccl: a missing rank makes the others
          dump a trace naming the stuck op, the finished ops with their durations
  device  (3 ranks) init_process_group("gonccl", device_id=cpu) then new_group / split
  mixed   (2 ranks) init_process_group("cpu:gloo,cuda:gonccl")
  mixed-cuda, device-cuda  (2 ranks, a GPU) the same with CUDA tensors on gonccl, and
          init_process_group("gonccl", device_id=cuda:N)

Every group that a check breaks on purpose (a rank stays away) is a fresh one,
destroyed after; the missing rank is always the last one.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pickle
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
from torch._C._distributed_c10d import ErrorType

import gonccl  # noqa: F401 - registers the backend
import _torch_since as since
from _common import Checker

RANK = int(os.environ["RANK"])
WS = int(os.environ["WORLD_SIZE"])
LAST = WS - 1
BACKENDS = ("gonccl", "gloo")
CK: Checker


def fresh(backend, timeout=60):
    return dist.new_group(list(range(WS)), backend=backend, timeout=timedelta(seconds=timeout))


def settle(g):
    """Destroys g once every rank is done with it: the rank that stayed away must not
    leave (which the others would see as a lost peer, not a timeout) before they have
    timed out."""
    dist.barrier()
    dist.destroy_process_group(g)
    dist.barrier()


def outcome(fn):
    """(elapsed seconds, None or 'Type: message') of fn()."""
    t0 = time.monotonic()
    try:
        fn()
        return time.monotonic() - t0, None
    except Exception as e:  # noqa: BLE001 - the outcome is what we compare
        return time.monotonic() - t0, f"{type(e).__name__}: {e}"


def membership(g):
    if g == dist.GroupMember.NON_GROUP_MEMBER:
        return "NON_GROUP_MEMBER"
    if g is None:
        return "None"
    t = torch.tensor([float(RANK + 1)])
    dist.all_reduce(t, group=g)
    return [dist.get_process_group_ranks(g), dist.get_rank(g), t.item()]


# ---- split -------------------------------------------------------------------------


def split_outcomes(splits_seq, backends=BACKENDS, bind=False):
    """For each backend: the membership after each split of splits_seq; a split's
    parent is the previous split's group (the backend's fresh group at first). Only
    the last split may leave a rank out (see sec_split4). bind: each split_group call
    with the default group bound to a device (since.bound_device)."""
    seen = {}
    for backend in backends:
        parent = fresh(backend)
        out = []
        for splits in splits_seq:
            if parent is None or parent == dist.GroupMember.NON_GROUP_MEMBER:
                out.append("skipped (not a member of the parent)")
                continue
            try:
                with since.bound_device() if bind else contextlib.nullcontext():
                    child = dist.split_group(parent_pg=parent, split_ranks=splits, timeout=timedelta(seconds=60))
            except Exception as e:  # noqa: BLE001
                out.append(f"{type(e).__name__}: {e}")
                break
            out.append(membership(child))
            parent = child
        seen[backend] = out
    return seen


def expected_split(splits_seq, rank=RANK):
    """What membership() gives on rank after each split of splits_seq, from split_group's
    definition (torch before 2.14 sorts each split's ranks and gives the ranks left out None)."""
    parent, out = list(range(WS)), []
    for splits in splits_seq:
        if parent is None:
            out.append("skipped (not a member of the parent)")
            continue
        me = parent.index(rank)
        mine = [s if since.SPLIT_KEEPS_ORDER else sorted(s) for s in splits if me in s]
        if not mine:
            out.append("NON_GROUP_MEMBER" if since.SPLIT_KEEPS_ORDER else "None")
            parent = None
            continue
        parent = [parent[r] for r in mine[0]]
        out.append([parent, parent.index(rank), float(sum(r + 1 for r in parent))])
    return out


def check_split(splits_seq, what):
    if since.SPLIT_WITHOUT_DEVICE:
        seen = split_outcomes(splits_seq)
        CK.data(what, seen)
        CK.check(seen["gonccl"] == seen["gloo"], f"{what}: gonccl {seen['gonccl']} != gloo {seen['gloo']}")
    else:
        # torch < 2.15 refuses to split unless the default group is bound to a device...
        seen = split_outcomes(splits_seq)
        for backend in BACKENDS:
            CK.check(since.refused(seen[backend][0], since.SPLIT_REFUSAL),
                     f"{what} [{backend}] without a bound device: {seen[backend]}, want torch's refusal")
        # ... and with one, gonccl splits (Gloo there cannot: its options do not deep-copy).
        # Before 2.14 a rank left out of a split registers no group, and torch names later
        # splits by how many groups a rank has (_hash_ranks_to_str): ranks with different
        # histories then never meet, whatever the backend. So only splits that leave
        # nobody out run there.
        if not since.SPLIT_KEEPS_ORDER and any("None" in expected_split(splits_seq, r) for r in range(WS)):
            CK.data(what, f"{seen}; with a bound device not run: it leaves a rank out (torch < 2.14)")
            dist.barrier()
            return
        seen["gonccl bound"] = split_outcomes(splits_seq, ["gonccl"], bind=True)["gonccl"]
        CK.data(what, seen)
        want = expected_split(splits_seq)
        CK.check(seen["gonccl bound"] == want, f"{what} with a bound device: {seen['gonccl bound']}, want {want}")
    dist.barrier()


def sec_split():
    check_split([[[0, 1]]], "split [[0,1]] (rank 2 left out)")
    check_split([[[0], [1, 2]]], "split [[0],[1,2]] (uneven)")
    check_split([[[2, 0]]], "split [[2,0]] (order kept, rank 1 left out)")
    check_split([[[0, 1, 2]], [[1, 2]]], "nested: [[0,1,2]] then [[1,2]] of it")
    # shrink_group: Gloo cannot shrink and says so; gonccl can (tests/test_shrink.py).
    g = fresh("gloo")
    _, err = outcome(lambda: dist.shrink_group([LAST], group=g))
    CK.data("shrink_group [gloo]", err)
    dist.destroy_process_group(g)
    CK.check(err is not None and err.split(":")[0] == "TypeError", f"shrink_group on gloo: {err}")
    dist.barrier()


def sec_split4():
    check_split([[[0, 2], [3]]], "split [[0,2],[3]] (rank 1 left out)")
    # Every rank stays a member of some parent: a rank that skips a split_group call
    # would number later groups differently from the others (torch's naming).
    check_split([[[3, 1, 0], [2]], [[0], [2]]], "nested: [[3,1,0],[2]] then [[0],[2]] of each (rank 1 left out)")
    check_split([[[0, 1], [2, 3]], [[1]]], "nested: halves then [[1]] of each")


# ---- timeouts ----------------------------------------------------------------------


def missing_rank_op(g, op, late=None):
    """Every rank but the last runs op(g); the last stays away (or joins `late` s
    later). Returns this rank's (elapsed, error) or None on the last rank."""
    if RANK == LAST:
        if late is not None:
            time.sleep(late)
            return outcome(lambda: op(g))
        return None
    return outcome(lambda: op(g))


def check_timeout_error(what, res, backend, limit_s=30.0):
    if res is None:
        return
    elapsed, err = res
    CK.data(f"{what} [{backend}]", [round(elapsed, 2), err and err[:400]])
    CK.check(err is not None, f"{what} [{backend}]: no error")
    CK.check(elapsed < limit_s, f"{what} [{backend}]: took {elapsed:.1f} s, the group's timeout is 60 s")
    if backend == "gonccl" and err:
        CK.check("Timed out" in err, f"{what}: no 'Timed out' in {err!r}")
        CK.check(f"rank {LAST}" in err, f"{what}: the missing rank {LAST} is not named in {err!r}")
        CK.check("#" in err, f"{what}: no sequence number in {err!r}")


def sec_timeouts():
    ar = lambda g: dist.all_reduce(torch.ones(3), group=g)  # noqa: E731
    for backend in BACKENDS:
        # The deprecated _set_pg_timeout (the row; it calls set_timeout)
        # shortens later ops.
        g = fresh(backend)
        dist.all_reduce(torch.ones(1), group=g)
        dist.distributed_c10d._set_pg_timeout(timedelta(seconds=2), group=g)
        # It reached the group's backend on every rank, the one that then stays away
        # included (before torch 2.14, gonccl's only through python/gonccl/_compat.py).
        # On torch < 2.15 this is the last rank's only check here: the ones below
        # that it takes part in need 2.12 (barrier) or 2.15 (Work.timeout).
        got = g._get_backend(torch.device("cpu")).options._timeout
        CK.check(got == timedelta(seconds=2), f"_set_pg_timeout(2 s) [{backend}]: the backend's timeout is {got}")
        check_timeout_error("_set_pg_timeout(2 s) then all_reduce", missing_rank_op(g, ar), backend)
        settle(g)
        if not since.BARRIER_TIMEOUT:
            continue  # torch 2.11's barrier() has no timeout argument
        # barrier(timeout=...) on a group with a 60 s timeout.
        g = fresh(backend)
        dist.barrier(group=g)
        res = missing_rank_op(g, lambda g: dist.barrier(group=g, timeout=timedelta(seconds=2)))
        check_timeout_error("barrier(timeout=2 s)", res, backend)
        settle(g)
    # A per-op timeout in the op's options (AllreduceOptions.timeout) on a 60 s group.
    g = fresh("gonccl")

    def ar_opts(g):
        o = dist.AllreduceOptions()
        o.timeout = timedelta(seconds=2)
        g.allreduce([torch.ones(3)], o).wait()

    check_timeout_error("allreduce(AllreduceOptions.timeout = 2 s)", missing_rank_op(g, ar_opts), "gonccl")
    settle(g)
    if not since.HOOKS:
        # Before 2.15 torch has neither Work.timeout nor ephemeral extensions for
        # backends other than NCCL (docs/pytorch.md: from torch 2.15).
        CK.data("Work.timeout, _add_ephemeral_timeout", f"not in torch {torch.__version__}")
        return
    # Work.timeout and the ephemeral extension (Gloo ignores ephemeral extensions).
    g = fresh("gonccl")
    since.set_timeout(timedelta(seconds=2), group=g)
    w = dist.all_reduce(torch.ones(1), group=g, async_op=True)
    w.wait()
    CK.check(w.timeout == timedelta(seconds=2), f"Work.timeout is {w.timeout}, want 2 s")
    g._add_ephemeral_timeout(timedelta(seconds=20))
    # The first op issued after it gets 22 s: the last rank joins 4 s late.
    res = missing_rank_op(g, ar, late=4)
    CK.data("all_reduce 4 s late with a 20 s ephemeral extension", res and [round(res[0], 2), res[1]])
    CK.check(res[1] is None, f"all_reduce within the extended timeout failed: {res[1]}")
    # Its first op has finished: the extension is over, the next op gets 2 s again.
    w = dist.all_reduce(torch.ones(1), group=g, async_op=True)
    w.wait()
    CK.check(w.timeout == timedelta(seconds=2), f"Work.timeout after the extension is {w.timeout}, want 2 s")
    settle(g)


# ---- monitored_barrier --------------------------------------------------------------


def message(err):
    """The message of outcome()'s 'Type: message'."""
    return None if err is None else err.split(": ", 1)[1]


def first_line(err):
    return None if err is None else message(err).split("\n")[0]


def sec_monitored_barrier():
    if not since.MONITORED_BARRIER_ANY_BACKEND:
        # torch < 2.14 raises for every backend but Gloo before any rank waits.
        for wait_all in (False, True):
            g = fresh("gonccl")
            _, err = outcome(lambda: dist.monitored_barrier(group=g, timeout=timedelta(seconds=10),
                                                            wait_all_ranks=wait_all))
            CK.data(f"monitored_barrier(wait_all_ranks={wait_all}) [gonccl]", err)
            CK.check(since.refused(err, since.MONITORED_BARRIER_REFUSAL),
                     f"monitored_barrier on gonccl in torch {torch.__version__}: {err}, want torch's refusal")
            settle(g)
        return
    for wait_all in (False, True):
        seen = {}
        for backend in BACKENDS:
            g = fresh(backend)
            ok = outcome(lambda: dist.monitored_barrier(group=g, timeout=timedelta(seconds=10), wait_all_ranks=wait_all))
            res = missing_rank_op(g, lambda g: dist.monitored_barrier(
                group=g, timeout=timedelta(seconds=2), wait_all_ranks=wait_all))
            seen[backend] = [ok[1], res and first_line(res[1]), res and message(res[1])]
            if res is not None:
                CK.data(f"monitored_barrier(wait_all_ranks={wait_all}) [{backend}]", res[1] and res[1][:500])
                CK.check(res[0] < 30, f"monitored_barrier [{backend}] took {res[0]:.1f} s")
            settle(g)
        CK.check(seen["gonccl"][0] is None, f"monitored_barrier with every rank failed: {seen['gonccl'][0]}")
        if RANK == 0:
            # Gloo names the first missing rank, or with wait_all_ranks all of them.
            want = f"[Rank 0]: Rank{'s' if wait_all else ''} {LAST} failed to pass monitoredBarrier in 2000 ms"
            for backend in BACKENDS:
                CK.check(seen[backend][1] == want, f"rank 0 [{backend}] said {seen[backend][1]!r}, want {want!r}")
        elif RANK != LAST:
            want = f"Rank {RANK} successfully reached monitoredBarrier, but received errors while waiting"
            CK.check(seen["gonccl"][1] and seen["gonccl"][1].startswith(want),
                     f"rank {RANK} said {seen['gonccl'][1]!r}, want it to start {want!r}")
            CK.check(seen["gonccl"][2] and f"rank {LAST}" in seen["gonccl"][2],
                     f"rank {RANK} does not name the missing rank: {seen['gonccl'][2]!r}")


# ---- Work ---------------------------------------------------------------------------


def sec_work():
    g = fresh("gonccl", timeout=60)
    backend = g._get_backend(torch.device("cpu"))
    CK.check(backend.get_error() == ErrorType.SUCCESS, f"get_error() {backend.get_error()} on a healthy group")
    infos = []
    g._register_on_completion_hook(lambda info: infos.append((info.op_type, info.seq)))
    w = dist.all_reduce(torch.ones(4), group=g, async_op=True)
    w.wait()
    _, err = outcome(w._get_duration)
    CK.check(err is not None and "timing" in err, f"_get_duration without timing: {err}")
    backend._enable_collectives_timing()
    w = dist.all_reduce(torch.ones(1 << 16), group=g, async_op=True)
    w.wait()
    d = w._get_duration()
    CK.data("duration_ms", d)
    CK.check(d > 0, f"_get_duration() = {d}")
    fut = w.get_future_result()
    CK.check(fut.wait() == 0, f"get_future_result() of a finished op gave {fut.value()} (SUCCESS is 0)")
    # The hook runs on the backend's completion thread, after the Work completes
    # (asynchronous, as torch's own backends run it).
    # (Work._get_sequence_number came in torch 2.15; before, the hook's last two ops
    # must be in issue order.)
    seq = w._get_sequence_number() if hasattr(w, "_get_sequence_number") else None
    deadline = time.monotonic() + 20
    while not (len(infos) >= 2 and (seq is None or infos[-1][1] == seq)) and time.monotonic() < deadline:
        time.sleep(0.01)
    CK.check(len(infos) >= 2 and (infos[-1][1] == seq if seq is not None else infos[-1][1] > infos[-2][1]),
             f"on-completion hook saw {infos} (last op seq {seq})")
    # Work.wait(timeout) on a receive nobody answers.
    if RANK == 0:
        t = torch.zeros(1)
        w = g.recv([t], 1, 99)
        el, err = outcome(lambda: w.wait(timedelta(seconds=1)))
        CK.check(err is not None and "Timed out" in err and el < 20, f"Work.wait(1 s): {el:.1f} s, {err}")
    dist.barrier()
    # A timed-out op: its result future says TIMEOUT (1), the backend's error TIMEOUT.
    since.set_timeout(timedelta(seconds=2), group=g)
    if RANK != LAST:
        w = dist.all_reduce(torch.ones(1), group=g, async_op=True)
        # Work.wait(timeout) shorter than the op's own: its own error, the op pending.
        _, err = outcome(lambda: w.wait(timedelta(milliseconds=200)))
        CK.data("Work.wait(200 ms) on a stuck all_reduce", err)
        CK.check(err is not None and "Timed out" in err and "Work.wait" in err,
                 f"Work.wait(200 ms) on an all_reduce a rank never joins: {err}")
        fut = w.get_future_result()
        CK.check(fut.wait() == 1, f"get_future_result() of a timed-out op gave {fut.value()} (TIMEOUT is 1)")
        CK.check(backend.get_error() == ErrorType.TIMEOUT, f"get_error() after a timeout: {backend.get_error()}")
        # The failure reaches every way of asking: wait(), the future, exception().
        CK.check(w.is_completed(), "a timed-out Work is not completed")
        _, err = outcome(w.wait)
        CK.data("Work.wait() of a timed-out all_reduce", err)
        CK.check(err is not None and err.startswith("DistBackendError") and "Timed out" in err
                 and f"rank {LAST}" in err, f"Work.wait() of a timed-out all_reduce: {err}")
        _, ferr = outcome(lambda: w.get_future().wait())
        CK.check(ferr is not None and "Timed out" in ferr, f"get_future().wait() of a timed-out all_reduce: {ferr}")
        if since.WORK_EXCEPTION:
            exc = w.exception()
            CK.check(exc is not None and "Timed out" in str(exc),
                     f"Work.exception() of a timed-out all_reduce: {exc!r}")
    settle(g)


# ---- options ------------------------------------------------------------------------


def sec_options():
    from gonccl import GoncclOptions

    # Knobs reach the communicator: a group restricted to recursive doubling sums
    # small tensors as Gloo does and refuses one above rd's size limit.
    opts = GoncclOptions(algorithm="allreduce:rd", chunk_size=8192)
    CK.check(opts.algorithm == "allreduce:rd" and opts.chunk_size == 8192, f"GoncclOptions fields: {opts}")
    g = dist.new_group(list(range(WS)), backend="gonccl", pg_options=opts, timeout=timedelta(seconds=60))
    got = g._get_backend(torch.device("cpu")).options
    CK.data("options of a new_group(pg_options=...)", repr(got))
    CK.check(isinstance(got, GoncclOptions) and got.algorithm == "allreduce:rd" and got.chunk_size == 8192
             and list(got.global_ranks_in_group) == list(range(WS)) and got._timeout == timedelta(seconds=60),
             f"the backend's options are {got!r}")
    sums = {}
    for b, grp in (("gonccl", g), ("gloo", fresh("gloo"))):
        t = torch.arange(100, dtype=torch.float32) * (RANK + 1)
        dist.all_reduce(t, group=grp)
        sums[b] = t
    CK.check(torch.equal(sums["gonccl"], sums["gloo"]), "all_reduce under GoncclOptions differs from Gloo's")
    _, err = outcome(lambda: dist.all_reduce(torch.ones(1 << 18), group=g))
    CK.data("1 MiB all_reduce restricted to rd", err)
    CK.check(err is not None and "rd" in err, f"a 1 MiB all_reduce restricted to rd: {err}")
    dist.destroy_process_group(g)
    # split_group(pg_options=...) gives the child its own knobs; without pg_options it
    # keeps the parent's. (torch < 2.15 splits only with a device bound: since.bound_device.)
    parent = dist.new_group(list(range(WS)), backend="gonccl", timeout=timedelta(seconds=60),
                            pg_options=GoncclOptions(algorithm="allreduce:rd", chunk_size=8192))
    with since.bound_device():
        child = dist.split_group(parent_pg=parent, split_ranks=[list(range(WS))],
                                 pg_options=GoncclOptions(chunk_size=16384))
        inherit = dist.split_group(parent_pg=parent, split_ranks=[list(range(WS))])
    got = child._get_backend(torch.device("cpu")).options
    CK.check(got.chunk_size == 16384, f"split_group(pg_options=chunk_size 16384) gave {got!r}")
    CK.check(membership(child)[2] == sum(range(1, WS + 1)), "all_reduce on the split group")
    got = inherit._get_backend(torch.device("cpu")).options
    CK.check(got.algorithm == "allreduce:rd" and got.chunk_size == 8192,
             f"split_group without pg_options of a group with GoncclOptions gave {got!r}")
    for grp in (inherit, child, parent):
        dist.destroy_process_group(grp)
    # Errors name global ranks: group [1, LAST] (ranks 1..LAST-1 of it run, LAST stays away).
    # The group's init itself waits only 2 s for its members: they start it together.
    members = list(range(1, WS))
    dist.barrier()
    sub = dist.new_group(members, backend="gonccl", timeout=timedelta(seconds=2))
    if RANK in members:
        res = missing_rank_op(sub, lambda g: dist.all_reduce(torch.ones(2), group=g))
        if res is not None:
            CK.data("timeout on group [1..LAST]", res[1])
            note = "global ranks " + ", ".join(map(str, members))
            CK.check(res[1] is not None and "Timed out" in res[1] and note in res[1],
                     f"the error does not say {note!r}: {res[1]}")
    settle(sub)
    # Bad options: a clear error on every rank, and the default group still works.
    bad = [
        ("bogus algorithm", lambda: GoncclOptions(algorithm="allreduce:bogus"), "algorithm restriction"),
        ("ranks disagree", lambda: GoncclOptions(chunk_size=8192 * (RANK + 1)), "every rank must pass the same"),
        ("another backend's options", lambda: dist.ProcessGroupGloo._Options(), "GoncclOptions"),
        ("timeout disagrees with the group's", lambda: GoncclOptions(timeout=timedelta(seconds=5)), "timeout="),
    ]
    for what, make, want in bad:
        _, err = outcome(lambda: dist.new_group(list(range(WS)), backend="gonccl", pg_options=make(),
                                                timeout=timedelta(seconds=30)))
        CK.data(f"bad options: {what}", err)
        CK.check(err is not None and want in err, f"bad options ({what}): {err}")
        dist.barrier()
    _, err = outcome(lambda: GoncclOptions(chunk_size=100))
    CK.check(err is not None and err.startswith("ValueError") and "chunk_size" in err, f"chunk_size=100: {err}")
    t = torch.ones(2)
    dist.all_reduce(t)
    CK.check(bool((t == WS).all()), f"all_reduce after bad options gave {t}")


# ---- sparse -------------------------------------------------------------------------


def sparse_input(seed, sizes, sparse_dim, nnz, dtype):
    gen = torch.Generator().manual_seed(seed)
    idx = torch.stack([torch.randint(0, sizes[d], (nnz,), generator=gen) for d in range(sparse_dim)])
    vals = torch.randn((nnz, *sizes[sparse_dim:]), generator=gen).to(dtype)
    return torch.sparse_coo_tensor(idx, vals, sizes)  # uncoalesced: duplicates likely


def sec_sparse():
    groups = {b: fresh(b) for b in BACKENDS}
    cases = [
        ("1-D, nnz 2..4 per rank", (10,), 1, lambda r: 2 + r, torch.float32),
        ("2-D sparse x 1 dense, float64", (6, 5, 3), 2, lambda r: 5 * r + 1, torch.float64),
        ("one rank with nnz 0", (8, 4), 1, lambda r: 0 if r == 1 else 6, torch.float32),
        ("every rank nnz 0", (7,), 1, lambda r: 0, torch.float32),
        ("int64 values", (9,), 1, lambda r: 3, torch.int64),
    ]
    for name, sizes, sdim, nnz, dtype in cases:
        results = {}
        for b in BACKENDS:
            t = sparse_input(100 + RANK, sizes, sdim, nnz(RANK), dtype)
            w = dist.all_reduce(t, group=groups[b], async_op=True)
            w.wait()
            results[b] = (t, w.result()[0])
        got, want = results["gonccl"][0], results["gloo"][0]
        CK.check(got.is_sparse and got.is_coalesced(), f"sparse {name}: result is not a coalesced sparse tensor")
        CK.check(torch.equal(got._indices(), want._indices()) and torch.equal(got._values(), want._values()),
                 f"sparse {name}: gonccl {got} != gloo {want}")
        CK.check(results["gonccl"][1] is got, f"sparse {name}: the Work's result is not the input tensor")
    # Bad input: a clear error, and the group still works.
    t = sparse_input(1, (5,), 1, 2, torch.float32)
    _, err = outcome(lambda: dist.all_reduce(t, op=dist.ReduceOp.MAX, group=groups["gonccl"]))
    CK.check(err is not None and "SUM" in err, f"sparse all_reduce(MAX): {err}")
    t = sparse_input(1, (5 + RANK,), 1, 2, torch.float32)
    _, err = outcome(lambda: dist.all_reduce(t, group=groups["gonccl"]))
    CK.check(err is not None and "sizes" in err, f"sparse all_reduce of different sizes: {err}")
    x = torch.ones(2)
    dist.all_reduce(x, group=groups["gonccl"])
    CK.check(bool((x == WS).all()), f"all_reduce after bad sparse input gave {x}")
    # DDP with a sparse embedding: bit-identical to the same run on Gloo.
    params = {}
    for b in BACKENDS:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Embedding(40, 6, sparse=True), nn.Flatten(), nn.Linear(18, 2))
        # Only the embedding trains (a dense layer's all_reduce sums in another order
        # than Gloo's, and its rounding would reach the embedding's gradients).
        model[2].requires_grad_(False)
        ddp = nn.parallel.DistributedDataParallel(model, process_group=groups[b])
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
        gen = torch.Generator().manual_seed(7 + RANK)
        for _ in range(4):
            x = torch.randint(0, 40, (5, 3), generator=gen)
            loss = ddp(x).square().sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
        params[b] = [p.detach().clone() for p in model.parameters()]
    diff = max(a.sub(b).abs().max().item() for a, b in zip(params["gonccl"], params["gloo"]))
    CK.data("DDP sparse embedding max |gonccl - gloo|", diff)
    CK.check(all(torch.equal(a, b) for a, b in zip(params["gonccl"], params["gloo"])),
             f"DDP with a sparse embedding: parameters differ from Gloo's run by up to {diff}")
    for b in BACKENDS:
        dist.destroy_process_group(groups[b])
    dist.barrier()


# ---- flight recorder ------------------------------------------------------------------


def sec_flight_recorder(report_dir):
    # (test_contract.py runs this on torch >= 2.15 only: the hooks it needs.)
    # The dump prefix is read when the trace is written.
    prefix = os.path.join(report_dir, "fr_trace_")
    os.environ["TORCH_FR_DUMP_TEMP_FILE"] = prefix
    g = fresh("gonccl", timeout=60)
    g._get_backend(torch.device("cpu"))._enable_collectives_timing()
    for i in range(3):  # the last rank's checks: it stays away from the op after these
        t = torch.ones(4)
        dist.all_reduce(t, group=g)
        CK.check(bool((t == WS).all()), f"all_reduce {i} before the flight recorder's dump gave {t}")
    since.set_timeout(timedelta(seconds=2), group=g)
    res = missing_rank_op(g, lambda g: dist.all_reduce(torch.ones(5), group=g))
    if res is None:
        dist.barrier()  # stay until the others have read their dumps
        return
    CK.check(res[1] is not None, "all_reduce with a missing rank did not fail")
    path = prefix + str(RANK)
    # The abort hooks run before the op reports its failure: the dump is whole
    # by the time the program sees the error (and might exit).
    if not CK.check(os.path.exists(path), f"no flight recorder dump at {path} when the error was raised: "
                    f"{glob.glob(prefix + '*')}"):
        return
    with open(path, "rb") as f:
        dump = pickle.load(f)
    entries = [e for e in dump["entries"] if e["profiling_name"] == "gonccl:all_reduce"]
    CK.data("entries", [{k: e.get(k) for k in ("collective_seq_id", "state", "duration_ms", "input_sizes")}
                        for e in entries])
    done = [e for e in entries if e["state"] == "completed"]
    stuck = [e for e in entries if e["state"] != "completed"]
    CK.check(len(done) >= 3 and all((e.get("duration_ms") or 0) > 0 for e in done),
             f"completed entries without durations: {done}")
    CK.check(len(stuck) == 1 and stuck[0]["input_sizes"] == [[5]] and stuck[0]["collective_seq_id"] == 4,
             f"the stuck all_reduce is not the one entry left open: {stuck}")
    CK.check(all(e["time_created_ns"] > 0 for e in entries), "entries without creation times")
    dist.barrier()


# ---- init variants -----------------------------------------------------------------------


def sec_device():
    for members in ([0, 1], [1, 2], [2, 0, 1]):
        g = dist.new_group(members)
        m = membership(g)
        want = "NON_GROUP_MEMBER" if RANK not in members else float(sum(r + 1 for r in members))
        CK.check(m == want or (isinstance(m, list) and m[2] == want), f"new_group({members}) gave {m}")
    with since.bound_device():
        sub = dist.split_group(split_ranks=[[0, 2]])
    m = membership(sub)
    left_out = "NON_GROUP_MEMBER" if since.SPLIT_KEEPS_ORDER else "None"
    CK.check((m == left_out) == (RANK == 1) and (RANK == 1 or m[2] == 4.0), f"split_group([[0,2]]) gave {m}")


def sec_mixed():
    pg = dist.group.WORLD
    names = {d: pg._get_backend(torch.device(d)).name() for d in ("cpu", "cuda")}
    CK.data("backends", names)
    CK.check(names == {"cpu": "gloo", "cuda": "gonccl"}, f"backends {names}")
    t = torch.ones(3)
    dist.all_reduce(t)
    CK.check(bool((t == WS).all()), f"CPU all_reduce on cpu:gloo gave {t}")


def cuda_device():
    return torch.device("cuda", RANK % torch.cuda.device_count())


def sec_mixed_cuda():
    pg = dist.group.WORLD
    names = {d: pg._get_backend(torch.device(d)).name() for d in ("cpu", "cuda")}
    CK.check(names == {"cpu": "gloo", "cuda": "gonccl"}, f"backends {names}")
    for dev in ("cpu", cuda_device()):
        t = torch.arange(8, dtype=torch.float32, device=dev) * (RANK + 1)
        dist.all_reduce(t)
        want = torch.arange(8, dtype=torch.float32) * sum(range(1, WS + 1))
        CK.check(torch.equal(t.cpu(), want), f"all_reduce on {dev}: {t}")


def sec_device_cuda():
    CK.check(dist.group.WORLD.bound_device_id == cuda_device(),
             f"bound device {dist.group.WORLD.bound_device_id}")
    t = torch.ones(4, device=cuda_device())
    dist.all_reduce(t)
    CK.check(bool((t.cpu() == WS).all()), f"all_reduce on the bound device: {t}")
    g = dist.new_group(list(range(WS)))
    CK.check(membership(g)[2] == sum(range(1, WS + 1)), "new_group after device_id")
    sub = dist.split_group(split_ranks=[[0]])
    CK.check((sub == dist.GroupMember.NON_GROUP_MEMBER) == (RANK != 0), f"split_group([[0]]) gave {sub}")


def main():
    global CK
    report_dir, mode = sys.argv[1], sys.argv[2]
    CK = Checker(report_dir, RANK)
    if mode == "device" and since.DEVICE_ID_CPU:
        dist.init_process_group("gonccl", device_id=torch.device("cpu", 0), timeout=timedelta(seconds=60))
    elif mode == "device":
        # torch < 2.15 refuses device_id=cpu itself, in the helper that init_process_group
        # and new_group share; asked through new_group (a refused init_process_group leaves
        # its rendezvous behind). sec_device's split then binds cpu:0 as
        # init_process_group(device_id=cuda:N) binds a GPU there.
        dist.init_process_group("gonccl", timeout=timedelta(seconds=60))
        with CK.section("device_id=cpu"):
            _, err = outcome(lambda: dist.new_group(list(range(WS)), device_id=torch.device("cpu", 0)))
            CK.data("new_group(device_id=cpu)", err)
            CK.check(since.refused(err, since.DEVICE_ID_REFUSAL), f"device_id=cpu: {err}, want torch's refusal")
    elif mode in ("mixed", "mixed-cuda"):
        dist.init_process_group("cpu:gloo,cuda:gonccl", timeout=timedelta(seconds=60))
    elif mode == "device-cuda":
        dist.init_process_group("gonccl", device_id=cuda_device(), timeout=timedelta(seconds=60))
    else:
        dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    sections = {
        "main": [("split", sec_split), ("timeouts", sec_timeouts), ("monitored_barrier", sec_monitored_barrier),
                 ("work", sec_work), ("sparse", sec_sparse), ("options", sec_options)],
        "split4": [("split4", sec_split4)],
        "fr": [("flight_recorder", lambda: sec_flight_recorder(report_dir))],
        "device": [("device", sec_device)],
        "mixed": [("mixed", sec_mixed)],
        "mixed-cuda": [("mixed-cuda", sec_mixed_cuda)],
        "device-cuda": [("device-cuda", sec_device_cuda)],
    }[mode]
    for name, fn in sections:
        with CK.section(name):
            fn()
    CK.finish()
    # A group a check broke may hold threads in Go or Gloo waiting out their timeouts.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()

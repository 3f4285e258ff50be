"""One rank of the differential test: a seeded random sequence of collectives runs on the
candidate (the default group, "gonccl") and on Gloo (a group over the same ranks, the
oracle), and every result is compared with Gloo's and with a reference computed locally
from every rank's regenerated input (so a bug shared with Gloo cannot hide either).

usage: differential_worker.py REPORT_DIR NOPS SEED
env:   RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT;
       GONCCL_DIFF_CANDIDATE=gloo runs the candidate on Gloo too (self-test of the harness);
       GONCCL_DIFF_SKIP=kind,kind leaves those kinds out (triage);
       GONCCL_DIFF_TRACE=1 prints every operation before it runs;
       GONCCL_DIFF_SOAK=1 is the soak mode (tests/test_soak.py): small messages only, and
       the process's resources (fds, threads, RSS, goroutines, Go heap) sampled ten times.

The plan of every operation (kind, group, dtype, reduce op, size, root, split sizes,
async or not, in place or not) is drawn from one random.Random(SEED) that every rank
advances identically, members of the chosen group or not. Async candidate operations
stay in flight (up to a few at once, on several communicators) and are checked when
waited. Where Gloo raises for a combination (dtypes it lacks, ops torch rejects for it)
the candidate is checked against the reference only, and the combination is counted in
"oracle_missing". Integers, MIN/MAX, bitwise ops and data movement compare exactly;
float sums, averages and products within the worst-case rounding error of any order of
operations (candidate vs Gloo within twice that). Gloo's own wrong results are Gloo's:
its outputs are checked against the reference first, and a wrong one is labelled
"gloo (oracle) ..." (workers/_oracle.py), never as the candidate's.
"""

from __future__ import annotations

import collections
import os
import random
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.distributed import ReduceOp

import _device
import _oracle
from _common import Checker, close_mismatch, exact_mismatch
from _reference import COMPLEX, FLOAT8, FLOATS, make_input, mismatch, reduce_reference, valid_ops

RANK = int(os.environ["RANK"])
WS = int(os.environ["WORLD_SIZE"])
CANDIDATE = os.environ.get("GONCCL_DIFF_CANDIDATE", "gonccl")
WHO = f"{CANDIDATE} (candidate)"  # how failures name the side under test; Gloo's: _oracle
TRACE = os.environ.get("GONCCL_DIFF_TRACE", "") not in ("", "0")  # print every operation
# Kinds to leave out (triage: see what else differs while one kind is known broken).
SKIP = set(os.environ.get("GONCCL_DIFF_SKIP", "").split(",")) - {""}
SOAK = os.environ.get("GONCCL_DIFF_SOAK", "") not in ("", "0")
CK: Checker


def resources() -> dict:
    """This process's open fds, threads and RSS, and (from libgonccl) its goroutines,
    Go heap and live communicators."""
    import ctypes

    import gonccl

    with open("/proc/self/statm") as f:
        rss_pages = int(f.read().split()[1])
    out = {"fds": len(os.listdir("/proc/self/fd")), "threads": len(os.listdir("/proc/self/task")),
           "rss_mib": round(rss_pages * os.sysconf("SC_PAGE_SIZE") / 2**20, 1)}
    lib = ctypes.CDLL(os.path.join(os.path.dirname(gonccl.__file__), "libgonccl.so"),
                      mode=os.RTLD_LAZY | getattr(os, "RTLD_NOLOAD", 0))
    g, heap, comms = ctypes.c_int64(), ctypes.c_int64(), ctypes.c_int64()
    if lib.goncclDebugStats(ctypes.byref(g), ctypes.byref(heap), ctypes.byref(comms)) == 0:
        out.update(goroutines=g.value, go_heap_mib=round(heap.value / 2**20, 1), comms=comms.value)
    return out

KINDS = {  # kind -> weight
    "broadcast": 10, "all_reduce": 14, "reduce": 8, "all_gather": 7, "all_gather_into_tensor": 7,
    "gather": 6, "scatter": 6, "reduce_scatter": 6, "reduce_scatter_tensor": 7,
    "all_to_all_single": 7, "all_to_all": 5, "send_recv": 6, "barrier": 3,
}
REDUCING = {"all_reduce", "reduce", "reduce_scatter", "reduce_scatter_tensor"}
# dtype -> weight; gonccl-only dtypes (Gloo lacks them) are checked against the reference.
DTYPES = {
    torch.float32: 6, torch.float64: 2, torch.float16: 2, torch.bfloat16: 2, torch.int8: 1,
    torch.uint8: 1, torch.int16: 1, torch.int32: 1, torch.int64: 1, torch.bool: 1,
    torch.complex64: 1, torch.complex128: 0.5,
}
for _n in ("uint16", "uint32", "uint64"):
    if hasattr(torch, _n):
        DTYPES[getattr(torch, _n)] = 0.5
MOVE_DTYPES = {**DTYPES, **{d: 0.5 for d in FLOAT8}}
SMALL = [0, 1, 2, 3, 5, 7, 13, 31, 61, 127, 251, 509, 1021, 4093, 16381, 65521]
LARGE = [(1 << 20) + 7, 786433, 262139]  # up to 4 MiB of float32 (8 MiB of float64) a rank


class Group:
    def __init__(self, name, members, cand, orac):
        self.name, self.members, self.cand, self.orac = name, sorted(members), cand, orac

    @property
    def size(self):
        return len(self.members)

    def index(self, rank=RANK):
        return self.members.index(rank)


def pick(rng, weights: dict):
    keys = list(weights)
    return rng.choices(keys, weights=[weights[k] for k in keys])[0]


def make_plan(rng, step, groups, long_mode):
    """Everything about operation `step`, identical on every rank."""
    p = {"step": step, "kind": pick(rng, KINDS)}
    p["group"] = 0 if rng.random() < 0.6 else rng.randrange(len(groups))
    grp = groups[p["group"]]
    kind = p["kind"]
    p["dtype"] = pick(rng, DTYPES if kind in REDUCING else MOVE_DTYPES)
    ops = valid_ops(p["dtype"])
    p["op"] = rng.choice(ops + (["PREMUL"] if p["dtype"] in FLOATS else [])) if kind in REDUCING else "COPY"
    # premul factors are exact in every float dtype
    p["premul"] = rng.choice([0.5, 3.0, -1.25, 0.375]) if p["op"] == "PREMUL" else None
    p["premul_tensor"] = rng.random() < 0.5
    big = rng.random() < (0.03 if not long_mode else 0.02) and not SOAK
    n = rng.choice(LARGE) if big else rng.choice(SMALL)
    if kind in ("all_gather", "all_gather_into_tensor", "gather", "scatter", "reduce_scatter",
                "reduce_scatter_tensor", "all_to_all_single", "all_to_all"):
        n = n // grp.size if n > 4096 else n
    p["n"] = n
    p["root"] = rng.choice(grp.members)
    p["async"] = rng.random() < 0.4
    p["inplace"] = rng.random() < 0.4
    p["shift"] = rng.randrange(1, grp.size) if grp.size > 1 else 0
    gs = grp.size
    p["even"] = rng.random() < 0.25
    hi = max(1, min(n, 4096) * 2 // max(gs, 1))
    if p["even"]:
        k = rng.randrange(0, hi + 1)
        p["splits"] = [[k] * gs for _ in range(gs)]
    else:
        p["splits"] = [[rng.randrange(0, hi + 1) for _ in range(gs)] for _ in range(gs)]
    if rng.random() < 0.1 and not p["even"]:  # some empty blocks
        i, j = rng.randrange(gs), rng.randrange(gs)
        p["splits"][i][j] = 0
    p["seed"] = rng.getrandbits(62)
    return p


GLOO_DTYPES = set(FLOATS) | set(COMPLEX) | {torch.int8, torch.uint8, torch.int32, torch.int64, torch.bool}


def gloo_can(p) -> bool:
    """Whether Gloo can run the operation as the candidate (self-test mode)."""
    if p["dtype"] not in GLOO_DTYPES or p["op"] == "PREMUL":
        return False
    if p["op"] == "AVG" and not (p["dtype"].is_floating_point or p["dtype"].is_complex):
        return False
    if p["dtype"].is_complex and p["kind"] in ("gather", "scatter"):
        return False  # torch views complex as real for Gloo only in some collectives
    return not (p["kind"] == "all_to_all" and not p["even"])


def describe(p, grp) -> str:
    extra = f" premul={p['premul']}" if p["premul"] is not None else ""
    return (f"op#{p['step']} {p['kind']} {str(p['dtype']).replace('torch.', '')} {p['op']}{extra} "
            f"n={p['n']} group={grp.name}{grp.members} root={p['root']} async={p['async']} "
            f"inplace={p['inplace']}")


def inp(p, rank, n=None, opname=None):
    """Rank `rank`'s input of the operation (any rank can compute anyone's)."""
    grp_n = p["n"] if n is None else n
    return make_input(p["dtype"], grp_n, opname or p["op"].replace("PREMUL", "SUM"), p["gsize"],
                      p["seed"] * 1009 + rank * 7919 + 1)


def sentinel(p, n):
    return make_input(p["dtype"], n, "COPY", 1, p["seed"] + 424242 + RANK)


def torch_op(p, oracle: bool):
    """The ReduceOp for the candidate; for Gloo (oracle) SUM stands in for AVG and
    PREMUL_SUM (fixed afterwards / inputs premultiplied)."""
    name = p["op"]
    if oracle and name in ("AVG", "PREMUL"):
        return ReduceOp.SUM
    if name == "PREMUL":
        f = torch.tensor(p["premul"], dtype=p["dtype"]) if p["premul_tensor"] else p["premul"]
        return dist._make_nccl_premul_sum(f)
    return getattr(ReduceOp, name)


def oracle_input(p, x):
    if p["op"] == "PREMUL":
        return (x.to(torch.float64) * p["premul"]).to(x.dtype)
    return x


def oracle_fix(p, t):
    """AVG from Gloo's SUM."""
    if p["op"] != "AVG":
        return t
    gs = p["gsize"]
    if t.is_floating_point() or t.is_complex():
        wide = torch.complex128 if t.is_complex() else torch.float64
        return (t.to(wide) / gs).to(t.dtype)
    s = t.to(torch.int64)
    return torch.where(s < 0, -((-s) // gs), s // gs).to(t.dtype)


def reduced_ref(p, inputs):
    opname = "PREMUL" if p["op"] == "PREMUL" else p["op"]
    return reduce_reference(inputs, opname, p["dtype"], premul=p["premul"])


def slice_ref(ref, lo, hi):
    if ref[0] == "exact":
        return ("exact", ref[1][lo:hi])
    return ("close", ref[1][lo:hi], ref[2][lo:hi])


def exact(t):
    return ("exact", t)


# ----------------------------------------------------------------- one operation per kind
# Each builder returns (call, outputs, expected) for one side:
#   call(group, async_op) -> Work or None, outputs: list of tensors to check,
#   expected: list of references (same length), computed from every rank's input.

def build(p, grp, oracle: bool):
    kind, n, gs, g = p["kind"], p["n"], grp.size, grp.index()
    members, root = grp.members, p["root"]
    op = torch_op(p, oracle) if kind in REDUCING else None
    prep = (lambda x: oracle_input(p, x)) if oracle else (lambda x: x)

    if kind == "broadcast":
        t = inp(p, RANK).clone()
        return (lambda G, a: dist.broadcast(t, src=root, group=G, async_op=a)), [t], [exact(inp(p, root))]
    if kind == "all_reduce":
        t = prep(inp(p, RANK))
        ref = reduced_ref(p, [inp(p, m) for m in members])
        return (lambda G, a: dist.all_reduce(t, op=op, group=G, async_op=a)), [t], [ref]
    if kind == "reduce":
        t = prep(inp(p, RANK))
        if RANK != root:
            return (lambda G, a: dist.reduce(t, dst=root, op=op, group=G, async_op=a)), [], []
        ref = reduced_ref(p, [inp(p, m) for m in members])
        return (lambda G, a: dist.reduce(t, dst=root, op=op, group=G, async_op=a)), [t], [ref]
    if kind == "all_gather":
        want = [exact(inp(p, m)) for m in members]
        if p["inplace"]:
            buf = sentinel(p, gs * n)
            outs = list(buf.view(gs, n).unbind(0))
            outs[g].copy_(inp(p, RANK))
            x = outs[g]
        else:
            outs = [sentinel(p, n) for _ in range(gs)]
            x = inp(p, RANK)
        return (lambda G, a: dist.all_gather(outs, x, group=G, async_op=a)), outs, want
    if kind == "all_gather_into_tensor":
        out = sentinel(p, gs * n)
        if p["inplace"]:
            x = out[g * n:(g + 1) * n]
            x.copy_(inp(p, RANK))
        else:
            x = inp(p, RANK)
        want = exact(torch.cat([inp(p, m) for m in members]))
        return (lambda G, a: dist.all_gather_into_tensor(out, x, group=G, async_op=a)), [out], [want]
    if kind == "gather":
        x = inp(p, RANK)
        if RANK == root:
            outs = [sentinel(p, n) for _ in range(gs)]
            want = [exact(inp(p, m)) for m in members]
            return (lambda G, a: dist.gather(x, outs, dst=root, group=G, async_op=a)), outs, want
        return (lambda G, a: dist.gather(x, None, dst=root, group=G, async_op=a)), [], []
    if kind == "scatter":
        out = sentinel(p, n)
        src_full = inp(p, root, n=gs * n)
        want = [exact(src_full[g * n:(g + 1) * n])]
        lst = [c.clone() for c in src_full.split(n)] if (RANK == root and n) else (
            [src_full[:0].clone() for _ in range(gs)] if RANK == root else None)
        return (lambda G, a: dist.scatter(out, lst, src=root, group=G, async_op=a)), [out], want
    if kind in ("reduce_scatter", "reduce_scatter_tensor"):
        full = prep(inp(p, RANK, n=gs * n))
        ref = slice_ref(reduced_ref(p, [inp(p, m, n=gs * n) for m in members]), g * n, (g + 1) * n)
        if kind == "reduce_scatter":
            lst = [full[i * n:(i + 1) * n].clone() for i in range(gs)]
            out = sentinel(p, n)
            return (lambda G, a: dist.reduce_scatter(out, lst, op=op, group=G, async_op=a)), [out], [ref]
        out = full[g * n:(g + 1) * n] if p["inplace"] else sentinel(p, n)
        return (lambda G, a: dist.reduce_scatter_tensor(out, full, op=op, group=G, async_op=a)), [out], [ref]
    if kind in ("all_to_all_single", "all_to_all"):
        S = p["splits"]
        ins = {m: inp(p, m, n=sum(S[i])) for i, m in enumerate(members)}
        pieces = []
        for i, m in enumerate(members):
            off = sum(S[i][:g])
            pieces.append(ins[m][off:off + S[i][g]])
        if kind == "all_to_all_single":
            x = ins[RANK]
            out = sentinel(p, sum(S[i][g] for i in range(gs)))
            want = [exact(torch.cat(pieces))]
            if p["even"]:
                return (lambda G, a: dist.all_to_all_single(out, x, group=G, async_op=a)), [out], want
            osplit, isplit = [S[i][g] for i in range(gs)], list(S[g])
            return (lambda G, a: dist.all_to_all_single(out, x, osplit, isplit, group=G, async_op=a)), [out], want
        xs = [c.clone() for c in ins[RANK].split(S[g])]
        outs = [sentinel(p, S[i][g]) for i in range(gs)]
        return (lambda G, a: dist.all_to_all(outs, xs, group=G, async_op=a)), outs, [exact(c) for c in pieces]
    if kind == "send_recv":
        k = p["shift"]
        dst, src = members[(g + k) % gs], members[(g - k) % gs]
        x = inp(p, RANK)
        out = sentinel(p, n)
        order = random.Random(p["seed"] + RANK).random() < 0.5  # post recv or send first

        def call(G, a):
            posts = [lambda: dist.isend(x, dst, group=G), lambda: dist.irecv(out, src, group=G)]
            if order:
                posts.reverse()
            for w in [post() for post in posts]:
                w.wait()
            return None

        return call, [out], [exact(inp(p, src))]
    if kind == "barrier":
        if oracle:
            return (lambda G, a: gloo_step(G)), [], []
        return (lambda G, a: dist.barrier(group=G, async_op=a)), [], []
    raise ValueError(kind)


def gloo_step(group):
    """Keeps the ranks' Gloo groups in step where the plan has a barrier. Not Gloo's own
    barrier: ProcessGroupGloo's barrier first waits on the group's work still in flight
    (pytorch/pytorch#14386) and re-raises its error, so right after an oracle operation
    Gloo lacks ("Invalid scalar type", raised on Gloo's worker thread) it can fail on the
    ranks that catch that work still finishing and run on the others, which then wait
    for them for Gloo's 30 minutes. An all_reduce does not look at earlier work."""
    dist.all_reduce(torch.zeros(1), group=group)


# ----------------------------------------------------------------------------- driver

class Stats:
    def __init__(self):
        self.c = collections.Counter()

    def add(self, *keys):
        for k in keys:
            self.c[k] += 1


def check_outputs(p, grp, outs, wants, fails):
    for i, (o, w) in enumerate(zip(outs, wants)):
        bad = mismatch(o, w)
        if bad is not None:
            fails.append(f"{describe(p, grp)}: {WHO} output {i} != reference: {bad}")


# Wrong oracle results that a known Gloo issue explains (workers/_oracle.py): reported as
# Gloo's, in the section's data, never as failures.
ORACLE_KNOWN: list[str] = []


def compare(p, grp, cand_outs, orac_outs, wants, fails):
    """The oracle's outputs against the reference first: where one is wrong the failure is
    Gloo's, labelled so (workers/_oracle.py: a known issue is only reported, an unknown one
    fails the run as Gloo's), and the candidate is not compared with it (check_outputs
    holds the candidate to the reference either way). Where the oracle is right, the
    candidate must also agree with it."""
    for i, (c, o, w) in enumerate(zip(cand_outs, orac_outs, wants)):
        o = oracle_fix(p, o)
        bad = mismatch(o, w)
        if bad is not None:
            issue = _oracle.known_issue(p["kind"], contiguous=o.is_contiguous(), dtype=p["dtype"], redop=p["op"])
            text = f"{describe(p, grp)}: " + _oracle.label(f"output {i}", f"!= reference: {bad}", issue)
            if issue is None:
                fails.append(text)
            else:
                ORACLE_KNOWN.append(text)
                print(f"rank {RANK}: {text}", file=sys.stderr, flush=True)
            continue
        if w[0] == "exact":
            bad = exact_mismatch(c, o)
        elif c.is_complex():
            bad = close_mismatch(torch.view_as_real(c.contiguous()).double(), torch.view_as_real(o.contiguous()).double(),
                                 2 * w[2].unsqueeze(-1).expand(*w[2].shape, 2))
        else:
            bad = close_mismatch(c, o.double(), 2 * w[2])
        if bad is not None:
            fails.append(f"{describe(p, grp)}: {WHO} output {i} != gloo: {bad}")


def run(nops, seed, long_mode):
    rng = random.Random(seed)
    stats = Stats()
    world = Group("world", list(range(WS)), None, dist.new_group(backend="gloo"))
    groups = [world]
    for k in range(3 if WS > 1 else 1):
        size = rng.randint(1, WS)
        members = rng.sample(range(WS), size)  # arbitrary order; new_group sorts
        cand = dist.new_group(ranks=members, backend=CANDIDATE)
        orac = dist.new_group(ranks=members, backend="gloo")
        groups.append(Group(f"sub{k}", members, cand, orac))
    CK.data("groups", [g.members for g in groups])
    pending = []  # (plan, group, work, outs, wants, oracle outs or None)
    local = random.Random(seed * 31 + RANK)  # wait order: rank-local on purpose
    max_pending = 4
    fails: list[str] = []

    def finish(item):
        p, grp, work, outs, wants, orac_outs = item
        try:
            work.wait()
        except Exception as e:  # noqa: BLE001
            fails.append(f"{describe(p, grp)}: {WHO} wait() raised {type(e).__name__}: {str(e)[:300]}")
            return
        check_outputs(p, grp, outs, wants, fails)
        if orac_outs is not None:
            compare(p, grp, outs, orac_outs, wants, fails)

    def flush():
        order = list(pending)
        if local.random() < 0.5:
            order.reverse()
        for item in order:
            finish(item)
        pending.clear()

    samples = []
    for step in range(nops):
        if SOAK and step % max(1, nops // 10) == 0:
            flush()
            samples.append({"step": step, **resources()})
        p = make_plan(rng, step, groups, long_mode)
        grp = groups[p["group"]]
        p["gsize"] = grp.size
        if p["kind"] in ("send_recv", "barrier") or len(pending) >= max_pending:
            flush()
        if RANK not in grp.members or p["kind"] in SKIP or (CANDIDATE == "gloo" and not gloo_can(p)):
            continue
        if p["kind"] == "send_recv" and grp.size < 2:
            continue
        dname = str(p["dtype"]).replace("torch.", "")
        stats.add("total", f"kind/{p['kind']}", f"dtype/{dname}", f"group/{'world' if p['group'] == 0 else 'sub'}")
        if p["kind"] in REDUCING:
            stats.add(f"op/{p['op']}", f"kind_op/{p['kind']}/{p['op']}")
        stats.add(f"kind_dtype/{p['kind']}/{dname}")
        if p["async"] and p["kind"] != "send_recv":
            stats.add("async")
        if p["inplace"] and p["kind"] in ("all_gather", "all_gather_into_tensor", "reduce_scatter_tensor"):
            stats.add("inplace")
        if p["n"] == 0:
            stats.add("zero_size")
        if p["n"] > 100000:
            stats.add("large")
        if TRACE:
            print(f"rank {RANK}: {describe(p, grp)}", file=sys.stderr, flush=True)
        # Oracle first (synchronously), then the candidate.
        orac_outs = None
        try:
            if p["kind"] == "all_to_all" and not p["even"]:
                # Gloo's all_to_all takes equal blocks only, and raises on some ranks
                # but not others (which would desynchronize it): reference only.
                raise NotImplementedError("gloo all_to_all with uneven blocks")
            ocall, oouts, owants = build(p, grp, oracle=True)
            ocall(grp.orac, False)
            orac_outs = oouts
            stats.add("vs_gloo")
        except Exception:  # noqa: BLE001 - Gloo lacks the combination: reference only
            stats.add("reference_only", f"oracle_missing/{p['kind']}/{dname}/{p['op']}")
        call, outs, wants = build(p, grp, oracle=False)
        try:
            work = call(grp.cand, p["async"])
        except Exception as e:  # noqa: BLE001
            fails.append(f"{describe(p, grp)}: {WHO} raised {type(e).__name__}: {str(e).splitlines()[0][:300]}")
            stats.add(f"candidate_error/{p['kind']}")
            continue
        item = (p, grp, work, outs, wants, orac_outs)
        if p["async"] and work is not None:
            pending.append(item)
        else:
            if work is not None:
                work.wait()
            check_outputs(p, grp, outs, wants, fails)
            if orac_outs is not None:
                compare(p, grp, outs, orac_outs, wants, fails)
    flush()
    gloo_step(world.orac)
    if SOAK:
        samples.append({"step": nops, **resources()})
        CK.data("resources", samples)
    CK.data("oracle_issues", ORACLE_KNOWN)
    # The earliest operation that failed (async ones are checked when waited, later).
    CK.data("first_failure", min(fails, key=lambda f: int(f.split()[0][3:])) if fails else None)
    for f in fails:
        CK.check(False, f)
    CK.check(stats.c["total"] > 0, f"none of the {nops} planned operations ran on rank {RANK}")
    return stats


def main():
    global CK
    report_dir, nops, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    long_mode = os.environ.get("GONCCL_DIFF_LONG", "") not in ("", "0")
    CK = Checker(report_dir, RANK)
    _device.install()  # GONCCL_TEST_DEVICE=cuda: gonccl's ops on CUDA tensors
    with CK.section("init"):
        dist.init_process_group(CANDIDATE, timeout=timedelta(seconds=120))
        CK.check(dist.get_backend() == CANDIDATE, f"default backend is {dist.get_backend()}")
    with CK.section("differential"):
        t0 = time.monotonic()
        stats = run(nops, seed, long_mode)
        CK.data("counts", dict(sorted(stats.c.items())))
        CK.data("seconds", round(time.monotonic() - t0, 1))
    with CK.section("shutdown"):
        dist.destroy_process_group()
        CK.check(not dist.is_initialized(), "destroy_process_group() left the default group")
    CK.finish()


if __name__ == "__main__":
    main()

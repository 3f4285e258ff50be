"""One rank of a collective benchmark (launched by gonccl.bench or torchrun).

The default process group is Gloo and only coordinates (barriers, the MAX of the
times, the sum of #wrong); every measured backend gets its own group over all ranks,
and for each size the backends run one after the other, so a ratio compares runs
made under the same machine load.
"""

from __future__ import annotations

import os
import socket
import time
from datetime import timedelta

import torch
import torch.distributed as dist

from gonccl.bench import collectives as C
from gonccl.bench import floor, report, variants

AVERAGE_NAMES = {0: "rank 0", 1: "average over ranks", 2: "min over ranks", 3: "max over ranks"}

# The memcpy reference copies at least this much, so that it measures memory, not a cache.
MEMCPY_MIN_BYTES = 64 << 20


def memcpy_bandwidth(nbytes: int, iters: int) -> float:
    """GB/s of a single-threaded torch copy_ of nbytes (bytes copied / time), best of
    max(iters, 3) but at most 10 copies."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        src = torch.ones(nbytes, dtype=torch.uint8)
        dst = torch.empty(nbytes, dtype=torch.uint8)
        for _ in range(2):
            dst.copy_(src)
        best = float("inf")
        for _ in range(min(max(iters, 3), 10)):
            t0 = time.perf_counter()
            dst.copy_(src)
            best = min(best, time.perf_counter() - t0)
        return nbytes / best / 1e9
    finally:
        torch.set_num_threads(threads)


def device_copy_bandwidth(nbytes: int, iters: int, device: torch.device) -> float:
    """GB/s of a torch copy_ of nbytes between two buffers of one GPU (bytes copied /
    time, best of iters, timed with CUDA events): each byte is read once and written
    once, so the memory moves twice this."""
    src = torch.ones(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty(nbytes, dtype=torch.uint8, device=device)
    for _ in range(2):
        dst.copy_(src)
    best = float("inf")
    for _ in range(max(iters, 3)):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end) / 1e3)
    del src, dst
    return nbytes / best / 1e9


def one_pass_busbw(copy_gbps: float, coll: str, nranks: int) -> float | None:
    """The busbw an all_reduce of ranks sharing one GPU reaches if it is one pass over
    memory (every rank's input read once, every rank's output written once) at the
    device copy's speed: 2*N bytes of traffic per byte of message where the copy moves 2,
    so algbw = copy / N, times the busbw factor 2(N-1)/N. None for other collectives."""
    if coll != "all_reduce" or nranks < 2:
        return None
    return copy_gbps / nranks * 2 * (nranks - 1) / nranks


def _combine(value: float, how: int, nranks: int) -> float:
    t = torch.tensor([value], dtype=torch.float64)
    if how == 0:
        dist.broadcast(t, src=0)
    elif how == 1:
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
        t /= nranks
    else:
        dist.all_reduce(t, op=dist.ReduceOp.MIN if how == 2 else dist.ReduceOp.MAX)
    return float(t.item())


def _agree_error(msg: str | None) -> str | None:
    """All ranks learn whether any rank failed (so all skip the same measurement)."""
    flag = torch.tensor([1 if msg else 0], dtype=torch.int64)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    if flag.item() == 0:
        return None
    return msg or "failed on another rank"


def measure(inst: C.Instance, args, nranks: int, reset_hops: bool = False) -> dict:
    """#wrong (if checking), then the timed loop; returns time/algbw/busbw/#wrong.
    reset_hops: zero the per-hop timing just before the timed loop."""
    wrong = None
    err = None
    try:
        if args.check:
            bad = 0
            for _ in range(args.check):
                inst.fill_check()
                for w in inst.start():
                    w.wait()
                bad += inst.wrong()
            wrong = bad
        for _ in range(args.warmup_iters):
            for w in inst.start():
                w.wait()
    except Exception as e:  # noqa: BLE001 - reported in the table, the run goes on
        err = f"{type(e).__name__}: {e}"
    err = _agree_error(err)
    if err:
        return {"error": err}
    t = torch.tensor([wrong or 0], dtype=torch.int64)
    dist.all_reduce(t)
    if wrong is not None:
        wrong = int(t.item())
    try:
        if reset_hops:
            from gonccl import _C

            _C._hops(True)
        dist.barrier()
        t0 = time.perf_counter()
        if args.blocking:
            for _ in range(args.iters):
                for w in inst.start():
                    w.wait()
        else:
            works = []
            for _ in range(args.iters):
                works.extend(inst.start())
            for w in works:
                w.wait()
        if inst.device.type == "cuda":
            torch.cuda.synchronize(inst.device)  # wait() orders the stream; the time needs the GPU done
        local = (time.perf_counter() - t0) / args.iters
    except Exception as e:  # noqa: BLE001
        err = f"{type(e).__name__}: {e}"
        local = 0.0
    err = _agree_error(err)
    if err:
        return {"error": err}
    sec = _combine(local, args.average, nranks)
    algbw = inst.shape.size / sec / 1e9 if sec > 0 else float("nan")
    return {
        "time_us": sec * 1e6,
        "algbw": algbw,
        "busbw": algbw * C.busbw_factor(inst.coll, nranks),
        "wrong": wrong,
    }


def sizes(args, add_max: bool = True) -> list[int]:
    out = []
    s = args.minbytes
    while s <= args.maxbytes:
        out.append(s)
        if args.stepfactor > 1:
            s *= args.stepfactor
        elif args.stepbytes > 0:
            s += args.stepbytes
        else:
            break
    if add_max and out and out[-1] != args.maxbytes:
        # unlike nccl-tests, always end at -e (so -b 8 -e 64M -f 4 measures 64M too)
        out.append(args.maxbytes)
    return out


def run(args) -> int:
    rank = int(os.environ["RANK"])
    nranks = int(os.environ["WORLD_SIZE"])
    timeout = timedelta(seconds=args.pg_timeout)
    if args.hops:
        os.environ["GONCCL_DEBUG_HOPS"] = "1"  # read when the backend is created
    dist.init_process_group("gloo", rank=rank, world_size=nranks, timeout=timeout)
    try:
        return _run(args, rank, nranks, timeout)
    finally:
        dist.destroy_process_group()


def _run(args, rank: int, nranks: int, timeout) -> int:
    coll = args.coll
    dtype = C.DTYPES[args.datatype]
    elsize = torch.empty(0, dtype=dtype).element_size()
    if coll == "sendrecv" and nranks < 2:
        raise SystemExit("gonccl.bench: sendrecv needs at least 2 ranks")
    if coll in C.ROOTED and not 0 <= args.root < nranks:
        raise SystemExit(f"gonccl.bench: root {args.root} is not a rank of {nranks}")
    device = torch.device("cpu")
    if args.device == "cuda":
        if not torch.cuda.is_available():
            raise SystemExit("gonccl.bench: --device cuda, but torch sees no GPU")
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank)) % torch.cuda.device_count())
        torch.cuda.set_device(device)
    if args.backends is None:
        args.backends = variants.default_backends(args.device, nranks)
    groups = {b: variants.new_group(b, timeout) for b in args.backends}
    ratioed = variants.ratio_pairs(args.backends)
    with_ratio = bool(ratioed)
    say = rank == 0
    capi = None
    if (args.floor and coll == "all_reduce" and "gonccl" in groups and device.type == "cpu"
            and dtype == torch.float32 and args.op == "sum"):
        capi = floor.CapiAllReduce(rank, nranks)

    # the physical reference: rank 0 copies while the others wait
    mem = None
    mem_bytes = max(args.maxbytes, MEMCPY_MIN_BYTES)
    if args.memcpy:
        if rank == 0:
            mem = memcpy_bandwidth(mem_bytes, args.iters)
        dist.barrier()
    # the device's own reference, in the same run: rank 0 copies on its GPU
    dev_copy = None
    if args.memcpy and device.type == "cuda":
        if rank == 0:
            dev_copy = device_copy_bandwidth(max(args.maxbytes, 1), args.iters, device)
        dist.barrier()
    bound = one_pass_busbw(dev_copy, coll, nranks) if dev_copy else None

    # nccl-tests' "Using devices": where each rank runs
    where = [None] * nranks
    dist.all_gather_object(where, (os.getpid(), socket.gethostname(), str(device)))
    oop_form, ip_form = C.FORMS[coll]
    redop = args.op if coll in C.REDUCING else "none"
    root = args.root if coll in C.ROOTED else None
    if coll in C.SPLIT:
        convention = "size = bytes of the larger buffer (all ranks' data), count = elements per rank"
    else:
        convention = "size = bytes of the buffer, count = its elements"
    if say:
        b, f = C.BUSBW_FACTORS[coll][1], args.stepfactor
        step = f"{f}(factor)" if f > 1 else f"{args.stepbytes}(bytes)"
        if sizes(args) != sizes(args, add_max=False):
            step += ", then maxBytes"
        report.print_lines([
            f"# gonccl.bench {coll}: nranks {nranks} minBytes {args.minbytes} maxBytes {args.maxbytes} "
            f"step: {step} warmup iters: {args.warmup_iters} iters: {args.iters} validation: {args.check} "
            f"blocking: {args.blocking}",
            f"# backends: {','.join(args.backends)}   device {device}   torch {torch.__version__}   "
            f"host {socket.gethostname()}   "
            f"OMP/intra-op threads per rank: {torch.get_num_threads()}",
            f"# time: average of {args.iters} iters after {args.warmup_iters} warm-up, "
            f"{AVERAGE_NAMES[args.average]} (-a {args.average}; -a 1: the average, nccl-tests' default; "
            f"-a 3: the max); algbw = size/time (1 GB = 1e9 B); busbw = algbw * {b} (nccl-tests PERFORMANCE.md)",
            f"# {convention}",
            ("# forms torch lacks print N/A" if oop_form else
             f"# in-place only: torch has no out-of-place {coll}")
            + (("; ratio = gonccl busbw / gloo busbw (in-place if the collective has it, else out-of-place)"
                if oop_form else "; ratio = gonccl busbw / gloo busbw") if with_ratio else ""),
            *([f"# gonccl-auto / gonccl-samegpu / gonccl-device / gonccl-staged: gonccl with "
               f"GONCCL_DEVICE_PATH=auto / samegpu / 1 / 0 "
               f"(gonccl's choice, logged at INIT / same-GPU path where every rank shares one GPU / device path / "
               f"staged through pinned host memory); GONCCL_DEVICE_SCRATCH="
               f"{os.environ.get('GONCCL_DEVICE_SCRATCH', '8M (default)')}"]
              if any(b in ("gonccl-auto", "gonccl-samegpu", "gonccl-device", "gonccl-staged") for b in args.backends)
              else []),
            *([f"# {variants.NOTES[b]}" for b in ("gonccl-plain", "gonccl-tls", "gonccl-noresume") if b in args.backends]),
            "#",
            "#  Using devices",
            *[f"#  Rank {r:>3} Pid {pid:>7} on {host:>12} device {dev}" for r, (pid, host, dev) in enumerate(where)],
            "#",
            (f"# memcpy reference: torch copy_ of {mem_bytes} B, 1 thread, rank 0 alone: {mem:.2f} GB/s"
             if mem is not None else "# memcpy reference: skipped (--no-memcpy)"),
            *([f"# device-copy reference: torch copy_ of {args.maxbytes} B on {device}, rank 0 alone: "
               f"{dev_copy:.1f} GB/s (bytes copied per second; the memory moves twice that)"]
              if dev_copy is not None else []),
            *([f"# one pass over memory (every input read once, every output written once) at that speed: "
               f"{bound:.1f} GB/s busbw for {nranks} ranks sharing the GPU"]
              if bound is not None else []),
            "#",
            *report.header_lines(with_ratio, bool(oop_form)),
        ])

    rows = []
    skipped = []
    for nbytes in sizes(args):
        shape = C.shape_for(coll, nbytes, elsize, nranks)
        if shape is None:
            skipped.append(nbytes)
            continue
        size_rows = []
        for backend, group in groups.items():
            row = {
                "size": shape.size, "count": shape.count, "type": C.TYPE_NAMES[dtype],
                "redop": redop, "root": root, "backend": backend, "oop": None, "ip": None,
            }
            for form, present in (("oop", oop_form), ("ip", ip_form)):
                if not present:
                    continue
                inst = C.Instance(coll, group, shape, dtype, args.op, args.root, form == "ip", rank, nranks, device)
                row[form] = measure(inst, args, nranks, reset_hops=args.hops and variants.is_gonccl(backend))
                del inst
            if args.hops and variants.is_gonccl(backend):
                res = row["ip"] or row["oop"]
                # The Python share is only meaningful when each op is waited at once.
                row["hops"] = floor.hop_table(res.get("time_us") if args.blocking else None)
            size_rows.append(row)
        if capi is not None:
            if args.hops:
                from gonccl import _C

                _C._hops(True)
            sec = capi.time_per_op(shape.size, args.iters, args.warmup_iters, bool(args.blocking))
            sec = _combine(sec, args.average, nranks)
            algbw = shape.size / sec / 1e9 if sec > 0 else float("nan")
            size_rows.append({
                "size": shape.size, "count": shape.count, "type": C.TYPE_NAMES[dtype], "redop": redop,
                "root": root, "backend": "capi", "oop": None,
                "ip": {"time_us": sec * 1e6, "algbw": algbw, "busbw": algbw * C.busbw_factor(coll, nranks),
                       "wrong": None},
                **({"hops": floor.hop_table()} if args.hops else {}),
            })
        if with_ratio:
            by = {r["backend"]: r for r in size_rows}
            form = "ip" if ip_form else "oop"
            for name in ratioed:
                g, o = by[name][form], by["gloo"][form]
                if g and o and not g.get("error") and not o.get("error") and o["busbw"] > 0:
                    by[name]["ratio"] = g["busbw"] / o["busbw"]
        if say:
            out = []
            for r in size_rows:
                out.append(report.row_line(r, with_ratio, bool(oop_form)))
                if r.get("hops"):
                    out += [f"# hops of the {r['backend']} row above, rank 0, mean per op:", *r["hops"]]
            by = {r["backend"]: r for r in size_rows}
            g, f = (by.get("gonccl") or {}).get("ip"), (by.get("capi") or {}).get("ip")
            if g and f and not g.get("error") and f["time_us"] > 0:
                by["gonccl"]["floor_ratio"] = g["time_us"] / f["time_us"]
            report.print_lines(out)
        rows.extend(size_rows)
    if capi is not None:
        capi.close()

    if not say:
        return 0
    lines = []
    floors = [(r["size"], r["floor_ratio"]) for r in rows if r.get("floor_ratio")]
    if floors:
        lines.append("# gonccl through torch / its C ABI floor (the capi rows), time per op: "
                     + ", ".join(f"{size} B {ratio:.2f}x" for size, ratio in floors))
    if skipped:
        lines.append(f"# skipped sizes that hold no element per rank: {skipped}")
    errors = {}
    for r in rows:
        for form in ("oop", "ip"):
            if r[form] and r[form].get("error"):
                errors.setdefault((r["backend"], form), (r["size"], r[form]["error"]))
    for (backend, form), (size, msg) in errors.items():
        lines.append(f"# {backend} {form} failed (first at size {size}): {msg.splitlines()[0][:300]}")
    total_wrong = 0
    for backend in args.backends:
        vals = []
        for r in rows:
            if r["backend"] != backend:
                continue
            res = r["ip"] if ip_form else r["oop"]
            if res and not res.get("error"):
                vals.append(res["busbw"])
            for form in ("oop", "ip"):
                if r[form] and not r[form].get("error") and r[form]["wrong"]:
                    total_wrong += r[form]["wrong"]
        avg = sum(vals) / len(vals) if vals else float("nan")
        lines.append(f"# {backend:>13}: Avg bus bandwidth    : {avg:.4f} GB/s ({'in' if ip_form else 'out-of'}-place)")
        if dev_copy and vals:
            top = vals[-1]
            frac = f"{100 * top / dev_copy:.1f}% of the device copy"
            if bound:
                frac += f", {100 * top / bound:.1f}% of one pass"
            lines.append(f"# {backend:>13}: largest size {top:.2f} GB/s busbw = {frac}")
    lines.append(f"# Out of bounds values : {total_wrong} {'OK' if total_wrong == 0 else 'FAILED'}")
    report.print_lines(lines + ["#"])

    doc = {
        "tool": "gonccl.bench", "coll": coll, "nranks": nranks, "backends": args.backends,
        "type": C.TYPE_NAMES[dtype], "redop": redop, "root": root,
        "iters": args.iters, "warmup_iters": args.warmup_iters, "check": args.check,
        "time_across_ranks": AVERAGE_NAMES[args.average], "blocking": args.blocking,
        "busbw_factor": C.BUSBW_FACTORS[coll][1], "size_convention": convention,
        "memcpy_GBps": mem, "device_copy_GBps": dev_copy, "one_pass_busbw_GBps": bound, "rows": rows,
    }
    if args.json:
        report.write_json(args.json, doc)
        print(f"# wrote {args.json}", flush=True)
    if args.plot:
        err = report.plot(args.plot, doc)
        if err:
            print(f"# gonccl.bench: {err}", flush=True)
            return 3
        print(f"# wrote {args.plot}", flush=True)
    return 1 if total_wrong else 0

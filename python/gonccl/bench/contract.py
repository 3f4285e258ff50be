"""Bench modes for torch's newer Backend contract: the time estimator against
measurement (--estimate), the measurements the estimator is calibrated with
(--calibrate), and collectives on backend-allocated CPU tensors against ordinary
tensors and Gloo (--alloc).

One rank of the run (launched by gonccl.bench). The default group is Gloo and only
coordinates; the measured groups are made with new_group. Times are per op, each op
waited before the next (the estimator prices one op from issue to completion), the
maximum over ranks.
"""

from __future__ import annotations

import os
import socket
import time
from datetime import datetime, timedelta, timezone

import torch
import torch.distributed as dist

from gonccl.bench import calibration, report

ESTIMATED = ("all_reduce", "all_gather", "reduce_scatter")

# The sizes --estimate compares at, and the denser sweep --calibrate measures (both
# within -b and -e).
ESTIMATE_SIZES = (8, 1 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20)
CALIBRATE_SIZES = (8, 64, 512, 4 << 10, 32 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20)


def _within(sizes, args) -> list[int]:
    return [s for s in sizes if args.minbytes <= s <= args.maxbytes]


def _issue(coll: str, t: torch.Tensor, out: torch.Tensor | None, group):
    if coll == "all_reduce":
        return dist.all_reduce(t, group=group, async_op=True)
    if coll == "all_gather":
        return dist.all_gather_into_tensor(out, t, group=group, async_op=True)
    return dist.reduce_scatter_tensor(out, t, group=group, async_op=True)


def _buffers(coll: str, nbytes: int, nranks: int, alloc=None):
    """The op's tensors for a message of nbytes (all_gather: each rank's block;
    reduce_scatter: each rank's result block), float32, from alloc(n) if given."""
    n = max(1, nbytes // 4)
    make = alloc or (lambda k: torch.empty(k, dtype=torch.float32))
    if coll == "all_reduce":
        t = make(n)
        t.fill_(1.0)
        return t, None
    if coll == "all_gather":
        t = make(n)
        t.fill_(1.0)
        return t, make(n * nranks)
    t = make(n * nranks)
    t.fill_(1.0)
    return t, make(n)


def _time(coll, t, out, group, iters: int, warmup: int) -> float:
    """Seconds per op, the mean over iters ops, each waited before the next; the
    maximum over ranks."""
    for _ in range(warmup):
        _issue(coll, t, out, group).wait()
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        _issue(coll, t, out, group).wait()
    local = (time.perf_counter() - t0) / iters
    m = torch.tensor([local], dtype=torch.float64)
    dist.all_reduce(m, op=dist.ReduceOp.MAX)
    return float(m.item())


def _median_times(cases, group, args, rounds: int = 3) -> dict:
    """Microseconds per op of each (collective, bytes) case, each op waited before the
    next: the median of the ops' own times over `rounds` passes through all the
    cases (so that a stall of a busy host, or another process's burst, moves few ops
    of each case rather than all of one), the maximum over ranks."""
    times = {c: [] for c in cases}
    for _ in range(rounds):
        for c in cases:
            t, out = _buffers(c[0], c[1], dist.get_world_size())
            for _ in range(args.warmup_iters):
                _issue(c[0], t, out, group).wait()
            for _ in range(max(3, _iters(c[1], args.iters) // rounds)):
                s = time.perf_counter()
                _issue(c[0], t, out, group).wait()
                times[c].append(time.perf_counter() - s)
    local = []
    for c in cases:
        ts = sorted(times[c])
        local.append(ts[len(ts) // 2] * 1e6)
    m = torch.tensor(local, dtype=torch.float64)
    dist.all_reduce(m, op=dist.ReduceOp.MAX)
    return dict(zip(cases, m.tolist()))


def _iters(nbytes: int, base: int) -> int:
    return max(3, min(base * 20, (base * 64 << 20) // max(nbytes, 1)))


def _calibration_line(nranks: int) -> str:
    file = calibration.path()
    if file is None:
        return "# calibration: none (GONCCL_CALIBRATION=none): the built-in rates"
    e = calibration.find(file, nranks)
    k = calibration.key(nranks)
    if e is None:
        return (f"# calibration: {file} has no entry for host {k['host']}, {nranks} ranks, {k['transport']}: "
                f"the built-in rates (python -m gonccl.bench --calibrate -np {nranks} writes one)")
    return (f"# calibration: {file}, entry for host {k['host']}, {nranks} ranks, {k['transport']}, "
            f"measured {e.get('measured', '?')}")


def run_calibrate(args) -> int:
    """Times each collective over CALIBRATE_SIZES and writes the times to the
    calibration file as this host's entry for this many ranks and transport."""
    rank, nranks = dist.get_rank(), dist.get_world_size()
    if nranks < 2:
        if rank == 0:
            print("gonccl.bench --calibrate: needs 2 ranks or more (-np)")
        return 2
    file = calibration.path()
    if file is None:
        if rank == 0:
            print("gonccl.bench --calibrate: GONCCL_CALIBRATION=none: nowhere to write; name a file")
        return 2
    g = dist.new_group(backend="gonccl", timeout=timedelta(seconds=args.pg_timeout))
    cases = [(coll, nbytes) for coll in ESTIMATED for nbytes in _within(CALIBRATE_SIZES, args)]
    times = _median_times(cases, g, args, rounds=5)
    points = [{"op": coll, "bytes": nbytes, "us": round(times[coll, nbytes], 2)} for coll, nbytes in cases]
    if rank == 0:
        load = os.getloadavg()[0]
        entry = {**calibration.key(nranks),
                 "measured": f"{datetime.now(timezone.utc):%Y-%m-%dT%H:%M}Z, load {load:.2f}, "
                             f"{os.cpu_count()} cores, torch {torch.__version__}",
                 "points": points}
        calibration.write(file, entry)
        report.print_lines([f"# gonccl.bench --calibrate: wrote {len(points)} points to {file}",
                            f"# entry: host {entry['host']}, {nranks} ranks, {entry['transport']}; {entry['measured']}",
                            f"# {'collective':<15} {'size':>10} {'time(us)':>12}"])
        for p in points:
            print(f"  {p['op']:<15} {p['bytes']:>10} {p['us']:>12.1f}")
    return 0


def run_estimate(args, sizes) -> int:
    rank, nranks = dist.get_rank(), dist.get_world_size()
    g = dist.new_group(backend="gonccl", timeout=timedelta(seconds=args.pg_timeout))
    say = rank == 0
    if say:
        load = os.getloadavg()
        report.print_lines([
            f"# gonccl.bench --estimate: nranks {nranks}, float32, each op waited before the next, "
            f"measured = median op time, max over ranks; torch {torch.__version__}",
            f"# host {socket.gethostname()}, {os.cpu_count()} cores, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}",
            "# estimate: dist._time_estimator (gonccl's cost model); ratio = measured / estimate",
            _calibration_line(nranks),
            "# size: all_reduce the buffer, all_gather each rank's input, reduce_scatter each rank's output",
        ])
    cases = [(coll, nbytes) for coll in ESTIMATED for nbytes in sizes]
    estimates = {}
    for coll, nbytes in cases:
        t, out = _buffers(coll, nbytes, nranks)
        try:
            with dist._time_estimator(group=g) as est:
                _issue(coll, t, out, g).wait()
        except NotImplementedError as e:
            if say:
                print(f"gonccl.bench: the time estimator needs torch 2.15 or newer: {e}")
            return 1
        estimates[coll, nbytes] = est.estimated_time
    measured = _median_times(cases, g, args)
    worst = 0.0
    for coll in ESTIMATED:
        if say:
            report.print_lines([f"#\n# {coll}", f"# {'size':>10} {'estimate(us)':>13} {'measured(us)':>13} {'ratio':>7}"])
        for nbytes in sizes:
            e, m = estimates[coll, nbytes], measured[coll, nbytes]
            worst = max(worst, m / e, e / m)
            if say:
                print(f"  {nbytes:>10} {e:>13.1f} {m:>13.1f} {m / e:>7.2f}", flush=True)
    if say:
        print(f"# worst ratio (either way): {worst:.2f}x")
    return 0


ALLOC_BUSBW = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
               "reduce_scatter": lambda n: (n - 1) / n}


def run_alloc(args, sizes) -> int:
    """Each collective at each size on allocate_tensor tensors (gonccl's shared memory:
    zero-copy where every rank's tensors are such), on torch.empty tensors, and on Gloo.
    Sizes as nccl-tests count them: all_reduce's buffer, all_gather's output and
    reduce_scatter's input (every rank's blocks together)."""
    rank, nranks = dist.get_rank(), dist.get_world_size()
    timeout = timedelta(seconds=args.pg_timeout)
    g = dist.new_group(backend="gonccl", timeout=timeout)
    gloo = dist.new_group(backend="gloo", timeout=timeout)
    backend = g._get_backend(torch.device("cpu"))

    def shared(k):
        return backend.allocate_tensor(k, dtype=torch.float32, device=torch.device("cpu"))

    variants = (("gonccl allocate_tensor", g, shared), ("gonccl torch.empty", g, None), ("gloo torch.empty", gloo, None))
    if rank == 0:
        report.print_lines([
            f"# gonccl.bench --alloc: nranks {nranks}, float32, each op waited before the next, "
            f"time = max over ranks; torch {torch.__version__}",
            "# size: all_reduce's buffer, all_gather's output, reduce_scatter's input; busbw = size/time x "
            "2(n-1)/n (all_reduce) or (n-1)/n (the others), as nccl-tests",
            "# vs empty: time / gonccl's on torch.empty tensors; vs gloo: time / Gloo's (below 1: faster)",
            f"# {'collective':<15} {'size':>10} {'tensor':<24} {'time(us)':>10} {'busbw(GB/s)':>11} "
            f"{'vs empty':>9} {'vs gloo':>8}",
        ])
    for coll in ESTIMATED:
        for nbytes in sizes:
            per = nbytes if coll == "all_reduce" else max(4, nbytes // nranks)
            size = per if coll == "all_reduce" else per * nranks
            times = {}
            for label, group, alloc in variants:
                t, out = _buffers(coll, per, nranks, alloc)
                times[label] = _time(coll, t, out, group, _iters(size, args.iters), args.warmup_iters) * 1e6
                del t, out
            if rank == 0:
                for label, us in times.items():
                    busbw = size / (us * 1e-6) / 1e9 * ALLOC_BUSBW[coll](nranks)
                    print(f"  {coll:<15} {size:>10} {label:<24} {us:>10.0f} {busbw:>11.2f} "
                          f"{us / times['gonccl torch.empty']:>9.2f} {us / times['gloo torch.empty']:>8.2f}",
                          flush=True)
    return 0


def run(args, sizes) -> int:
    rank = int(os.environ["RANK"])
    nranks = int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", rank=rank, world_size=nranks, timeout=timedelta(seconds=args.pg_timeout))
    try:
        if args.calibrate:
            return run_calibrate(args)
        if args.estimate:
            return run_estimate(args, _within(ESTIMATE_SIZES, args))
        return run_alloc(args, sizes)
    finally:
        dist.destroy_process_group()

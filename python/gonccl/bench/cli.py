"""Command line of gonccl.bench, and the launcher of its own ranks (-np N)."""

from __future__ import annotations

import argparse
import ctypes
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

from gonccl._ports import free_port
from gonccl.bench.collectives import COLLECTIVES, DTYPES, OPS

_SUFFIX = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_bytes(text: str) -> int:
    """'8', '64M', '1G', '4k' -> bytes (binary multiples, as nccl-tests)."""
    m = re.fullmatch(r"\s*(\d+)\s*([kKmMgGtT]?)[bB]?\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (use e.g. 8, 256K, 64M, 1G)")
    return int(m.group(1)) * _SUFFIX[m.group(2).upper()]


class _Help(argparse.HelpFormatter):
    """Appends "(default: X)" where there is a default to state: not for switches, nor
    for options whose help names their default itself."""

    def _get_help_string(self, action):
        text = action.help or ""
        if (action.default is None or isinstance(action.default, bool) or action.default is argparse.SUPPRESS
                or "default:" in text.lower() or action.nargs == 0 or not action.option_strings):
            return text
        return text + " (default: %(default)s)"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m gonccl.bench",
        description=(
            "nccl-tests-style benchmark of torch.distributed backends on CPU or CUDA tensors "
            "(--device). Prints size, count, type, redop, root and, out-of-place (where torch "
            "has that form) and in-place, time (us), algbw and busbw (GB/s, busbw factors of "
            "nccl-tests' PERFORMANCE.md) and #wrong, one row per backend. Launches -np ranks "
            "itself, or runs as one rank under torchrun (RANK/WORLD_SIZE set). `ddp` times the "
            "DDP training step of examples/ddp_example.py instead."
        ),
        formatter_class=_Help,
    )
    p.add_argument("coll_pos", nargs="?", metavar="COLLECTIVE", choices=[*COLLECTIVES, "ddp"],
                   help=f"one of {', '.join(COLLECTIVES)}, or ddp")
    p.add_argument("--coll", choices=[*COLLECTIVES, "ddp"], help="the collective (instead of the positional)")
    p.add_argument("-b", "--minbytes", type=parse_bytes, default="8", help="smallest size (K/M/G)")
    p.add_argument("-e", "--maxbytes", type=parse_bytes, default="64M", help="largest size (K/M/G)")
    p.add_argument("-f", "--stepfactor", type=int, default=4, help="multiply the size by this between rows")
    p.add_argument("-i", "--stepbytes", type=parse_bytes, default="0", help="add this instead (with -f 1)")
    p.add_argument("-o", "--op", choices=list(OPS), default="sum", help="reduction")
    p.add_argument("-d", "--datatype", choices=list(DTYPES), default="float", help="element type")
    p.add_argument("-r", "--root", type=int, default=0, help="root of broadcast and reduce")
    p.add_argument("-n", "--iters", type=int, default=5, help="timed iterations (ddp: timed steps)")
    p.add_argument("-w", "--warmup_iters", type=int, default=2, help="untimed warm-up iterations")
    p.add_argument("-c", "--check", type=int, default=1,
                   help="check iterations against a reference before timing (0: no check)")
    p.add_argument("-z", "--blocking", type=int, choices=(0, 1), default=0,
                   help="0: issue all iterations async then wait (nccl-tests' default); 1: wait each")
    p.add_argument("-a", "--average", type=int, choices=(0, 1, 2, 3), default=3,
                   help="time across ranks: 0 rank 0, 1 average, 2 min, 3 max (nccl-tests' default is 1)")
    p.add_argument("--backends", default=None,
                   help="comma-separated backends to measure in this run: torch backends (gonccl, gloo, nccl) "
                        "and gonccl-auto / gonccl-samegpu / gonccl-model / gonccl-device / gonccl-staged "
                        "(gonccl with GONCCL_DEVICE_PATH=auto / =samegpu / =model / =1 / =0), "
                        "gonccl-plain / gonccl-tls (gonccl with GONCCL_TLS=0 / =1), "
                        "gonccl-noresume (GONCCL_LINK_RETRY_MS=0). "
                        "Default: gonccl,gloo on cpu; gonccl-auto,gonccl-samegpu,gonccl-device,gonccl-staged,gloo on cuda, "
                        "and nccl where every rank has a GPU of its own")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                   help="where the tensors live (cuda: rank r uses GPU r %% count)")
    p.add_argument("-np", "--nprocs", type=int, default=2, help="ranks to launch (ignored under torchrun)")
    p.add_argument("--timeout", type=float, default=1800.0,
                   help="seconds before the launched ranks are killed")
    p.add_argument("--pg-timeout", type=float, default=300.0, help="process-group timeout, seconds")
    p.add_argument("--json", metavar="FILE", help="write the results as JSON")
    p.add_argument("--plot", metavar="FILE.png", help="draw busbw against size per backend (matplotlib)")
    p.add_argument("--no-memcpy", dest="memcpy", action="store_false",
                   help="skip the memcpy reference measurements (a host memcpy of max(-e, 64M) bytes; on cuda "
                        "also the device copy); they are made unless this is given")
    p.add_argument("--no-floor", dest="floor", action="store_false",
                   help="skip the C ABI floor row (all_reduce, float sum, cpu: the same op over the same "
                        "processes through libgonccl's C ABI, without torch)")
    p.add_argument("--hops", action="store_true",
                   help="time each hop of gonccl's path (sets GONCCL_DEBUG_HOPS=1) and print rank 0's "
                        "per-op means under each gonccl and C ABI row")
    g = p.add_argument_group("other measurements (each a run of its own, instead of the table)")
    g.add_argument("--estimate", action="store_true",
                   help="compare dist._time_estimator's estimate (gonccl's cost model) with the measured time "
                        "of all_reduce, all_gather and reduce_scatter at 8, 1K, 64K, 1M, 16M and 64M bytes "
                        "(within -b and -e; torch 2.15+)")
    g.add_argument("--calibrate", action="store_true",
                   help="time all_reduce, all_gather and reduce_scatter from 8 B to 64 MiB (within -b and -e) "
                        "and write the times to the estimator's calibration file (GONCCL_CALIBRATION, default "
                        "~/.cache/gonccl/calibration.json) as this host's entry for -np ranks")
    g.add_argument("--alloc", action="store_true",
                   help="time all_reduce, all_gather and reduce_scatter at each size from -b to -e on tensors "
                        "from gonccl's allocate_tensor (zero-copy collectives), on torch.empty tensors, and on "
                        "Gloo, in one run (e.g. --alloc -b 1M -e 64M -f 8)")
    g = p.add_argument_group("ddp")
    g.add_argument("--size", type=int, default=4000, help="ToyModel width, as in examples/ddp_example.py")
    g.add_argument("--batch", type=int, default=1000, help="batch size, as in examples/ddp_example.py")
    g.add_argument("--rounds", type=int, default=1, help="times each backend is measured, in turns")
    return p


def parse_args(argv=None):
    p = build_parser()
    args = p.parse_args(argv)
    if args.coll_pos and args.coll and args.coll_pos != args.coll:
        p.error(f"two collectives given: {args.coll_pos} and --coll {args.coll}")
    args.coll = args.coll or args.coll_pos or "all_reduce"
    if args.backends is not None:  # None: variants.default_backends, in the ranks
        args.backends = [b.strip() for b in args.backends.split(",") if b.strip()]
        if not args.backends:
            p.error("--backends is empty")
        if len(set(args.backends)) != len(args.backends):
            p.error("--backends names a backend twice")
    if sum((args.estimate, args.alloc, args.calibrate)) > 1:
        p.error("--estimate, --calibrate and --alloc are separate runs")
    if args.minbytes > args.maxbytes:
        p.error("-b is larger than -e")
    if args.stepfactor < 1 or args.iters < 1 or args.warmup_iters < 0 or args.check < 0:
        p.error("-f and -n must be >= 1, -w and -c >= 0")
    if args.nprocs < 1:
        p.error("-np must be >= 1")
    if args.plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            p.error(f"--plot needs matplotlib, which is not installed: "
                    f"`{sys.executable} -m pip install matplotlib`")
    return args


# ------------------------------------------------------------------- launcher

_PR_SET_PDEATHSIG = 1


def _die_with_parent():
    libc = ctypes.CDLL(None, use_errno=True)
    parent = os.getpid()

    def preexec():
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:
            os._exit(122)

    return preexec


def _child_argv(argv=None) -> list[str]:
    """The ranks' command line: this process's own (so ranks start exactly as we were
    started, e.g. through bench/run.py), or `-m gonccl.bench argv` if main() was called
    with explicit arguments."""
    if argv is not None:
        return [sys.executable, "-m", "gonccl.bench", *argv]
    orig = getattr(sys, "orig_argv", None)
    if orig:
        return [sys.executable, *orig[1:]]
    return [sys.executable, "-m", "gonccl.bench", *sys.argv[1:]]


def _kill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # its own session, started by us
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.kill()
        except ProcessLookupError:
            pass


def launch(args, argv=None) -> int:
    """Runs args.nprocs ranks of this same command; rank 0's output is ours."""
    n = args.nprocs
    port = free_port()
    argv = _child_argv(argv)
    procs: list[subprocess.Popen] = []
    errs = []
    start = time.monotonic()
    failed_at = None
    rc_out = 0
    try:
        for r in range(n):
            env = dict(os.environ)
            env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(r), WORLD_SIZE=str(n),
                       LOCAL_RANK=str(r), LOCAL_WORLD_SIZE=str(n), PYTHONUNBUFFERED="1",
                       GONCCL_BENCH_LAUNCHED="1")
            # N ranks share the cores: one intra-op thread each unless told otherwise
            env.setdefault("OMP_NUM_THREADS", "1")
            err = tempfile.TemporaryFile()
            errs.append(err)
            procs.append(subprocess.Popen(
                argv, env=env, stdin=subprocess.DEVNULL,
                stdout=None if r == 0 else subprocess.DEVNULL,
                stderr=err, start_new_session=True, preexec_fn=_die_with_parent(),
            ))
        while True:
            codes = [p.poll() for p in procs]
            if all(c is not None for c in codes):
                break
            if failed_at is None and any(c not in (None, 0) for c in codes):
                failed_at = time.monotonic()
            if failed_at is not None and time.monotonic() - failed_at > 20:
                print("gonccl.bench: a rank failed; killing the others", file=sys.stderr)
                rc_out = 1
                break
            if time.monotonic() - start > args.timeout:
                print(f"gonccl.bench: timed out after {args.timeout:.0f} s (--timeout); killing the ranks",
                      file=sys.stderr)
                rc_out = 124
                break
            time.sleep(0.05)
    except KeyboardInterrupt:
        rc_out = 130
    finally:
        for p in procs:
            _kill(p)
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
    for r, (p, err) in enumerate(zip(procs, errs)):
        err.seek(0)
        text = err.read().decode(errors="replace")
        err.close()
        if p.returncode == 0 and r == 0:
            text, dropped = without_warnings(text)
            if dropped:
                print(f"gonccl.bench: rank 0 printed {dropped} Python warning(s) of the libraries it ran "
                      "(not gonccl's results; not shown)", file=sys.stderr)
        if p.returncode != 0 or (r == 0 and text.strip()):
            if text.strip():
                sys.stderr.write(f"---- rank {r} (exit {p.returncode}) stderr:\n{text}")
    rc0 = procs[0].returncode if procs else 1
    if rc_out:
        return rc_out
    if any(p.returncode != 0 for p in procs[1:]):
        return 1
    return rc0 if rc0 is not None and rc0 >= 0 else 1


_WARNING = re.compile(r"^\S.*:\d+: \w*Warning: ")


def without_warnings(text: str) -> tuple[str, int]:
    """text without the Python warnings in it (each "file:line: SomeWarning: message"
    with the indented source line after it), and how many there were."""
    kept, dropped, skip_indented = [], 0, False
    for line in text.splitlines(keepends=True):
        if _WARNING.match(line):
            dropped, skip_indented = dropped + 1, True
            continue
        if skip_indented and line.startswith((" ", "\t")):
            continue
        skip_indented = False
        kept.append(line)
    return "".join(kept), dropped


def main(argv=None) -> int:
    args = parse_args(argv)
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        if args.device == "cuda":
            import torch

            if not torch.cuda.is_available():
                print("gonccl.bench: --device cuda: torch sees no GPU on this machine; nothing was measured",
                      file=sys.stderr)
                return 2
        return launch(args, None if argv is None else list(argv))
    if args.estimate or args.alloc or args.calibrate:
        from gonccl.bench import contract, worker

        return contract.run(args, worker.sizes(args))
    if args.coll == "ddp":
        from gonccl.bench import ddp

        return ddp.run(args)
    from gonccl.bench import worker

    return worker.run(args)

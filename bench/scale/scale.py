"""Scale benchmark: N ranks as separate C ABI processes on this machine.

    python bench/scale/scale.py [-np 64 128 256] [--lib build/lib/libgonccl.so]

Compiles bench/scale/scale.c against gonccl.h and the library, starts N processes per
size (each a plain C program: no torch, no Python per rank), and prints per size the
init time (max and median over ranks), the fds each rank holds after init (max), the
first and second 8-byte all_reduce (max; the first includes connections made on demand)
and whether every result was exact. Every child dies with this script (timeout 600 s).
"""

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def build(lib, out):
    libdir = os.path.dirname(os.path.abspath(lib))
    cmd = ["gcc", "-O2", "-o", out, os.path.join(HERE, "scale.c"), "-I", os.path.join(ROOT, "capi"),
           "-L", libdir, "-lgonccl", f"-Wl,-rpath,{libdir}"]
    subprocess.run(cmd, check=True)


def run(exe, n, timeout):
    with tempfile.TemporaryDirectory() as d:
        idf = os.path.join(d, "id")
        env = dict(os.environ)
        procs = [subprocess.Popen([exe, str(r), str(n), idf], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  env=env, start_new_session=True) for r in range(n)]
        deadline = time.time() + timeout
        rows, errs = [], []
        try:
            for p in procs:
                out, err = p.communicate(timeout=max(1, deadline - time.time()))
                if p.returncode != 0:
                    errs.append(err.decode(errors="replace").strip()[:400])
                for line in out.decode().splitlines():
                    rows.append(json.loads(line))
        finally:
            for p in procs:
                if p.poll() is None:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait()
        return rows, errs


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-np", type=int, nargs="+", default=[64, 128, 256])
    ap.add_argument("--lib", default=os.path.join(ROOT, "build", "lib", "libgonccl.so"))
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--json", help="write the per-size summary here")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        exe = os.path.join(d, "scale")
        build(a.lib, exe)
        print(f"{'ranks':>6} {'init max s':>10} {'init med s':>10} {'fds max':>8} {'fds med':>8} "
              f"{'1st ar max s':>12} {'2nd ar max s':>12} {'fds end':>8} exact")
        summary = []
        for n in a.np:
            rows, errs = run(exe, n, a.timeout)
            if errs or len(rows) != n:
                print(f"{n:>6} FAILED: {len(rows)} of {n} ranks reported; {len(errs)} errors, first: {errs[:1]}")
                summary.append({"ranks": n, "failed": True})
                continue
            s = {
                "ranks": n,
                "init_max_s": max(r["init_s"] for r in rows),
                "init_median_s": statistics.median(r["init_s"] for r in rows),
                "fds_max": max(r["fds_init"] for r in rows),
                "fds_median": statistics.median(r["fds_init"] for r in rows),
                "first_allreduce_max_s": max(r["first_allreduce_s"] for r in rows),
                "second_allreduce_max_s": max(r["second_allreduce_s"] for r in rows),
                "fds_after_max": max(r["fds_after"] for r in rows),
                "exact": all(r["exact"] for r in rows),
            }
            summary.append(s)
            print(f"{n:>6} {s['init_max_s']:>10.3f} {s['init_median_s']:>10.3f} {s['fds_max']:>8} "
                  f"{s['fds_median']:>8.0f} {s['first_allreduce_max_s']:>12.3f} "
                  f"{s['second_allreduce_max_s']:>12.3f} {s['fds_after_max']:>8} {s['exact']}")
            sys.stdout.flush()
        if a.json:
            with open(a.json, "w") as f:
                json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main()

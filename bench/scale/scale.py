"""Scale benchmark: N ranks as separate C ABI processes on this machine.

    python bench/scale/scale.py [-np 64 128 256] [--lib build/lib/libgonccl.so]
    python bench/scale/scale.py --hosts 16 -np 256 --loop 10    (root: 16 hosts x 16 ranks)

Compiles bench/scale/scale.c against gonccl.h and the library, starts N processes per
size (each a plain C program: no torch, no Python per rank), and prints per size the
init time (max and median over ranks), the fds each rank holds after init and at the
end (max), the first and second all_reduce of 8 bytes and of 1 MiB in ordinary memory
(max over ranks; the first of each includes the connections made on demand), with
--alloc the same again in buffers from goncclMemAlloc (the zero-copy path's memory),
with --loop N the mean time of N more 1 MiB all_reduces back to back, then of N of 8 B, and whether every
result was exact, and the peak RSS of a rank (max). Every child dies with this script
(timeout 600 s).

--hosts H spreads the N ranks over H "hosts", network namespaces on one bridge
(bench/scale/hosts.py; needs root): ranks r*N/H.. of host r, ranks of one host sharing
memory, hosts talking TCP over the bridge (GONCCL_SOCKET_IFNAME==gnh); --ipv6 gives the
hosts IPv6 addresses only. The namespaces are removed however the run ends.

The ranks start init together, once every process exists (they wait on a FIFO this
script opens after starting the last), as in a job whose launcher hands the unique id out
after starting every process (MPI_Bcast); so init is the library's, not how long this
script took to start 256 processes (0.7 s here). --staggered lets each rank start init as
soon as it has the unique id, as before 2026-11-29 (rank 0's init then includes the
spawning of all the others).
"""

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import hosts as hosts_mod  # noqa: E402
ROOT = os.path.dirname(os.path.dirname(HERE))


def build(lib, out):
    libdir = os.path.dirname(os.path.abspath(lib))
    cmd = ["gcc", "-O2", "-o", out, os.path.join(HERE, "scale.c"), "-I", os.path.join(ROOT, "capi"),
           "-L", libdir, "-lgonccl", f"-Wl,-rpath,{libdir}"]
    subprocess.run(cmd, check=True)


def run(exe, n, timeout, alloc=False, staggered=False, loop=0, hosts=None, pidns=False):
    """Runs n ranks (spread over hosts, a hosts.Hosts, if given); returns their JSON rows
    and the errors of those that failed."""
    with tempfile.TemporaryDirectory() as d:
        idf = os.path.join(d, "id")
        env = dict(os.environ)
        env["SCALE_LOOP"] = str(loop)
        per_host = n // hosts.n if hosts else n
        if hosts:
            env["GONCCL_SOCKET_IFNAME"] = "=" + hosts_mod.IFNAME
        fifo = os.path.join(d, "start")
        start = None
        if not staggered:
            # Held open (read-write: it does not block) until every rank exists; each
            # rank waits for its end-of-file before init.
            os.mkfifo(fifo)
            start = os.open(fifo, os.O_RDWR)
            env["SCALE_START_FIFO"] = fifo
        def argv(r):
            a = [exe, str(r), str(n), idf, "1" if alloc else "0"]
            if pidns:
                a = ["unshare", "--pid", "--fork", "--mount-proc", *a]
            return hosts.wrap(r // per_host, a) if hosts else a

        procs = [subprocess.Popen(argv(r), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  env=env, start_new_session=True) for r in range(n)]
        if start is not None:
            os.close(start)  # every rank's read of the FIFO ends: all start init
        deadline = time.time() + timeout
        rows, errs = [], []
        try:
            for p in procs:
                out, err = p.communicate(timeout=max(1, deadline - time.time()))
                if p.returncode != 0:
                    errs.append(f"[rank {procs.index(p)} exit {p.returncode}] " + err.decode(errors="replace").strip())
                for line in out.decode().splitlines():
                    rows.append(json.loads(line))
        finally:
            for p in procs:
                if p.poll() is None:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait()
        return rows, errs


# The columns of the table: (summary key, per-rank key, header, format); max over ranks.
COLUMNS = [
    ("init_max_s", "init_s", "init s", ".2f"),
    ("fds_max", "fds_init", "fds", "d"),
    ("first_allreduce_max_s", "first_allreduce_s", "8B 1st s", ".3f"),
    ("second_allreduce_max_s", "second_allreduce_s", "8B 2nd s", ".3f"),
    ("first_1mib_max_s", "first_1mib_s", "1M 1st s", ".3f"),
    ("second_1mib_max_s", "second_1mib_s", "1M 2nd s", ".3f"),
    ("alloc_first_1mib_max_s", "alloc_first_1mib_s", "1M alloc 1st", ".3f"),
    ("alloc_second_1mib_max_s", "alloc_second_1mib_s", "1M alloc 2nd", ".3f"),
    ("loop_1mib_max_s", "loop_1mib_s", "1M loop s/op", ".3f"),
    ("loop_8b_max_s", "loop_8b_s", "8B loop s/op", ".4f"),
    ("fds_after_max", "fds_after", "fds end", "d"),
    ("rss_peak_max_mib", "rss_peak_mib", "RSS MiB", ".1f"),
]


def summarize(n, rows):
    """The per-size summary: each column's max over ranks, the median init and fds, exactness."""
    s = {"ranks": n, "init_median_s": statistics.median(r["init_s"] for r in rows),
         "fds_median": statistics.median(r["fds_init"] for r in rows), "exact": all(r["exact"] for r in rows)}
    for key, per_rank, _, _ in COLUMNS:
        s[key] = max(r[per_rank] for r in rows)
    return s


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-np", type=int, nargs="+", default=[64, 128, 256])
    ap.add_argument("--lib", default=os.path.join(ROOT, "build", "lib", "libgonccl.so"))
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--alloc", action="store_true", help="also all_reduce 8 B and 1 MiB in goncclMemAlloc buffers")
    ap.add_argument("--json", help="write the per-size summary here")
    ap.add_argument("--staggered", action="store_true",
                    help="each rank starts init when it has the unique id, not all together once every rank exists")
    ap.add_argument("--loop", type=int, default=0, metavar="N",
                    help="then N more 1 MiB all_reduces back to back, then N of 8 B: the columns '1M loop s/op' and "
                         "'8B loop s/op' are their mean times "
                         "(max over ranks), where one operation's skew between ranks is not paid again by the next")
    ap.add_argument("--hosts", type=int, default=0, metavar="H",
                    help="spread the ranks over H network namespaces on one bridge (root); -np must be a multiple of H")
    ap.add_argument("--ipv6", action="store_true", help="with --hosts: the hosts have IPv6 (ULA) addresses only")
    ap.add_argument("--pid-namespaces", action="store_true",
                    help="start each rank in a pid namespace of its own, with its own /proc (unshare; root), as "
                         "containers sharing a network namespace but not a pid namespace")
    a = ap.parse_args()
    if a.hosts:
        bad = [n for n in a.np if n % a.hosts]
        if bad:
            ap.error(f"-np {bad} is not a multiple of --hosts {a.hosts}")
        if hosts_mod.why_not():
            ap.error(f"--hosts: {hosts_mod.why_not()}")
    cols = [c for c in COLUMNS if (a.alloc or not c[0].startswith("alloc_")) and (a.loop or not c[0].startswith("loop_"))]
    with tempfile.TemporaryDirectory() as d, (
            hosts_mod.Hosts(a.hosts, prefix="gncs", ipv6=a.ipv6) if a.hosts else contextlib.nullcontext()) as hosts:
        exe = os.path.join(d, "scale")
        build(a.lib, exe)
        if hosts:
            print(f"# {a.hosts} hosts (network namespaces on one bridge, IPv{6 if a.ipv6 else 4}), "
                  "ranks spread evenly, consecutive ranks on one host")
        print("# times: seconds, max over ranks; fds: max over ranks; 1st includes connections made on demand; "
              + ("each rank starts init once it has the unique id" if a.staggered else "ranks start init together, once all exist"))
        print(f"{'ranks':>6} " + " ".join(f"{c[2]:>12}" for c in cols) + f" {'wall s':>7} exact")
        summary = []
        for n in a.np:
            t0 = time.time()
            rows, errs = run(exe, n, a.timeout, a.alloc, a.staggered, a.loop, hosts, a.pid_namespaces)
            wall = time.time() - t0
            if errs or len(rows) != n:
                # The earliest logged line of any rank is closest to the cause.
                logged = sorted(ln for e in errs for ln in e.splitlines() if ln[:2] == "20")
                first = (logged or [e.splitlines()[-1] for e in errs if e] or [""])[0]
                print(f"{n:>6} FAILED after {wall:.1f} s: {len(rows)} of {n} ranks reported; "
                      f"{len(errs)} errors, the earliest: {first[:600]}")
                # A rank whose error does not blame another (or that died by a signal)
                # is where to look first.
                if os.environ.get("SCALE_DUMP"):
                    with open(os.environ["SCALE_DUMP"], "w") as f:
                        f.write("\n\n".join(errs))
                for e in [e for e in errs if "lost rank" not in e][:3]:
                    print("    " + e[-1500:].replace("\n", "\n    "))
                summary.append({"ranks": n, "failed": True, "wall_s": wall})
                continue
            s = summarize(n, rows)
            s["wall_s"] = wall
            s["hosts"] = a.hosts or 1
            summary.append(s)
            print(f"{n:>6} " + " ".join(f"{s[c[0]]:>12{c[3]}}" for c in cols) + f" {wall:>7.1f} {s['exact']}")
            sys.stdout.flush()
        if a.json:
            with open(a.json, "w") as f:
                json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main()

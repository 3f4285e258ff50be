#!/usr/bin/env python3
"""What TLS costs between hosts: gonccl with GONCCL_TLS=0 and =1 (and Gloo) in one
`python -m gonccl.bench` run across two network namespaces (scripts/two-hosts.sh
bench: 2 hosts x 2 ranks), then a table of the two side by side.

    sudo bench/tls.py                       # all_reduce, 8 B to 256 MiB, factor 2
    sudo bench/tls.py -e 64M -n 10          # other gonccl.bench arguments replace the defaults
    sudo bench/tls.py --rounds 3 -b 64M -e 64M   # 3 runs; per size the best time of each

It makes a throwaway CA and certificate with the openssl CLI (as docs/security.md
shows), passes them through GONCCL_TLS_CERT / _KEY / _CA, and prints, per size, both
variants' time and in-place busbw and the ratio TLS / plain of their times. With
`--rounds N` it runs the bench N times and keeps, per size and variant, the best
(smallest) time: on a shared machine other processes only ever add time. Needs root
and `ip netns` (as two-hosts.sh does) and openssl.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(os.path.dirname(HERE), "scripts", "two-hosts.sh")
DEFAULT = ["all_reduce", "-b", "8", "-e", "256M", "-f", "2"]


def make_certs(d: str) -> dict:
    """A CA and one certificate it signs, in d; their GONCCL_TLS environment."""
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    for args in (["req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "1", "-subj", "/CN=bench CA"],
                 ["req", *ec, "-keyout", "rank.key", "-out", "rank.csr", "-subj", "/CN=bench rank"],
                 ["x509", "-req", "-in", "rank.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                  "-days", "1", "-out", "rank.pem"]):
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)
    return {"GONCCL_TLS_CERT": os.path.join(d, "rank.pem"), "GONCCL_TLS_KEY": os.path.join(d, "rank.key"),
            "GONCCL_TLS_CA": os.path.join(d, "ca.pem")}


def side_by_side(docs: list[dict]) -> list[str]:
    """One line per size: plain and TLS time (us) and busbw (GB/s), in-place, and TLS/plain,
    each variant's best of the runs in docs."""
    by: dict[int, dict] = {}
    for doc in docs:
        for r in doc["rows"]:
            res = r.get("ip") or r.get("oop")
            if not res or res.get("error"):
                continue
            best = by.setdefault(r["size"], {})
            if r["backend"] not in best or res["time_us"] < best[r["backend"]]["time_us"]:
                best[r["backend"]] = res
    out = [f"{'size (B)':>12} {'plain us':>11} {'tls us':>11} {'plain GB/s':>10} {'tls GB/s':>9} {'tls/plain':>9}"]
    for size in sorted(by):
        p, t = by[size].get("gonccl-plain"), by[size].get("gonccl-tls")
        if not p or not t:
            continue
        out.append(f"{size:>12} {p['time_us']:>11.1f} {t['time_us']:>11.1f} {p['busbw']:>10.3f} {t['busbw']:>9.3f} "
                   f"{t['time_us'] / p['time_us']:>8.2f}x")
    return out


def main() -> int:
    if shutil.which("openssl") is None:
        print("bench/tls.py: needs the openssl command", file=sys.stderr)
        return 2
    args = sys.argv[1:]
    rounds = 1
    if "--rounds" in args:
        i = args.index("--rounds")
        rounds = int(args[i + 1])
        del args[i:i + 2]
    if not args or args[0].startswith("-"):
        args = DEFAULT[:1] + (args or DEFAULT[1:])
    docs = []
    with tempfile.TemporaryDirectory(prefix="gonccl-tls-bench-") as d:
        os.chmod(d, 0o755)
        env = dict(os.environ, **make_certs(d))
        for n in range(rounds):
            out = os.path.join(d, f"bench{n}.json")
            cmd = [SCRIPT, "bench", *args, "--backends", "gonccl-plain,gonccl-tls,gloo", "--no-floor", "--json", out]
            print(f"# round {n + 1} of {rounds}: " + " ".join(cmd), flush=True)
            rc = subprocess.run(cmd, env=env).returncode
            if rc != 0 or not os.path.exists(out):
                print(f"# round {n + 1} failed (exit status {rc}); the table holds the rounds before it", flush=True)
                break
            with open(out) as f:
                docs.append(json.load(f))
    if not docs:
        return rc or 1
    print(f"#\n# TLS against plain TCP, in-place, best of {len(docs)} run(s) each (the variants alternate per size):")
    for line in side_by_side(docs):
        print(line)
    return 0 if len(docs) == rounds else 1


if __name__ == "__main__":
    sys.exit(main())

"""Summarises the 2-8 rank A/B files of a results folder (argument) as markdown tables."""

import json
import os
import re
import statistics
import sys

d = sys.argv[1]


def bench(path):
    rows = {}
    if not os.path.exists(path):
        return rows
    for ln in open(path):
        m = re.match(r"\s+(\d+)\s+\d+\s+\w+\s+\w+\s+-?\d+\s+gonccl\s+([\d.]+)", ln)
        if m:
            rows[int(m.group(1))] = float(m.group(2))
    return rows


out = []
out.append("### scale.py -np 2 4 8 --loop N (C ABI processes; s per op, max over ranks)\n")
out.append("| ranks | lib | 1 MiB loop s/op, rounds 1/2/3 | median | 8 B loop s/op, rounds 1/2/3 | median |")
out.append("|---|---|---|---|---|---|")
for n in (2, 4, 8):
    for lib in ("base", "new"):
        a, b = [], []
        for r in (1, 2, 3):
            f = f"{d}/scale-{lib}-r{r}.json"
            if not os.path.exists(f):
                continue
            for s in json.load(open(f)):
                if s["ranks"] == n and not s.get("failed"):
                    a.append(s["loop_1mib_max_s"])
                    b.append(s["loop_8b_max_s"])
        if a:
            out.append(f"| {n} | {lib} | {' / '.join(f'{x*1e3:.2f} ms' for x in a)} | {statistics.median(a)*1e3:.2f} ms | {' / '.join(f'{x*1e6:.0f} us' for x in b)} | {statistics.median(b)*1e6:.0f} us |")
for name, title in (("ar2", "all_reduce, 2 ranks"), ("ar4", "all_reduce, 4 ranks"), ("rs4", "reduce_scatter, 4 ranks (size: the whole input)")):
    out.append(f"\n### python -m gonccl.bench {title}: time (us), max over ranks, mean of 20 iters\n")
    sizes = sorted(bench(f"{d}/{name}-new-r1.txt"))
    out.append("| size | base r1/r2/r3 | base median | new r1/r2/r3 | new median | new/base (medians) |")
    out.append("|---|---|---|---|---|---|")
    for sz in sizes:
        med = {}
        cells = {}
        for lib in ("base", "new"):
            v = [bench(f"{d}/{name}-{lib}-r{r}.txt").get(sz) for r in (1, 2, 3)]
            v = [x for x in v if x is not None]
            cells[lib] = " / ".join(f"{x:.0f}" for x in v)
            med[lib] = statistics.median(v) if v else float("nan")
        out.append(f"| {sz} | {cells['base']} | {med['base']:.0f} | {cells['new']} | {med['new']:.0f} | {med['new']/med['base']:.2f} |")
print("\n".join(out))

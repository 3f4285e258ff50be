"""Prints the 256-process table of README.md from the scale256-*.json files and the load
averages in scale256-final-ab.log (python summarize.py)."""
import json
import os
import re

HERE = os.path.dirname(os.path.abspath(__file__))
loads = {}
for ln in open(os.path.join(HERE, "scale256-final-ab.log")):
    m = re.match(r"\S+ (\w+) load: ([\d.]+)", ln)
    if m:
        loads[m.group(1)] = m.group(2)
print("| run | library | load before | init | 8 B 1st / 2nd | 1 MiB 1st / 2nd | 1 MiB loop, s/op | 8 B loop, s/op | exact |")
print("|---|---|---|---|---|---|---|---|---|")
for lab in ["final1", "base1", "final2", "base2", "final3", "base3", "chain1", "final4"]:
    p = os.path.join(HERE, f"scale256-{lab}.json")
    if not os.path.exists(p):
        continue
    s = json.load(open(p))[0]
    lib = {"final": "this", "base": "before (d20a1cb)", "chain": "this, GONCCL_ALGO=allreduce:chain"}[lab.rstrip("0123456789")]
    print(f"| {lab[-1]} | {lib} | {loads.get(lab, '?')} | {s['init_max_s']:.2f} s | {s['first_allreduce_max_s']:.2f} / {s['second_allreduce_max_s']:.2f} s "
          f"| {s['first_1mib_max_s']:.2f} / {s['second_1mib_max_s']:.2f} s | {s['loop_1mib_max_s']:.3f} | {s['loop_8b_max_s']:.3f} | {s['exact']} |")

"""One table per collective from make bench-hosts' JSON: time (us) of gonccl (resumable
links, the default), gonccl-noresume and Gloo, and each gonccl variant's time over Gloo's."""
import json
import sys

for path in sys.argv[1:]:
    d = json.load(open(path))
    by = {}
    for r in d["rows"]:
        res = r.get("ip") or r.get("oop")
        if res:
            by.setdefault(r["size"], {})[r["backend"]] = res
    print(f"\n{d['coll']} ({d['nranks']} ranks, float {d['redop'] or ''}, max over ranks of the mean of {d['iters']})\n")
    print("| size | gonccl us | noresume us | Gloo us | gonccl / Gloo time | noresume / Gloo time | gonccl / noresume |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for size in sorted(by):
        b = by[size]
        g, n, gl = b["gonccl"]["time_us"], b["gonccl-noresume"]["time_us"], b["gloo"]["time_us"]
        wrong = sum(int(b[k].get("wrong") or 0) for k in b if k != "capi")
        human = f"{size // (1 << 20)} MiB" if size >= 1 << 20 else f"{size // 1024} KiB" if size >= 1024 else f"{size} B"
        print(f"| {human} | {g:.0f} | {n:.0f} | {gl:.0f} | {g / gl:.2f} | {n / gl:.2f} | {g / n:.2f} |" + ("" if wrong == 0 else f" {wrong} wrong"))

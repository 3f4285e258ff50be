"""nccl-tests-style table lines, JSON and the busbw plot (rank 0 only)."""

from __future__ import annotations

import json
import math
import sys


def _num(x: float | None, width: int, prec: int) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return f"{'N/A':>{width}}"
    return f"{x:>{width}.{prec}f}"


def _time(us: float | None) -> str:
    if us is None:
        return f"{'N/A':>8}"
    # nccl-tests keeps the column 8 wide: fewer decimals for long times
    if us >= 1e6:
        return f"{us:>8.0f}"
    if us >= 1e4:
        return f"{us:>8.1f}"
    return f"{us:>8.2f}"


def _wrong(w: int | None) -> str:
    return f"{'N/A' if w is None else w:>6}"


def _half(res: dict | None, err: str | None = None) -> str:
    """time, algbw, busbw, #wrong of one form (out-of-place or in-place)."""
    if res is None:
        return f"{'N/A':>8} {'N/A':>7} {'N/A':>7} {'N/A':>6}"
    if res.get("error"):
        return f"{'error':>8} {'-':>7} {'-':>7} {'-':>6}"
    return f"{_time(res['time_us'])} {_num(res['algbw'], 7, 2)} {_num(res['busbw'], 7, 2)} {_wrong(res['wrong'])}"


def header_lines(with_ratio: bool, oop: bool = True) -> list[str]:
    """The table's three header lines; without oop, the collective has no out-of-place
    form in torch and its columns are left out (not filled with N/A)."""
    ratio_h = ("   ratio", " (busbw)") if with_ratio else ("", "")
    half = (f" {'time':>8} {'algbw':>7} {'busbw':>7} {'#wrong':>6}", f" {'(us)':>8} {'(GB/s)':>7} {'(GB/s)':>7} {'':>6}")
    forms = ("#" + " " * 63 + f"{'out-of-place':^32}" + " " + f"{'in-place':^32}") if oop else \
        ("#" + " " * 63 + f"{'in-place':^32}")
    return [
        forms.rstrip(),
        f"#{'size':>11} {'count':>13} {'type':>9} {'redop':>6} {'root':>5} {'backend':>13}"
        + (half[0] + " " if oop else "") + half[0] + ratio_h[0],
        f"#{'(B)':>11} {'(elements)':>13} {'':>9} {'':>6} {'':>5} {'':>13}"
        + (half[1] + " " if oop else "") + half[1] + ratio_h[1],
    ]


def row_line(row: dict, with_ratio: bool, oop: bool = True) -> str:
    root = row["root"] if row["root"] is not None else -1
    line = (
        f" {row['size']:>11} {row['count']:>13} {row['type']:>9} {row['redop']:>6} {root:>5}"
        f" {row['backend']:>13} " + (f"{_half(row['oop'])}  " if oop else "") + _half(row["ip"])
    )
    if with_ratio:
        r = row.get("ratio")
        line += f" {r:>7.2f}x" if r is not None else f" {'':>8}"
    return line.rstrip()


def print_lines(lines, stream=None) -> None:
    stream = stream or sys.stdout
    for line in lines:
        print(line, file=stream)
    stream.flush()


def write_json(path: str, doc: dict) -> None:
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


def plot(path: str, doc: dict) -> str | None:
    """Draws busbw against size per backend (solid: out-of-place, dashed: in-place)
    and the memcpy reference. Returns an error message instead of raising."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return (
            "matplotlib is not installed, so --plot cannot draw; install it into this "
            f"interpreter with `{sys.executable} -m pip install matplotlib`"
        )
    fig, ax = plt.subplots(figsize=(8, 5))
    rows = doc["rows"]
    for i, backend in enumerate(doc["backends"]):
        color = f"C{i}"
        for form, style in (("oop", "-"), ("ip", "--")):
            pts = [
                (r["size"], r[form]["busbw"])
                for r in rows
                if r["backend"] == backend and r[form] and not r[form].get("error")
            ]
            if pts:
                label = f"{backend} {'out-of-place' if form == 'oop' else 'in-place'}"
                ax.plot([p[0] for p in pts], [p[1] for p in pts], style, color=color, marker="o", ms=3, label=label)
    mem = doc.get("memcpy_GBps")
    if mem:
        ax.axhline(mem, color="gray", ls=":", label=f"memcpy {mem:.1f} GB/s (1 thread)")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("size S (bytes)")
    ax.set_ylabel("busbw (GB/s)")
    ax.set_title(
        f"{doc['coll']}  {doc['nranks']} ranks  {doc['type']}  {doc['redop']}  (gonccl.bench)\n"
        f"{doc['size_convention']}; busbw = S/t * {doc['busbw_factor']}",
        fontsize=9,
    )
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None

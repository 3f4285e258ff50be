"""Read the flight-recorder files gonccl ranks write and say who is behind or stuck.

    python -m gonccl.trace DIR

Every rank of a job run with GONCCL_TRACE_DUMP_DIR=DIR writes, per communicator,
gonccl_trace_<comm>_rank<r>_pid<pid>.json there when an operation first fails and when
the communicator closes, and on SIGTERM (see docs/troubleshooting.md, "Hangs and the flight recorder"). This reads all of them,
prints a table per communicator (each rank's last completed operation and the one it
is in) and a diagnosis: the ranks that never reached the operation the others are
stuck in (first among them, when no rank with a file is behind, the ranks that left
none: the likely culprits), ranks that called different operations at one sequence
number, and ranks that left no file. Operations of the device path (GONCCL_DEVICE_PATH=1, "path": "device"
in the files) are marked as such: one "started" there is enqueued on the GPU and not
finished by it. The device path's sends and receives are recorded too ("op" "send" or
"recv", with "peer" and "p2p_seq", their number among the rank's sends to, or receives
from, that peer): they are kept apart from the collectives (RankTrace.p2p) and the
diagnosis names those not finished, each with the state of its match on the peer.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import sys
from dataclasses import dataclass, field


@dataclass
class RankTrace:
    """One rank's most recent dump for one communicator."""

    comm: str
    rank: int
    nranks: int
    pid: int
    host: str
    reason: str
    dumped_at: float
    ops: list[dict] = field(default_factory=list)  # collectives, by seq
    path: str = ""
    p2p: list[dict] = field(default_factory=list)  # sends and receives, in issue order

    @property
    def last_completed(self) -> dict | None:
        done = [o for o in self.ops if o["state"] == "completed"]
        return done[-1] if done else None

    @property
    def current(self) -> dict | None:
        """The oldest operation that did not complete (the one the rank is in)."""
        for o in self.ops:
            if o["state"] not in ("completed", "refused"):  # refused: the rank never made the call
                return o
        return None

    @property
    def last(self) -> dict | None:
        return self.ops[-1] if self.ops else None


def load(directory: str) -> dict[str, dict[int, RankTrace]]:
    """Reads every trace file in directory: {comm: {rank: newest dump}}."""
    comms: dict[str, dict[int, RankTrace]] = {}
    for path in sorted(glob.glob(os.path.join(directory, "gonccl_trace_*.json"))):
        try:
            with open(path) as f:
                d = json.load(f)
        except (OSError, ValueError) as e:
            print(f"skipping {path}: {e}", file=sys.stderr)
            continue
        ops = d.get("ops") or []
        t = RankTrace(comm=d["comm"], rank=d["rank"], nranks=d["nranks"], pid=d.get("pid", 0),
                      host=d.get("host", ""), reason=d.get("reason", ""), dumped_at=d.get("dumped_at", 0.0),
                      ops=sorted((o for o in ops if not is_p2p(o)), key=lambda o: o["seq"]), path=path,
                      p2p=[o for o in ops if is_p2p(o)])
        ranks = comms.setdefault(t.comm, {})
        old = ranks.get(t.rank)
        if old is None or t.dumped_at >= old.dumped_at:
            ranks[t.rank] = t
    return comms


def is_p2p(o: dict) -> bool:
    """Whether o is a send or receive (of the device path), not a collective."""
    return "peer" in o


def describe_p2p(o: dict) -> str:
    """send #3 to rank 1 (float32, 1024), recv #1 from rank 0 (int8, 16)."""
    to = "to" if o["op"] == "send" else "from"
    return f"{o['op']} #{o.get('p2p_seq', 0)} {to} rank {o['peer']} ({o['dtype']}, {o['count']})"


def diagnose_p2p(ranks: dict[int, RankTrace]) -> list[str]:
    """The sends and receives some rank has not finished, each with its match on the
    peer: the peer's receive (send) of the same number, or that the peer never posted
    it, or left no file."""
    out: list[str] = []
    for r, t in sorted(ranks.items()):
        for o in t.p2p:
            if o["state"] == "completed":
                continue
            line = f"rank {r} is stuck in {describe_p2p(o)} ({state_text(o)})"
            peer = ranks.get(o["peer"])
            other = "recv" if o["op"] == "send" else "send"
            if peer is None:
                line += f"; rank {o['peer']} left no trace file"
            else:
                mine = [p for p in peer.p2p if p["op"] == other and p["peer"] == r]
                match = [p for p in mine if p.get("p2p_seq") == o.get("p2p_seq")]
                last = max((p.get("p2p_seq", 0) for p in mine), default=0)
                if match:
                    line += f"; rank {o['peer']}'s {describe_p2p(match[0])} is {state_text(match[0])}"
                elif last < o.get("p2p_seq", 0):
                    posted = f"its last is #{last}" if last else "none recorded"
                    line += f"; rank {o['peer']} never posted the matching {other} ({posted})"
            if o.get("error"):
                line += f": {o['error'].splitlines()[0][:300]}"
            out.append(line)
    return out


def describe(o: dict | None) -> str:
    """all_reduce(float32, 1024), broadcast(int64, 8, root 1), barrier; a collective the
    staged path ran in chunks (one entry for operations seq to last_seq):
    all_reduce(float32, 300001) in 64 chunks (seq 5-133)."""
    if o is None:
        return "-"
    if o.get("state") == "refused":  # its dtype and count are not known
        return f"{o['op']}, refused by this rank's own check"
    if o["op"] == "barrier":
        return "barrier"
    args = [o["dtype"], str(o["count"])]
    if o.get("root", -1) >= 0:
        args.append(f"root {o['root']}")
    text = f"{o['op']}({', '.join(args)})"
    if o.get("chunks"):
        text += f" in {o['chunks']} chunks (seq {o['seq']}-{o.get('last_seq', o['seq'])})"
    return text


def state_text(o: dict) -> str:
    """The op's state; for one of the device path (its work enqueued on a CUDA stream,
    finished when the GPU says so), where it is: "started (on the GPU, not finished)"."""
    state = o["state"]
    if o.get("path") != "device":
        return state
    return {"queued": "queued (not yet on the GPU)", "started": "started (on the GPU, not finished)",
            "completed": "completed (on the GPU)"}.get(state, state)


def algo_text(o: dict) -> str:
    """ring, or direct, device path."""
    return o["algo"] + (", device path" if o.get("path") == "device" else "")


def ranks_text(ranks: list[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ",".join(str(r) for r in sorted(ranks))


def verb(ranks: list[int], one: str, many: str) -> str:
    return one if len(ranks) == 1 else many


def diagnose(ranks: dict[int, RankTrace]) -> list[str]:
    """Findings for one communicator, most important first."""
    nranks = max(t.nranks for t in ranks.values())
    out: list[str] = []
    missing = [r for r in range(nranks) if r not in ranks]
    culprits: list[int] = []  # missing ranks named first, as the likely cause
    stuck = {r: t.current for r, t in ranks.items() if t.current is not None}
    if stuck:
        seq = min(o["seq"] for o in stuck.values())
        at_seq = {r: o for r, o in stuck.items() if o["seq"] == seq}
        # Ranks whose record never reached seq: they are behind.
        behind = sorted(r for r, t in ranks.items() if t.last is None or t.last["seq"] < seq)
        if missing and not behind:
            # No rank with a file is behind: the others wait in seq for ranks that left
            # none (killed, often by the launcher once another rank failed, or hung
            # outside gonccl), the likely culprits; the stuck ranks' errors say whom they
            # waited for.
            culprits = missing
            stuck_op = describe(next(iter(at_seq.values())))
            for r in missing:
                named = sorted(q for q, o in at_seq.items() if re.search(rf"\brank {r}\b", o.get("error", "")))
                why = f"; {ranks_text(named)}'s error names it" if named else ""
                out.append(f"rank {r} left no trace file and is most likely behind: {ranks_text(list(at_seq))} "
                           f"{verb(list(at_seq), 'is', 'are')} stuck in seq {seq} {stuck_op} waiting{why} "
                           f"(it never reached seq {seq}, or hung outside gonccl, or was killed before it could write one)")
        for r in behind:
            last = ranks[r].last
            what = "it recorded no operation" if last is None else \
                f"its last op is seq {last['seq']} {last['op']} ({state_text(last)})"
            out.append(f"rank {r} is behind: {what}; {ranks_text(list(at_seq))} "
                       f"{verb(list(at_seq), 'is', 'are')} stuck in seq {seq} {describe(next(iter(at_seq.values())))}")
        # Ranks that called something else at seq.
        calls: dict[str, list[int]] = {}
        for r, t in ranks.items():
            for o in t.ops:
                if o["seq"] == seq:
                    calls.setdefault(describe(o), []).append(r)
        if len(calls) > 1:
            parts = [f"{ranks_text(rs)} called {d}" for d, rs in sorted(calls.items(), key=lambda kv: min(kv[1]))]
            out.append(f"ranks disagree at seq {seq}: " + "; ".join(parts))
        if not behind and not culprits and len(calls) <= 1:
            states = sorted({state_text(o) for o in at_seq.values()})
            out.append(f"{ranks_text(list(at_seq))} {verb(list(at_seq), 'is', 'are')} stuck in seq {seq} "
                       f"{describe(next(iter(at_seq.values())))} ({'/'.join(states)}) and no rank is behind")
        errors = {r: o.get("error", "") for r, o in at_seq.items() if o.get("error")}
        for r in sorted(errors):
            out.append(f"rank {r} failed: {errors[r].splitlines()[0][:300]}")
    else:
        lasts = {r: (t.last["seq"] if t.last else 0) for r, t in ranks.items()}
        top = max(lasts.values()) if lasts else 0
        behind = sorted(r for r, s in lasts.items() if s < top)
        if behind:
            for r in behind:
                out.append(f"rank {r} is behind: its last op is seq {lasts[r]}; other ranks completed up to seq {top}")
        else:
            out.append(f"every rank completed every recorded operation (up to seq {top})")
    for r in missing:
        if r in culprits:
            continue
        out.append(f"rank {r} left no trace file (still running, hung outside gonccl, or killed before it could write one)")
    return out


def table(ranks: dict[int, RankTrace]) -> list[str]:
    rows = [("rank", "pid", "host", "last completed", "current", "state", "dump reason")]
    for r in sorted(ranks):
        t = ranks[r]
        lc, cur = t.last_completed, t.current
        rows.append((str(r), str(t.pid), t.host,
                     f"{lc['seq']} {describe(lc)}" if lc else "-",
                     f"{cur['seq']} {describe(cur)} [{algo_text(cur)}]" if cur else "-",
                     state_text(cur) if cur else "idle",
                     t.reason.splitlines()[0][:60] if t.reason else ""))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]


def report(directory: str) -> tuple[str, bool]:
    """The text `python -m gonccl.trace directory` prints, and whether files were found."""
    comms = load(directory)
    if not comms:
        return f"no gonccl trace files (gonccl_trace_*.json) in {directory}", False
    lines: list[str] = []
    for comm in sorted(comms):
        ranks = comms[comm]
        nranks = max(t.nranks for t in ranks.values())
        nops = max((len(t.ops) for t in ranks.values()), default=0)
        lines.append(f"communicator {comm}: {nranks} ranks, {len(ranks)} trace files, up to {nops} operations each")
        lines.extend("  " + row for row in table(ranks))
        lines.extend("  => " + f for f in diagnose(ranks))
        lines.extend("  => " + f for f in diagnose_p2p(ranks))
        lines.append("")
    return "\n".join(lines).rstrip() + "\n", True


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m gonccl.trace", description=__doc__.split("\n\n")[0])
    p.add_argument("directory", help="the GONCCL_TRACE_DUMP_DIR the ranks wrote to")
    args = p.parse_args(argv)
    text, found = report(args.directory)
    sys.stdout.write(text)
    return 0 if found else 1


if __name__ == "__main__":
    sys.exit(main())

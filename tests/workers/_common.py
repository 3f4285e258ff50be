"""Shared helpers for the worker scripts (one process per rank, started by _harness).

A worker groups its checks in named sections. Every section runs at least one
check or calls Checker.skip(reason): a section that did neither fails its test, so
"passed" always means "checked". A failed check is recorded (not
raised) so the ranks stay in step and later sections still run; an exception ends
only its section. After every section the rank's report is rewritten as
<report_dir>/report_rank<R>.json, so a later hang still leaves the earlier results.
At the end, any failure makes the worker print every failure (with tracebacks) on
stderr and exit 1.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
import traceback

import torch


def scaled(seconds: float) -> float:
    """seconds times GONCCL_TEST_TIME_SCALE (default 1), the one factor every wall-clock
    limit of the tests is scaled by (tests/_harness.py reads it too)."""
    return seconds * float(os.environ.get("GONCCL_TEST_TIME_SCALE") or 1)


class Checker:
    def __init__(self, report_dir: str, rank: int):
        self.rank = rank
        self.path = os.path.join(report_dir, f"report_rank{rank}.json")
        self.sections: dict[str, dict] = {}
        self.order: list[str] = []
        self.current: dict | None = None
        self._oracle: list[str] | None = None
        self._write(finished=False)

    def _write(self, finished: bool) -> None:
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"rank": self.rank, "sections": self.sections, "order": self.order, "finished": finished}, f)
        os.replace(tmp, self.path)

    @contextlib.contextmanager
    def section(self, name: str):
        rec = {"failures": [], "data": {}, "checks": 0, "seconds": 0.0, "skipped": None}
        self.current = rec
        t0 = time.monotonic()
        print(f"rank {self.rank}: section {name} ...", file=sys.stderr, flush=True)
        try:
            yield rec
        except Exception:  # noqa: BLE001 - reported, not swallowed
            rec["failures"].append(f"exception in section {name}:\n{traceback.format_exc()}")
        finally:
            rec["seconds"] = round(time.monotonic() - t0, 3)
            self.sections[name] = rec
            self.order.append(name)
            self.current = None
            self._write(finished=False)
            status = "ok" if not rec["failures"] else f"{len(rec['failures'])} FAILURE(S)"
            if rec["skipped"]:
                status += f", skipped: {rec['skipped']}"
            print(f"rank {self.rank}: section {name}: {rec['checks']} checks, {status} "
                  f"({rec['seconds']:.1f} s)", file=sys.stderr, flush=True)

    @contextlib.contextmanager
    def oracle(self):
        """Checks of the oracle's (Gloo's) result: inside, a failed check is neither the
        section's failure nor printed; its text goes to the list this yields, for the
        caller to label as Gloo's (workers/_oracle.py)."""
        assert self._oracle is None, "oracle() does not nest"
        self._oracle = []
        try:
            yield self._oracle
        finally:
            self._oracle = None

    def check(self, cond, msg) -> bool:
        """Records a failure (msg may be a callable producing it) unless cond holds."""
        assert self.current is not None, "check() outside a section"
        self.current["checks"] += 1
        if not cond and self._oracle is not None:
            self._oracle.append(msg() if callable(msg) else str(msg))
        elif not cond:
            text = msg() if callable(msg) else str(msg)
            self.current["failures"].append(text)
            print(f"rank {self.rank}: CHECK FAILED: {text}", file=sys.stderr, flush=True)
        return bool(cond)

    def skip(self, reason: str) -> None:
        """Marks the current section as skipped on this rank, saying why (the caller then
        returns). A section must either run a check or skip: the test side
        (_harness.WorkerRun.section) fails one that did neither, and turns a section every
        rank skipped into pytest.skip with the reason."""
        assert self.current is not None, "skip() outside a section"
        assert reason, "skip() needs a reason"
        self.current["skipped"] = str(reason)

    def data(self, key, value) -> None:
        """Stores a JSON-able value in the section's record for the test to assert on."""
        assert self.current is not None
        self.current["data"][key] = value

    def finish(self) -> None:
        self._write(finished=True)
        failed = {n: s["failures"] for n, s in self.sections.items() if s["failures"]}
        if failed:
            lines = [f"rank {self.rank}: {sum(len(v) for v in failed.values())} failed check(s):"]
            for name, fails in failed.items():
                for f in fails:
                    lines.append(f"[{name}] {f}")
            raise AssertionError("\n".join(lines))


def describe_diff(got: torch.Tensor, want: torch.Tensor, bad: torch.Tensor | None = None, tol=None) -> str:
    """Where and how two tensors differ (first few elements)."""
    if got.shape != want.shape:
        return f"shape {tuple(got.shape)} != expected {tuple(want.shape)}"
    if bad is None:
        bad = got != want
    idx = bad.reshape(-1).nonzero().reshape(-1)
    n = int(idx.numel())
    first = idx[:5].tolist()
    g = got.reshape(-1)
    w = want.reshape(-1)
    parts = [f"[{i}] got {g[i].item()!r} want {w[i].item()!r}"
             + (f" tol {tol.reshape(-1)[i].item():.3g}" if isinstance(tol, torch.Tensor) else "")
             for i in first]
    return f"{n}/{got.numel()} elements differ: " + ", ".join(parts)


def exact_mismatch(got: torch.Tensor, want: torch.Tensor) -> str | None:
    """None if got equals want bit for bit in value, dtype and shape, else a description."""
    if got.dtype != want.dtype:
        return f"dtype {got.dtype} != expected {want.dtype}"
    if got.shape != want.shape:
        return f"shape {tuple(got.shape)} != expected {tuple(want.shape)}"
    if torch.equal(got, want):
        return None
    if got.is_floating_point() or got.is_complex():
        # NaN equals NaN here (value equality otherwise; -0 == +0).
        same = (got == want) | (torch.isnan(got) & torch.isnan(want))
        if bool(same.all()):
            return None
        return describe_diff(got, want, ~same)
    return describe_diff(got, want)


def close_mismatch(got: torch.Tensor, want64: torch.Tensor, tol64: torch.Tensor) -> str | None:
    """None if |got - want64| <= tol64 everywhere (computed in float64), else a description."""
    if got.shape != want64.shape:
        return f"shape {tuple(got.shape)} != expected {tuple(want64.shape)}"
    g = got.double()
    err = (g - want64).abs()
    bad = ~(err <= tol64)  # NaN counts as bad
    # Where the expected value is not finite it must match exactly (NaN for NaN).
    special = ~torch.isfinite(want64)
    bad = torch.where(special, ~((g == want64) | (torch.isnan(g) & torch.isnan(want64))), bad)
    if not bool(bad.any()):
        return None
    return describe_diff(got.double(), want64, bad, tol64)

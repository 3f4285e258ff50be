"""Gloo as the oracle, and Gloo's own failures labelled as Gloo's.

The differential and ops workers compare gonccl (the candidate) with Gloo (the oracle)
and with a reference computed locally. Gloo has bugs of its own; a wrong Gloo result must
never read as gonccl's in a log or a report. The rule, in one place:

- the oracle's result is checked against the reference first, inside
  Checker.oracle(), where a failed check is not the section's failure and prints no
  "CHECK FAILED" line;
- where the oracle is wrong, the failure is Gloo's: labelled "gloo (oracle) known issue
  [name]: ..." when KNOWN names it (kept in the section's data "oracle_issues", not a
  failure), else "gloo (oracle) wrong, not a gonccl failure: ..." (a failure of the run,
  because either Gloo has an issue nobody has written down yet or the reference is
  wrong: someone must look, but it is not gonccl's);
- gonccl is then held to the reference (and compared with the oracle only where the
  oracle is right), and its failures say "gonccl".
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Callable

from _common import close_mismatch, exact_mismatch
from _reference import mismatch


@dataclass(frozen=True)
class KnownIssue:
    name: str
    applies: Callable[[str, dict], bool]  # (operation, facts about the call) -> bool
    why: str


KNOWN = [
    # Measured with torch 2.15 on CPU, 2 ranks, a float32 column view x[:, 0] of an (n, 2)
    # tensor: all_reduce and reduce (on the root) and broadcast (off the root) give wrong
    # values, and so does scatter into such an output; all_gather from one, all_gather_into
    # _tensor into one and reduce_scatter_tensor from one are right.
    KnownIssue(
        "strided-tensor",
        lambda op, facts: op in ("all_reduce", "reduce", "broadcast", "scatter") and facts.get("contiguous") is False,
        "Gloo reads and writes a non-contiguous tensor it works on in place (or scatters into) "
        "as if it were contiguous, i.e. the storage under the view, so the view holds other elements",
    ),
]


def known_issue(op: str, **facts) -> KnownIssue | None:
    """The known Gloo issue that explains a wrong oracle result of `op`, or None."""
    for issue in KNOWN:
        if issue.applies(op, facts):
            return issue
    return None


def label(what: str, detail: str, issue: KnownIssue | None) -> str:
    """The line that reports a wrong oracle result: always Gloo's, never gonccl's."""
    if issue is not None:
        return f"gloo (oracle) known issue [{issue.name}]: {what}: {issue.why}; {detail}"
    return f"gloo (oracle) wrong, not a gonccl failure: {what}: {detail}"


def report(ck, text: str, known: bool) -> None:
    """Prints a labelled oracle failure and keeps it in the section's data
    "oracle_issues"; an unknown one is also a failure of the run (see the module doc)."""
    ck.current["data"].setdefault("oracle_issues", []).append(text)
    if known:
        print(f"rank {ck.rank}: {text}", file=sys.stderr, flush=True)
    else:
        ck.check(False, text)


def both(ck, what, make_call, check, oracle_group, op: str, facts: dict, parity_gaps: list) -> dict:
    """Runs one call on Gloo (oracle_group) and on gonccl (the default group), each on its
    own fresh state from make_call() ({"call": fn(group), ...}), and checks them with
    check(state), which makes ck.check calls. Gloo raising where gonccl does not, gonccl
    being wrong, or gonccl refusing without saying "contiguous" are gonccl's failures;
    Gloo being wrong is Gloo's (labelled, see the module doc), and gonccl must then be
    right or refuse clearly. Where Gloo is right and gonccl refuses clearly, the gap goes
    to parity_gaps. Returns what each side did, for the section's data."""
    outs = {}
    for backend, grp in (("gloo", oracle_group), ("gonccl", None)):
        state = make_call()
        try:
            state["call"](grp)
            outs[backend] = (None, state)
        except Exception as e:  # noqa: BLE001
            outs[backend] = (f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}", state)
    gerr, cerr = outs["gloo"][0], outs["gonccl"][0]
    result = {"gloo": gerr or "ok", "gonccl": cerr or "ok"}
    gloo_wrong = False
    if gerr is None:
        with ck.oracle() as wrong:
            check(outs["gloo"][1])
        if wrong:
            gloo_wrong = True
            issue = known_issue(op, **facts)
            text = label(what, wrong[0][:200], issue)
            result["gloo"] = text
            report(ck, text, known=issue is not None)
    if gerr is not None:
        ck.check(cerr is not None, f"{what}: gloo raises ({gerr}) but gonccl does not")
    elif cerr is None:
        check(outs["gonccl"][1])  # gonccl is held to the reference, whatever Gloo did
    elif gloo_wrong:
        ck.check("contiguous" in cerr, f"{what}: gonccl's error does not say why: {cerr}")
    else:
        # A clear refusal is allowed here; parity with Gloo is checked separately.
        ck.check("contiguous" in cerr, f"{what}: gonccl's error does not say why: {cerr}")
        parity_gaps.append(f"{what}: gloo handles it correctly but gonccl raises {cerr}")
    return result


def agrees(ck, case, got, oracle, ref, op: str, **facts) -> None:
    """gonccl's result `got` (held to the reference `ref` elsewhere) against Gloo's
    `oracle`, the reference's way ("exact", t) or ("close", v, tol): Gloo's result is
    checked against the reference first; where it is wrong the failure is Gloo's
    (labelled, see the module doc) and gonccl is not compared with it; else gonccl must
    agree with it (exactly, or within twice the tolerance: both are within it of the
    reference)."""
    bad = mismatch(oracle, ref)
    if bad is not None:
        issue = known_issue(op, **facts)
        report(ck, label(case, f"!= reference: {bad}", issue), known=issue is not None)
        return
    if ref[0] == "exact":
        bad = exact_mismatch(got, oracle)
        ck.check(bad is None, lambda: f"{case}: gonccl != gloo: {bad}")
    else:
        bad = close_mismatch(got, oracle.double(), 2 * ref[2])
        ck.check(bad is None, lambda: f"{case}: gonccl vs gloo differ by more than 2*tol: {bad}")

"""Gloo's wrong results are labelled as Gloo's, never as gonccl's (workers/_oracle.py).

The ops worker's non-contiguous section and the differential worker compare gonccl with
Gloo. Before, the ops worker checked Gloo's result with the ordinary check, which printed
"CHECK FAILED: scatter non-contiguous output: != reference" for Gloo's own strided-output
bug (the last line of the first H100 run's crashed ranks, read as gonccl's), and the
differential worker reported "candidate output != gloo" wherever Gloo alone was wrong.
These run the labelling on plain tensors, in this process (no ranks)."""

import importlib
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "workers"))

import _oracle  # noqa: E402
from _common import Checker  # noqa: E402

N = 10
X = torch.arange(1.0, 2 * N + 1)[:N] * 1.5


def scatter_into(out, gloo_bug):
    """What scatter does to a non-contiguous output: Gloo's bug writes the storage under
    the view as if the view were contiguous."""
    if gloo_bug:
        torch.as_strided(out, (N,), (1,)).copy_(X)
    else:
        out.copy_(X)


def make_scatter(bad_side):
    def make_call():
        out = torch.zeros(N, 2)[:, 0]
        return {"o": out, "call": lambda g: scatter_into(out, gloo_bug=(g == bad_side))}
    return make_call


@pytest.fixture
def ck(tmp_path):
    c = Checker(str(tmp_path), 0)
    with c.section("noncontiguous") as rec:
        yield c, rec


def check_for(c, what):
    return lambda s: c.check(torch.equal(s["o"], X), f"{what}: != reference: got {s['o'][:3].tolist()}")


def test_oracle_checks_are_not_the_sections_failures(ck, capsys):
    c, rec = ck
    with c.oracle() as wrong:
        c.check(False, "gloo got it wrong")
        c.check(True, "fine")
    assert wrong == ["gloo got it wrong"] and rec["failures"] == [] and rec["checks"] == 2
    assert "CHECK FAILED" not in capsys.readouterr().err
    c.check(False, "after the oracle block")
    assert rec["failures"] == ["after the oracle block"]


def test_gloo_known_issue_is_labelled_gloos(ck, capsys):
    c, rec = ck
    what = "scatter non-contiguous output"
    gaps = []
    res = _oracle.both(c, what, make_scatter("gloo-group"), check_for(c, what), "gloo-group", "scatter",
                       {"contiguous": False}, gaps)
    err = capsys.readouterr().err
    assert rec["failures"] == [], rec["failures"]
    assert "CHECK FAILED" not in err, err
    assert f"rank 0: gloo (oracle) known issue [strided-tensor]: {what}:" in err, err
    assert res["gloo"].startswith("gloo (oracle) known issue [strided-tensor]") and res["gonccl"] == "ok"
    assert rec["data"]["oracle_issues"] == [res["gloo"]] and gaps == []


def test_gonccl_wrong_is_gonccls(ck, capsys):
    c, rec = ck
    what = "scatter non-contiguous output"
    res = _oracle.both(c, what, make_scatter(None), check_for(c, what), "gloo-group", "scatter",
                       {"contiguous": False}, [])
    assert len(rec["failures"]) == 1 and rec["failures"][0].startswith(f"{what}: != reference"), rec["failures"]
    assert "gloo (oracle)" not in capsys.readouterr().err
    assert res == {"gloo": "ok", "gonccl": "ok"} and "oracle_issues" not in rec["data"]


def test_both_wrong_is_gloos_and_gonccls(ck):
    c, rec = ck
    what = "scatter non-contiguous output"

    def make_call():
        out = torch.zeros(N, 2)[:, 0]
        return {"o": out, "call": lambda g: scatter_into(out, gloo_bug=True)}
    _oracle.both(c, what, make_call, check_for(c, what), "gloo-group", "scatter", {"contiguous": False}, [])
    assert len(rec["failures"]) == 1 and rec["failures"][0].startswith(what), rec["failures"]
    assert rec["data"]["oracle_issues"][0].startswith("gloo (oracle) known issue")


def test_unknown_gloo_issue_fails_as_gloos(ck, capsys):
    c, rec = ck
    what = "all_gather_into_tensor non-contiguous output"
    _oracle.both(c, what, make_scatter("gloo-group"), check_for(c, what), "gloo-group", "all_gather_into_tensor",
                 {"contiguous": False}, [])
    assert len(rec["failures"]) == 1, rec["failures"]
    assert rec["failures"][0].startswith(f"gloo (oracle) wrong, not a gonccl failure: {what}:"), rec["failures"]
    assert "CHECK FAILED: gloo (oracle) wrong, not a gonccl failure" in capsys.readouterr().err


def test_gloo_raising_and_gonccl_not_is_gonccls(ck):
    c, rec = ck

    def make_call():
        def call(g):
            if g == "gloo-group":
                raise RuntimeError("Tensors must be contiguous")
        return {"call": call}
    res = _oracle.both(c, "broadcast x", make_call, lambda s: None, "gloo-group", "broadcast", {}, [])
    assert rec["failures"] == ["broadcast x: gloo raises (RuntimeError: Tensors must be contiguous) but gonccl does not"]
    assert res["gloo"].startswith("RuntimeError")


@pytest.fixture
def diff(monkeypatch):
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.delenv("GONCCL_DIFF_CANDIDATE", raising=False)
    mod = importlib.import_module("differential_worker")
    mod = importlib.reload(mod)
    yield mod
    mod.ORACLE_KNOWN.clear()


def plan(kind):
    return {"step": 7, "kind": kind, "dtype": torch.float32, "op": "COPY", "premul": None, "n": N, "root": 0,
            "async": False, "inplace": False, "gsize": 1}


def test_differential_known_gloo_issue_is_not_gonccls(diff, capsys):
    grp = diff.Group("world", [0], None, None)
    gloo_out = torch.zeros(N, 2)[:, 0]
    scatter_into(gloo_out, gloo_bug=True)
    fails = []
    diff.compare(plan("scatter"), grp, [X.clone()], [gloo_out], [("exact", X)], fails)
    assert fails == []
    assert len(diff.ORACLE_KNOWN) == 1
    assert diff.ORACLE_KNOWN[0].startswith("op#7 scatter float32 COPY n=10 group=world[0]")
    assert ": gloo (oracle) known issue [strided-tensor]: output 0: " in diff.ORACLE_KNOWN[0]
    assert "gloo (oracle) known issue" in capsys.readouterr().err


def test_differential_unknown_gloo_issue_fails_as_gloos(diff):
    grp = diff.Group("world", [0], None, None)
    fails = []
    diff.compare(plan("all_gather_into_tensor"), grp, [X.clone()], [X + 1], [("exact", X)], fails)
    assert len(fails) == 1 and ": gloo (oracle) wrong, not a gonccl failure: output 0: != reference" in fails[0]
    assert "gonccl" not in fails[0].split("not a gonccl failure")[0]
    assert int(fails[0].split()[0][3:]) == 7  # the first-failure key still reads the op number


def test_differential_gonccl_wrong_is_gonccls(diff):
    grp = diff.Group("world", [0], None, None)
    fails = []
    diff.compare(plan("broadcast"), grp, [X + 1], [X.clone()], [("exact", X)], fails)
    assert len(fails) == 1 and "gonccl (candidate) output 0 != gloo" in fails[0] and "oracle" not in fails[0]
    assert diff.ORACLE_KNOWN == []


def test_agrees_compares_gonccl_only_with_a_right_gloo(ck, capsys):
    """The collectives worker's gonccl-vs-Gloo comparisons (workers/_collectives_values.py)."""
    c, rec = ck
    _oracle.agrees(c, "broadcast case", X.clone(), X + 1, ("exact", X), "broadcast")
    assert len(rec["failures"]) == 1, rec["failures"]
    assert rec["failures"][0].startswith("gloo (oracle) wrong, not a gonccl failure: broadcast case: != reference")
    _oracle.agrees(c, "all_reduce case", X + 1, X.clone(), ("exact", X), "all_reduce")
    assert rec["failures"][1].startswith("all_reduce case: gonccl != gloo"), rec["failures"]
    tol = torch.full((N,), 1e-3, dtype=torch.float64)
    _oracle.agrees(c, "close case", X + 1.2e-3, X - 9e-4, ("close", X.double(), tol), "all_reduce")
    assert rec["failures"][2].startswith("close case: gonccl vs gloo differ by more than 2*tol"), rec["failures"]
    _oracle.agrees(c, "fine", X.clone(), X.clone(), ("exact", X), "all_reduce")
    assert len(rec["failures"]) == 3

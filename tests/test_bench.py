"""Smoke test of the bench tool (python -m gonccl.bench): tiny sizes, 2 ranks, gonccl
and gloo in one run, -c 1. It checks the tool, not gonccl's speed: the table has
nccl-tests' columns, one row per (size, backend), #wrong is 0 everywhere, busbw is
algbw times the collective's factor, the JSON agrees with the table, and a rank that
cannot rendezvous does not outlive the --timeout. all_reduce also has the C ABI floor
row (capi) and, with --hops, the per-hop table under the gonccl and capi rows.

It runs the installed tool, `python -m gonccl.bench` (make test builds and installs first).
"""

import json
import os
import re
import subprocess
import sys

import pytest

import _harness

TIMEOUT = 120


def bench(tmp_path, *args, timeout=TIMEOUT, env_extra=None):
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", **(env_extra or {}))
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    run = _harness.run_processes(
        [[_harness.PYTHON, "-m", "gonccl.bench", *args]], timeout=timeout, envs=[env], cwd=str(tmp_path), names=["bench"]
    )
    return run


def rows_text(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.strip() and not line.startswith("#")]


def table_rows(out: str) -> list[list[str]]:
    return [line.split() for line in rows_text(out)]


@pytest.mark.timeout(TIMEOUT + 30)
@pytest.mark.parametrize("coll,factor", [("all_reduce", 1.0), ("all_gather", 0.5)])
def test_bench_table(tmp_path, coll, factor):
    out_json = tmp_path / "out.json"
    hops = ["--hops", "-z", "1"] if coll == "all_reduce" else []
    run = bench(tmp_path, coll, "-b", "8", "-e", "64K", "-f", "32", "-n", "3", "-w", "1", "-c", "1",
                "--backends", "gonccl,gloo", "-np", "2", "--json", str(out_json), *hops)
    run.assert_ok(f"gonccl.bench {coll}")
    out = run.procs[0].stdout
    header = [line for line in out.splitlines() if line.startswith("#") and "#wrong" in line]
    assert header, out
    for col in ("size", "count", "type", "redop", "root", "backend", "time", "algbw", "busbw", "#wrong", "ratio"):
        assert col in header[0], f"column {col!r} missing:\n{out}"
    if coll == "all_reduce":  # torch has no out-of-place all_reduce: no columns of N/A for it
        forms = out.splitlines()[out.splitlines().index(header[0]) - 1]
        assert header[0].count("#wrong") == 1 and forms.split() == ["#", "in-place"], out
        assert "# in-place only: torch has no out-of-place all_reduce" in out, out
    else:
        assert header[0].count("#wrong") == 2 and "out-of-place" in out and "in-place" in out, out
    # the memcpy reference copies more than a cache holds, whatever -e says
    m = re.search(r"# memcpy reference: torch copy_ of (\d+) B.* [0-9.]+ GB/s", out)
    assert m and int(m.group(1)) >= 64 << 20, out
    # nccl-tests' list of where each rank runs
    assert "#  Using devices" in out and len(re.findall(r"^#  Rank +\d+ Pid +\d+ on .* device cpu$", out, re.M)) == 2, out
    # only table rows and "#" comments between the header and the footer: no line a parser trips on
    assert all(line.startswith("#") or re.match(r"^ +\d+ ", line) for line in out.splitlines() if line.strip()), out

    rows = table_rows(out)
    # sizes 8, 256, 8192 and then -e, 65536 (all_gather: 2 ranks split 8 B into 1 float
    # each), gonccl and gloo each
    backends = ("gonccl", "gloo", "capi") if coll == "all_reduce" else ("gonccl", "gloo")
    assert [(r[0], r[5]) for r in rows] == [
        (s, b) for s in ("8", "256", "8192", "65536") for b in backends
    ], out
    if coll == "all_reduce":
        floors = [line for line in out.splitlines() if line.startswith("# gonccl through torch / its C ABI floor")]
        assert len(floors) == 1 and floors[0].count(" B ") == 4, out  # one footer line, every size
        assert out.index(floors[0]) > out.index(rows_text(out)[-1]), out
        assert out.count("# hops of the gonccl row above") == 4 and out.count("# hops of the capi row above") == 4, out
        for hop in ("c++: issue (Work, cgo call, registration)", "go: run (algorithm, peers)",
                    "c++: issue -> wait() returns", "python + torch dispatch"):
            assert hop in out, f"hop {hop!r} missing:\n{out}"
    for r in rows:
        if r[5] == "capi":
            assert r[6:9] != ["N/A"] * 3 and float(r[6]) > 0, out
            continue
        assert r[2] == "float", out
        # all_gather: out-of-place cols 6-9, in-place 10-13; all_reduce: in-place 6-9 only
        halves = [r[6:10], r[10:14]] if coll == "all_gather" else [r[6:10]]
        for h in halves:
            assert h[3] == "0", f"wrong elements:\n{out}"
            assert float(h[0]) > 0, out
        if r[5] == "gonccl":
            assert r[-1].endswith("x"), f"no gonccl/gloo ratio:\n{out}"
    assert "# Out of bounds values : 0 OK" in out, out

    doc = json.loads(out_json.read_text())
    assert doc["coll"] == coll and doc["nranks"] == 2 and doc["backends"] == ["gonccl", "gloo"]
    assert len(doc["rows"]) == 4 * len(backends)
    for row in doc["rows"]:
        for form in ("oop", "ip"):
            res = row[form]
            if res is None:
                continue
            assert res["wrong"] == (None if row["backend"] == "capi" else 0)
            assert res["busbw"] == pytest.approx(res["algbw"] * factor)
            assert res["algbw"] == pytest.approx(row["size"] / (res["time_us"] * 1e-6) / 1e9)
    if coll == "all_gather":
        # nccl-tests' convention: size = the gathered buffer, count = elements per rank
        assert [(r["size"], r["count"]) for r in doc["rows"][::2]] == [(8, 1), (256, 32), (8192, 1024), (65536, 8192)]
    else:
        assert all(r["floor_ratio"] > 0 for r in doc["rows"] if r["backend"] == "gonccl"), doc


@pytest.mark.timeout(TIMEOUT + 30)
def test_bench_paths_side_by_side(tmp_path):
    """--backends gonccl-device,gonccl-staged,gloo: one run prints gonccl with
    GONCCL_DEVICE_PATH=1 and =0 (each group created with it) beside Gloo, each gonccl row
    with its ratio to Gloo's. On CPU tensors both rows take the host path: this checks
    the tool; on CUDA tensors (scripts/gpu-check.sh) they are the two data paths."""
    out_json = tmp_path / "out.json"
    names = ("gonccl-device", "gonccl-staged", "gloo")
    run = bench(tmp_path, "all_reduce", "-b", "8", "-e", "256", "-f", "32", "-n", "2", "-w", "1", "-c", "1",
                "--backends", ",".join(names), "-np", "2", "--no-floor", "--json", str(out_json))
    run.assert_ok("gonccl.bench with the path variants")
    out = run.procs[0].stdout
    assert ("# gonccl-auto / gonccl-samegpu / gonccl-device / gonccl-staged: gonccl with "
            "GONCCL_DEVICE_PATH=auto / samegpu / 1 / 0") in out, out
    rows = table_rows(out)
    assert [(r[0], r[5]) for r in rows] == [(s, b) for s in ("8", "256") for b in names], out
    for r in rows:
        assert r[9] == "0", f"wrong elements:\n{out}"
        assert r[-1].endswith("x") == (r[5] != "gloo"), f"ratio column:\n{out}"
    for b in names:
        assert re.search(rf"# +{b}: Avg bus bandwidth +: [0-9.]+ GB/s", out), out
    doc = json.loads(out_json.read_text())
    assert doc["backends"] == list(names)


@pytest.mark.timeout(TIMEOUT + 30)
def test_bench_calibrate_then_estimate(tmp_path):
    """--calibrate writes this host's entry for 2 ranks over shared memory to
    GONCCL_CALIBRATION (a point per collective and size, replacing an older entry for
    the same key, keeping others); --estimate then says it estimates from that entry and
    prints a row per size. The tool, not the times: no time is checked."""
    import socket

    from gonccl.bench import calibration

    cal = tmp_path / "cal.json"
    other = {"host": "elsewhere", "nranks": 2, "transport": "shm", "points": []}
    stale = {"host": socket.gethostname(), "nranks": 2, "transport": "shm", "points": [{"op": "all_reduce"}]}
    cal.write_text(json.dumps({"format": calibration.FORMAT, "entries": [other, stale]}))
    env = {"GONCCL_CALIBRATION": str(cal)}
    run = bench(tmp_path, "--calibrate", "-e", "512", "-n", "1", "-w", "1", "-np", "2", env_extra=env)
    run.assert_ok("gonccl.bench --calibrate")
    data = json.loads(cal.read_text())
    assert data["format"] == "gonccl-calibration/1", data
    assert data["entries"][0] == other, data
    assert len(data["entries"]) == 2, data
    mine = data["entries"][1]
    assert (mine["host"], mine["nranks"], mine["transport"]) == (socket.gethostname(), 2, "shm"), mine
    assert [(p["op"], p["bytes"]) for p in mine["points"]] == [
        (c, b) for c in ("all_reduce", "all_gather", "reduce_scatter") for b in (8, 64, 512)], mine
    assert all(p["us"] > 0 for p in mine["points"]), mine

    run = bench(tmp_path, "--estimate", "-e", "1K", "-n", "1", "-w", "1", "-np", "2", env_extra=env)
    run.assert_ok("gonccl.bench --estimate")
    out = run.procs[0].stdout
    assert f"# calibration: {cal}, entry for host {socket.gethostname()}, 2 ranks, shm" in out, out
    rows = table_rows(out)
    assert [r[0] for r in rows] == ["8", "1024"] * 3, out
    assert all(float(r[1]) > 0 and float(r[2]) > 0 for r in rows), out
    assert re.search(r"# worst ratio \(either way\): [0-9.]+x", out), out


def test_bench_default_backends():
    """Without --backends: gonccl and Gloo on CPU tensors; on CUDA ones, gonccl's own
    choice, its same-GPU path, both of its forced paths and Gloo, plus NCCL only where every rank has a GPU
    of its own."""
    from gonccl.bench import variants

    assert variants.default_backends("cpu", 2) == ["gonccl", "gloo"]
    want = ["gonccl-auto", "gonccl-samegpu", "gonccl-device", "gonccl-staged", "gloo"]
    got = variants.default_backends("cuda", 2)
    assert got[:5] == want and got[5:] in ([], ["nccl"]), got


def test_bench_one_pass_bound():
    """The one-pass figure the CUDA bench sets beside the device copy: all_reduce over N
    ranks of one GPU reads N inputs and writes N outputs, so algbw = copy / N, and busbw
    is that times 2(N-1)/N (733.5 GB/s for 2 ranks at the H100's 1,467 GB/s copy)."""
    from gonccl.bench import worker

    assert worker.one_pass_busbw(1467.0, "all_reduce", 2) == pytest.approx(733.5)
    assert worker.one_pass_busbw(1000.0, "all_reduce", 4) == pytest.approx(1000.0 / 4 * 6 / 4)
    assert worker.one_pass_busbw(1000.0, "all_gather", 2) is None


def test_bench_cuda_without_a_gpu_says_so(tmp_path):
    """--device cuda where torch sees no GPU: one clear line, exit status 2, no ranks."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("torch sees a GPU here")
    proc = subprocess.run([sys.executable, "-m", "gonccl.bench", "--device", "cuda", "-np", "2"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc
    assert "gonccl.bench: --device cuda: torch sees no GPU on this machine; nothing was measured" in proc.stderr, proc


def procs_in(cwd) -> list[int]:
    """pids of live processes whose working directory is cwd."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.readlink(f"/proc/{entry}/cwd") == str(cwd):
                    found.append(int(entry))
            except OSError:
                pass
    return found


@pytest.mark.timeout(60)
def test_bench_launcher_timeout_kills_ranks(tmp_path):
    """A run longer than --timeout ends with exit code 124 and a message, and the
    launcher leaves no rank behind."""
    run = bench(tmp_path, "all_reduce", "-b", "64M", "-e", "64M", "-n", "1000", "--backends", "gloo",
                "-np", "2", "--timeout", "3", "--no-memcpy", timeout=50)
    assert not run.timed_out, run.describe()
    assert run.procs[0].returncode == 124, run.describe()
    assert "timed out after 3 s" in run.procs[0].stderr, run.describe()
    assert procs_in(tmp_path) == [], "ranks outlived the launcher"

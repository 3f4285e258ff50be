"""What a new user's first mistakes read like: each bad input, run through torch with 2
ranks, ends within its bound on both ranks with one message that names the problem and
the next step (tests/workers/first_error_worker.py prints each rank's first error).

A message says things once: one "gonccl" prefix, no internal function names, a
timeout stated once ("Timed out", spaces around it, as torch's own tests look for).
"""

from __future__ import annotations

import os
import re

import pytest

from _harness import run_ranks, scaled, worker_argv

# what torch's _DistTestBase.test_barrier_timeout_* look for in a backend's timeout
TORCH_TIMEOUT = re.compile(r" (Timed out|closed|timeout) ")
LINE = re.compile(r"^FIRST ERROR (\d+\.\d+) (\w+): (.*)$", re.M)


def first_errors(case: str, env: dict | None = None, timeout: float = 90,
                 ranks: int = 2) -> list[tuple[float, str, str]]:
    """Runs CASE on 2 ranks; returns the (seconds, exception type, message) of each of
    the first `ranks` ranks (the others may end without an error: a rank that exits)."""
    run = run_ranks(lambda r: worker_argv("first_error_worker.py", case), 2, timeout=timeout, env=env or {},
                    grace=scaled(30))
    assert not run.timed_out, run.describe()
    out = []
    for proc in run.procs[:ranks]:
        m = LINE.search(proc.stdout)
        assert m, f"{proc.name} printed no first error:\n{run.describe()}"
        out.append((float(m.group(1)), m.group(2), m.group(3)))
    return out


def said_once(msg: str) -> None:
    """No doubled prefix, no internal function name, no phrase said twice."""
    assert msg.count("gonccl:") + msg.count("gonccl rank") <= 1, msg
    assert "goncclGetUniqueId" not in msg and "goncclCommInit" not in msg, msg
    assert len(re.findall(r"(?i)timed out", msg)) <= 1, msg


SETTINGS = [
    ("GONCCL_DEBUG", "bogus", ["WARN, INFO or TRACE"]),
    ("GONCCL_DEVICE_PATH", "bogus", ["auto, model, samegpu, 1 or 0"]),
    ("GONCCL_TIMEOUT_MS", "soon", ["an integer of at least 1"]),
    ("GONCCL_DEBUG_SUBSYS", "INIT,NETWORK", ["NETWORK", "INIT, COLL, NET"]),
]


@pytest.mark.timeout(150)
@pytest.mark.parametrize("name,value,allowed", SETTINGS, ids=[f"{n}={v}" for n, v, _ in SETTINGS])
def test_bad_setting_fails_init(name, value, allowed):
    """A bad value is refused at init on every rank (a CPU job included, for a GPU
    setting), naming the variable, the value and the values it takes."""
    for rank, (secs, kind, msg) in enumerate(first_errors("settings", {name: value})):
        assert kind == "DistBackendError", (rank, kind, msg)
        assert f'{name}="{value}" is not a valid setting' in msg, (rank, msg)
        for a in allowed:
            assert a in msg, (rank, a, msg)
        assert "unset it" in msg, (rank, msg)
        said_once(msg)
        assert secs < scaled(20), (rank, secs, msg)


@pytest.mark.timeout(150)
def test_tls_without_files_names_all_three():
    for rank, (secs, kind, msg) in enumerate(first_errors("settings", {"GONCCL_TLS": "1"})):
        assert kind == "DistBackendError", (rank, kind, msg)
        assert "GONCCL_TLS_CERT, GONCCL_TLS_KEY and GONCCL_TLS_CA" in msg, (rank, msg)
        assert "GONCCL_TLS=1: GONCCL_TLS=1" not in msg, (rank, msg)
        said_once(msg)
        assert secs < scaled(20), (rank, secs, msg)


@pytest.mark.timeout(150)
def test_socket_ifname_lists_the_interfaces():
    for rank, (secs, kind, msg) in enumerate(first_errors("settings", {"GONCCL_SOCKET_IFNAME": "=nosuchif0"})):
        assert kind == "DistBackendError", (rank, kind, msg)
        assert "nosuchif0" in msg and "lo (127.0.0.1)" in msg, (rank, msg)
        said_once(msg)
        assert secs < scaled(20), (rank, secs, msg)


@pytest.mark.timeout(150)
def test_init_timeout_names_the_missing_rank():
    """Rank 1 never joins a new group: rank 0 is told so, at the group's timeout (3 s),
    with no word of network interfaces."""
    secs, kind, msg = first_errors("missing_rank", ranks=1)[0]
    assert kind == "DistBackendError", (kind, msg)
    assert "waiting for ranks [1] to join" in msg, msg
    assert "GONCCL_SOCKET_IFNAME" not in msg, msg
    assert TORCH_TIMEOUT.search(msg), msg
    said_once(msg)
    assert secs < scaled(15), (secs, msg)


@pytest.mark.timeout(150)
def test_dtype_mismatch_says_it_once():
    errors = first_errors("dtype_mismatch")
    for rank, (secs, kind, msg) in enumerate(errors):
        assert kind == "DistBackendError", (rank, kind, msg)
        assert "float32" in msg and "int32" in msg, (rank, msg)
        # one statement of the pair (before: the error's and again the diagnosis's)
        assert len(re.findall(r"called \S+ #\d+ \((float32|int32)[^)]*\) but rank \d called", msg)) == 1, (rank, msg)
        assert "every rank must pass tensors of the same dtype" in msg, (rank, msg)  # the next step
        said_once(msg)
        assert secs < scaled(15), (rank, secs, msg)


@pytest.mark.timeout(150)
def test_shape_mismatch_says_what_to_check():
    for rank, (secs, kind, msg) in enumerate(first_errors("shape_mismatch")):
        assert kind == "DistBackendError", (rank, kind, msg)
        assert "float32 x 1024" in msg and "float32 x 512" in msg, (rank, msg)
        assert "every rank must pass tensors of the same number of elements" in msg, (rank, msg)
        assert "check the shapes each rank builds" in msg, (rank, msg)  # the next step
        said_once(msg)
        assert secs < scaled(15), (rank, secs, msg)


REFUSALS = [
    ("uneven_all_gather", "all_gather #2", "all_gather: output tensor 0 has 5 elements, expected 4"),
    ("uneven_reduce_scatter_alive", "reduce_scatter #2",
     "reduce_scatter_tensor: the input tensor (world_size * output) has 9 elements, expected 8"),
]


@pytest.mark.timeout(150)
@pytest.mark.parametrize("case,call,reason", REFUSALS, ids=[c for c, _, _ in REFUSALS])
def test_rank_that_fails_a_local_check_tells_its_peers(case, call, reason):
    """Rank 1's own check of its tensors fails before the call; it raises its own
    ValueError and tells rank 0 why, whose call fails at once naming rank 1 and the
    check: not "lost rank 1" once rank 1 exits (uneven_all_gather), nor a timeout while
    it lives on (uneven_reduce_scatter_alive)."""
    (secs0, kind0, msg0), (_, kind1, msg1) = first_errors(case)
    assert kind1 == "ValueError", (kind1, msg1)
    assert msg1 == "gonccl: " + reason, msg1
    assert kind0 == "DistBackendError", (kind0, msg0)
    assert f"rank 1 refused {call}: {reason}" in msg0, msg0
    assert "lost rank" not in msg0 and "Timed out" not in msg0, msg0
    said_once(msg0)
    assert secs0 < scaled(15), (secs0, msg0)


@pytest.mark.timeout(150)
def test_timeout_is_stated_once_and_matches_torch():
    secs, kind, msg = first_errors("timeout", ranks=1)[0]
    assert kind == "DistBackendError", (kind, msg)
    assert TORCH_TIMEOUT.search(msg), msg
    assert "Timed out after 3000 ms waiting for rank 1" in msg, msg
    assert "to see which rank is behind" not in msg, msg  # it is named already
    said_once(msg)
    assert secs < scaled(15), (secs, msg)


@pytest.mark.timeout(150)
def test_peer_exited_says_so():
    secs, kind, msg = first_errors("peer_exited", ranks=1)[0]
    assert kind == "DistBackendError", (kind, msg)
    assert "rank 1" in msg and "exited or closed its group" in msg, msg
    said_once(msg)
    assert secs < scaled(15), (secs, msg)


@pytest.mark.timeout(150)
def test_debug_file_per_rank(tmp_path):
    """GONCCL_DEBUG_FILE, as NCCL_DEBUG_FILE: %h and %p make a file per process."""
    pattern = str(tmp_path / "gonccl.%h.%p.log")
    run = run_ranks(lambda r: worker_argv("first_error_worker.py", "debug_file"), 2, timeout=90,
                    env={"GONCCL_DEBUG": "INFO", "GONCCL_DEBUG_FILE": pattern})
    assert not run.timed_out and all(p.returncode == 0 for p in run.procs), run.describe()
    files = sorted(os.listdir(tmp_path))
    assert len(files) == 2, files
    for name in files:
        text = (tmp_path / name).read_text()
        assert " GONCCL INFO INIT " in text, text[:2000]
        assert re.fullmatch(r"gonccl\.[^.]+\.\d+\.log", name), name
    for p in run.procs:
        assert " GONCCL INFO " not in p.stderr, p.stderr[-2000:]


@pytest.mark.timeout(150)
def test_misspelt_setting_is_named_on_rank_0():
    """A GONCCL_* name that is no setting would be ignored in silence: rank 0 warns,
    once, with the closest setting's name; the job runs on."""
    run = run_ranks(lambda r: worker_argv("first_error_worker.py", "settings"), 2, timeout=90,
                    env={"GONCCL_TIMOUT_MS": "10000"})
    assert not run.timed_out, run.describe()
    for p in run.procs:
        assert "NO ERROR" in p.stdout, run.describe()
    hint = "GONCCL_TIMOUT_MS is not a setting gonccl knows (did you mean GONCCL_TIMEOUT_MS?)"
    assert run.procs[0].stderr.count(hint) == 1, run.describe()
    assert " GONCCL WARN " in run.procs[0].stderr, run.describe()
    assert hint not in run.procs[1].stderr, run.describe()


@pytest.mark.timeout(150)
def test_unknown_setting_is_an_error_when_asked():
    """GONCCL_UNKNOWN_ENV=error: init fails on every rank, naming the variable."""
    env = {"GONCCL_TIMOUT_MS": "10000", "GONCCL_UNKNOWN_ENV": "error"}
    for rank, (secs, kind, msg) in enumerate(first_errors("settings", env)):
        assert kind == "DistBackendError", (rank, kind, msg)
        assert "GONCCL_TIMOUT_MS is not a setting gonccl knows (did you mean GONCCL_TIMEOUT_MS?)" in msg, (rank, msg)
        said_once(msg)
        assert secs < scaled(20), (rank, secs, msg)


@pytest.mark.timeout(150)
def test_init_timeout_is_torchs_and_says_the_time_waited():
    """Under torch the group's timeout (new_group's timeout=, here 6 s) governs its init;
    GONCCL_TIMEOUT_MS, for callers that give none, does not cut it short (rank 0's
    process, which waits for the ranks to join, read it as 2 s), and rank 0 says so;
    the error states the time actually waited."""
    env = {"FIRST_ERROR_TIMEOUT_S": "6", "GONCCL_TIMEOUT_MS": "2000"}
    run = run_ranks(lambda r: worker_argv("first_error_worker.py", "late_group"), 2, timeout=90, env=env,
                    grace=scaled(30))
    assert not run.timed_out, run.describe()
    m = LINE.search(run.procs[0].stdout)
    assert m, run.describe()
    secs, kind, msg = float(m.group(1)), m.group(2), m.group(3)
    assert kind == "DistBackendError", (kind, msg)
    assert secs > 5, (secs, msg)  # the group's 6 s, not GONCCL_TIMEOUT_MS's 2 s
    waited = re.search(r"Timed out after (\d+) ms waiting for ranks \[1\] to join", msg)
    assert waited, msg
    assert 5000 <= int(waited.group(1)) <= secs * 1000, (secs, msg)
    assert "the init timeout is 6000 ms" in msg, msg
    said_once(msg)
    assert "GONCCL_TIMEOUT_MS=2000 does not apply" in run.procs[0].stderr, run.describe()


@pytest.mark.timeout(150)
def test_unwritable_debug_file_is_said_once_per_rank(tmp_path):
    """A GONCCL_DEBUG_FILE that cannot be opened is named once per process, whatever
    number of communicators and packages log."""
    run = run_ranks(lambda r: worker_argv("first_error_worker.py", "debug_file"), 2, timeout=90,
                    env={"GONCCL_DEBUG_FILE": str(tmp_path / "no" / "such" / "dir" / "log")})
    assert not run.timed_out and all(p.returncode == 0 for p in run.procs), run.describe()
    for p in run.procs:
        assert p.stderr.count("logging to stderr instead") == 1, run.describe()

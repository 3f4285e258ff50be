"""Crashes say where (issue 20): a rank the harness starts that dies of SIGSEGV in C code,
with the Go runtime running and owning SIGSEGV, leaves in its captured stderr the
signal, the faulting instruction, its native backtrace and the Python traceback naming
the frame, and a core file in the run's directory where the kernel's core_pattern
writes plain files. On 02dd7a2 the same rank printed nothing at all (exit code -11)."""

import os
import signal

import pytest

import _harness


def _core_pattern() -> str:
    try:
        with open("/proc/sys/kernel/core_pattern") as f:
            return f.read().strip()
    except OSError:
        return ""


@pytest.mark.timeout(180)
@pytest.mark.parametrize("where", ["main", "thread"])
def test_segfault_names_its_frame(tmp_path, monkeypatch, where):
    monkeypatch.setattr(_harness, "CORE_LIMIT", 64 << 20)  # a truncated core is proof enough
    assert _harness.crashtrace_library() is not None, "tests/crashtrace/crashtrace.c did not build (no gcc?)"
    run = _harness.run_ranks(lambda r: _harness.worker_argv("crash_worker.py", where), 1, timeout=150,
                             cwd=str(tmp_path))
    proc = run.procs[0]
    assert proc.returncode == -signal.SIGSEGV and not proc.killed, run.describe()
    assert "go runtime started: True" in proc.stdout, run.describe()
    err = proc.stderr
    assert "==== crashtrace: fatal SIGSEGV (fault address 0x0)" in err, run.describe()
    assert "==== crashtrace: faulting instruction: /" in err, run.describe()
    assert "==== crashtrace: native backtrace of that thread" in err, run.describe()
    assert "==== crashtrace: code addresses on that thread's stack" in err and "_ctypes" in err, run.describe()
    assert "crash_worker.py\", line" in err and "in crash_here" in err, run.describe()
    if where == "thread":
        assert "in _bootstrap_inner" in err, run.describe()  # the crashing thread is a Python thread
    pattern = _core_pattern()
    if pattern and not pattern.startswith("|") and "/" not in pattern:
        cores = [f for f in os.listdir(tmp_path) if f.startswith("core")]
        assert cores, f"no core file in {tmp_path} (core_pattern {pattern!r})\n{run.describe()}"
        assert "core files in" in run.describe()

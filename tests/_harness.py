"""Multi-process test harness: run N ranks (or any command) as child processes.

Every child
  * runs in its own session (start_new_session) so it and anything it spawns can be
    killed as a group, and is told by the kernel to die with the parent
    (prctl(PR_SET_PDEATHSIG, SIGKILL) in preexec_fn), so an interrupted pytest never
    leaves ranks behind;
  * has its stdout/stderr captured to temporary files (no pipe can fill up and block);
  * runs under a hard timeout, after which it and all of its descendants are killed
    (by pid) and the run is reported as timed out, with everything it printed.

Ranks get MASTER_ADDR=127.0.0.1, a free MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK,
LOCAL_WORLD_SIZE (for init_method="env://"). A worker reports failure by exiting
non-zero with a traceback on stderr; if one rank fails, the others get `grace`
seconds to finish on their own (they usually fail too, naming the dead peer) before
they are killed, so one crash does not cost a whole timeout.

Workers may also write a JSON report of named sections (see workers/_common.py);
`WorkerRun.section()` reads them.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(TESTS_DIR)
WORKERS_DIR = os.path.join(TESTS_DIR, "workers")
EXAMPLES_DIR = os.path.join(REPO_ROOT, "examples")
PYTHON = sys.executable

_PR_SET_PDEATHSIG = 1


def _time_scale() -> float:
    v = os.environ.get("GONCCL_TEST_TIME_SCALE", "")
    if not v:
        return 1.0
    try:
        f = float(v)
    except ValueError:
        f = -1.0
    if not 0 < f <= 1000:
        raise ValueError(f"GONCCL_TEST_TIME_SCALE={v!r}: want a number > 0 and <= 1000")
    return f


# One factor for every wall-clock limit of the tests (GONCCL_TEST_TIME_SCALE, default 1;
# the Go tests read it through internal/testtime, the workers through _common.scaled):
# run_processes scales its timeout and grace, conftest.py the pytest-timeout marks.
TIME_SCALE = _time_scale()


def scaled(seconds: float) -> float:
    """seconds times GONCCL_TEST_TIME_SCALE."""
    return seconds * TIME_SCALE


_libc = ctypes.CDLL(None, use_errno=True)


def _die_with_parent_fn():
    """A preexec_fn: SIGKILL this child when the process that started it dies."""
    parent = os.getpid()

    def preexec() -> None:
        if _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            os._exit(121)
        # The parent may already have died between fork and prctl.
        if os.getppid() != parent:
            os._exit(122)

    return preexec


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _children_of() -> dict[int, list[int]]:
    """ppid -> [pid] for every process visible in /proc."""
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read().decode(errors="replace")
        except OSError:
            continue
        # The command name (field 2) may contain spaces and parentheses.
        rest = stat[stat.rfind(")") + 2 :].split()
        ppid = int(rest[1])
        tree.setdefault(ppid, []).append(int(entry))
    return tree


def descendants(pid: int) -> list[int]:
    """Every live descendant of pid (children, grandchildren, ...)."""
    tree = _children_of()
    out, todo = [], [pid]
    while todo:
        for child in tree.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def kill_tree(proc: subprocess.Popen) -> None:
    """SIGKILL proc, its process group and every descendant (found before killing,
    since killing a parent reparents its children). Only processes this harness
    started, directly or through them, are touched."""
    if proc.poll() is not None:
        return
    victims = descendants(proc.pid)
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # its own session/group (start_new_session)
    except (ProcessLookupError, PermissionError):
        pass
    for pid in [proc.pid, *victims]:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


@dataclass
class ProcResult:
    """One child process's outcome."""

    name: str
    argv: list[str]
    returncode: int | None = None
    stdout: str = ""
    stderr: str = ""
    killed: bool = False  # killed by the harness (timeout, or a peer failed)
    end_time: float = 0.0  # time.time() when the harness saw it exit

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.killed

    def describe(self, tail: int = 12000) -> str:
        def clip(s: str) -> str:
            return s if len(s) <= tail else "[... clipped ...]\n" + s[-tail:]

        status = "KILLED by the harness" if self.killed else f"exit code {self.returncode}"
        return (
            f"---- {self.name}: {status}\n"
            f"     argv: {' '.join(self.argv)}\n"
            f"---- {self.name} stdout:\n{clip(self.stdout)}\n"
            f"---- {self.name} stderr:\n{clip(self.stderr)}\n"
        )


@dataclass
class RunResult:
    """The outcome of a group of processes run together."""

    procs: list[ProcResult]
    elapsed: float
    timed_out: bool
    timeout: float
    extra: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.timed_out and all(p.ok for p in self.procs)

    def describe(self) -> str:
        head = (
            f"run took {self.elapsed:.1f} s"
            + (f"; TIMED OUT after {self.timeout:.0f} s, all processes killed" if self.timed_out else "")
            + "\n"
        )
        return head + "".join(p.describe() for p in self.procs)

    def assert_ok(self, what: str = "run") -> None:
        assert self.ok, f"{what} failed:\n{self.describe()}"


def run_processes(
    argvs: Sequence[Sequence[str]],
    *,
    timeout: float,
    envs: Sequence[dict] | None = None,
    cwd: str | None = None,
    names: Sequence[str] | None = None,
    grace: float = 20.0,
) -> RunResult:
    """Starts every argv at once and waits for all of them.

    timeout: hard limit for the whole group (then everything is killed).
    grace: once one process has failed, how long the others may keep running.
    Both are scaled by GONCCL_TEST_TIME_SCALE (scaled()).
    """
    timeout, grace = scaled(timeout), scaled(grace)
    names = list(names or [f"proc{i}" for i in range(len(argvs))])
    envs = list(envs or [dict(os.environ) for _ in argvs])
    results = [ProcResult(name=n, argv=[str(a) for a in argv]) for n, argv in zip(names, argvs)]
    files = []
    procs: list[subprocess.Popen | None] = [None] * len(argvs)
    start = time.monotonic()
    timed_out = False
    try:
        for i, argv in enumerate(argvs):
            out = tempfile.TemporaryFile()
            err = tempfile.TemporaryFile()
            files.append((out, err))
            procs[i] = subprocess.Popen(
                [str(a) for a in argv],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                env=envs[i],
                cwd=cwd,
                start_new_session=True,
                preexec_fn=_die_with_parent_fn(),
            )
        deadline = start + timeout
        fail_deadline = None
        while True:
            running = False
            for i, p in enumerate(procs):
                rc = p.poll()
                if rc is None:
                    running = True
                elif results[i].end_time == 0.0:
                    results[i].end_time = time.time()
                    results[i].returncode = rc
                    if rc != 0 and fail_deadline is None:
                        fail_deadline = time.monotonic() + grace
            if not running:
                break
            now = time.monotonic()
            if now >= deadline:
                timed_out = True
                break
            if fail_deadline is not None and now >= fail_deadline:
                break
            time.sleep(0.05)
    finally:
        for i, p in enumerate(procs):
            if p is None:
                continue
            if p.poll() is None:
                kill_tree(p)
                results[i].killed = True
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
            if results[i].end_time == 0.0:
                results[i].end_time = time.time()
            results[i].returncode = p.returncode
        for i, (out, err) in enumerate(files):
            out.seek(0)
            err.seek(0)
            results[i].stdout = out.read().decode(errors="replace")
            results[i].stderr = err.read().decode(errors="replace")
            out.close()
            err.close()
    return RunResult(results, time.monotonic() - start, timed_out, timeout)


def rank_env(rank: int, world_size: int, port: int, base: dict | None = None, extra: dict | None = None) -> dict:
    """The environment of one rank of a torch.distributed job (init_method env://)."""
    env = dict(os.environ if base is None else base)
    env.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        WORLD_SIZE=str(world_size),
        LOCAL_RANK=str(rank),
        LOCAL_WORLD_SIZE=str(world_size),
        PYTHONUNBUFFERED="1",
    )
    # Any non-empty value would enable faulthandler before libgonccl loads; leave the
    # signal handlers as a plain `python script.py` has them.
    env.pop("PYTHONFAULTHANDLER", None)
    # N ranks share 2 cores: one intra-op thread each keeps them from fighting.
    env.setdefault("OMP_NUM_THREADS", "1")
    env.update(extra or {})
    return env


def run_ranks(
    argv_for_rank: Callable[[int], Sequence[str]],
    world_size: int,
    *,
    timeout: float,
    env: dict | None = None,
    base_env: dict | None = None,
    cwd: str | None = None,
    grace: float = 20.0,
) -> RunResult:
    """Runs world_size ranks of a torch.distributed job, one process each."""
    port = free_port()
    argvs = [list(argv_for_rank(r)) for r in range(world_size)]
    envs = [rank_env(r, world_size, port, base_env, env) for r in range(world_size)]
    run = run_processes(
        argvs, timeout=timeout, envs=envs, cwd=cwd, names=[f"rank {r}" for r in range(world_size)], grace=grace
    )
    run.extra["master_port"] = port
    return run


def worker_argv(worker: str, *args: str) -> list[str]:
    """argv that runs tests/workers/<worker> with this interpreter."""
    return [PYTHON, os.path.join(WORKERS_DIR, worker), *[str(a) for a in args]]


class WorkerRun:
    """One run of a report-writing worker (workers/_common.Checker) on N ranks."""

    def __init__(self, worker: str, world_size: int, report_dir: str, *, timeout: float, env: dict | None = None,
                 base_env: dict | None = None, args: Sequence[str] = (), cwd: str | None = None,
                 grace: float = 20.0):
        self.worker = worker
        self.world_size = world_size
        self.report_dir = report_dir
        os.makedirs(report_dir, exist_ok=True)
        self.run = run_ranks(
            lambda r: worker_argv(worker, report_dir, *args),
            world_size,
            timeout=timeout,
            env=env,
            base_env=base_env,
            cwd=cwd or report_dir,
            grace=grace,
        )
        self.reports = []
        for r in range(world_size):
            path = os.path.join(report_dir, f"report_rank{r}.json")
            try:
                with open(path) as f:
                    self.reports.append(json.load(f))
            except (OSError, ValueError):
                self.reports.append({"sections": {}, "order": [], "finished": False})

    def section(self, name: str) -> list[dict]:
        """Asserts that every rank ran section `name` with at least one check and no failed
        one, and returns the per-rank section records (each has "data" the worker stored).
        A rank may instead have skipped the section (Checker.skip, with a reason); when
        every rank skipped it, the test is skipped with their reason. A section that ran
        no check and did not skip fails: passing must mean that something was checked."""
        records, problems, skipped = [], [], []
        for r, rep in enumerate(self.reports):
            sec = rep["sections"].get(name)
            if sec is None:
                problems.append(f"rank {r}: section {name!r} never finished "
                                f"(sections done: {rep.get('order')})")
                continue
            if sec["failures"]:
                problems.append(f"rank {r}: section {name!r}: {len(sec['failures'])} failed check(s):\n  "
                                + "\n  ".join(sec["failures"][:25]))
            elif sec.get("skipped"):
                skipped.append(f"rank {r}: {sec['skipped']}")
            elif sec.get("checks", 0) == 0:
                problems.append(f"rank {r}: section {name!r} ran no check and did not skip "
                                "(a worker section that checks nothing calls Checker.skip(reason))")
            records.append(sec)
        if problems:
            raise AssertionError(
                f"{self.worker} on {self.world_size} rank(s):\n" + "\n".join(problems)
                + "\n\n" + self.run.describe()
            )
        if skipped and len(skipped) == len(self.reports):
            import pytest

            reasons = sorted({s.split(": ", 1)[1] for s in skipped})
            pytest.skip(f"{self.worker} on {self.world_size} rank(s): section {name!r} skipped: " + "; ".join(reasons))
        return records


# Devices the worker-based tests run gonccl's operations on (workers/_device.py):
#   cpu       CPU tensors, as the workers build them;
#   cuda      CUDA copies of them (rank r on cuda:r % device_count); needs a GPU;
#   cpu-copy  CPU copies made by the same wrapper, so the wrapper the cuda runs depend
#             on is itself checked where there is no GPU (one configuration per file).
DEVICES = ("cpu", "cuda")


def device_cases(configs, copy_config: str) -> list:
    """(config, device) pairs: every config on every device, plus copy_config on
    cpu-copy. The cuda ones are marked requires("gpu") (conftest.py: GONCCL_REQUIRE)."""
    import pytest

    return [pytest.param(c, d, marks=pytest.mark.requires("gpu")) if d == "cuda" else (c, d)
            for d in DEVICES for c in configs] + [(copy_config, "cpu-copy")]


def device_env(device: str) -> dict:
    """The worker environment for device; skips the test for cuda without a GPU."""
    if device == "cuda":
        import pytest
        import torch

        if not torch.cuda.is_available():
            pytest.skip("no GPU here (torch.cuda.is_available() is False): gonccl's CUDA path is covered in CI "
                        "only against the fake driver (test_cuda_capi.py); this runs where a GPU is")
    return {} if device == "cpu" else {"GONCCL_TEST_DEVICE": device}


def device_key(key: str, device: str) -> str:
    """A worker_runs cache key per device (the cpu runs keep their old keys)."""
    return key if device == "cpu" else f"{key}-{device}"

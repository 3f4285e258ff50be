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
import hashlib
import importlib.util
import json
import os
import resource
import shutil
import signal
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


def _die_with_parent_fn(core_limit: int = 0):
    """A preexec_fn: SIGKILL this child when the process that started it dies; allow it
    core files of up to core_limit bytes (0: none, as the default rlimit has it)."""
    parent = os.getpid()

    def preexec() -> None:
        if _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            os._exit(121)
        # The parent may already have died between fork and prctl.
        if os.getppid() != parent:
            os._exit(122)
        if core_limit:
            hard = resource.getrlimit(resource.RLIMIT_CORE)[1]
            soft = core_limit if hard == resource.RLIM_INFINITY else min(core_limit, hard)
            resource.setrlimit(resource.RLIMIT_CORE, (soft, hard))

    return preexec


# Crashes say where (issue 20): every rank gets tests/crashtrace/crashtrace.c preloaded
# (the signal, the faulting instruction, the native backtrace and every Python thread's
# traceback on SIGSEGV/SIGBUS/SIGFPE/SIGILL/SIGABRT, before Go's handlers, which forward
# it faults outside Go code), GOTRACEBACK=crash (a fault in Go code prints every
# goroutine, then aborts), and core files of up to CORE_LIMIT bytes in its core directory
# (the run's cwd), where /proc/sys/kernel/core_pattern names a plain file.
CRASHTRACE_SOURCE = os.path.join(TESTS_DIR, "crashtrace", "crashtrace.c")
CORE_LIMIT = int(os.environ.get("GONCCL_TEST_CORE_LIMIT_MB", "2048")) << 20
_crashtrace: list[str | None] = []


def crashtrace_library() -> str | None:
    """tests/crashtrace/crashtrace.c built once per version of it; None without a compiler."""
    if not _crashtrace:
        path = None
        cc = shutil.which("gcc") or shutil.which("cc")
        if cc is not None:
            with open(CRASHTRACE_SOURCE, "rb") as f:
                digest = hashlib.sha256(f.read()).hexdigest()[:16]
            out = os.path.join(tempfile.gettempdir(), f"gonccl-crashtrace-{os.getuid()}-{digest}.so")
            if not os.path.exists(out):
                tmp = f"{out}.{os.getpid()}.tmp"
                built = subprocess.run([cc, "-shared", "-fPIC", "-O1", "-o", tmp, CRASHTRACE_SOURCE, "-ldl"],
                                       capture_output=True, timeout=120)
                if built.returncode == 0:
                    os.replace(tmp, out)
            path = out if os.path.exists(out) else None
        _crashtrace.append(path)
    return _crashtrace[0]


def crash_env(env: dict, core_dir: str | None) -> None:
    """Adds to a rank's environment what makes a crash say where (see CRASHTRACE_SOURCE)."""
    lib = crashtrace_library()
    if lib is not None and lib not in env.get("LD_PRELOAD", ""):
        env["LD_PRELOAD"] = " ".join(x for x in (lib, env.get("LD_PRELOAD", "")) if x)
    env.setdefault("GOTRACEBACK", "crash")
    if core_dir:
        env["GONCCL_TEST_CORE_DIR"] = core_dir


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago, below the ephemeral range
    (python/gonccl/_ports.py, loaded from the source tree: the harness never imports the
    installed package)."""
    return _ports().free_port()


def _ports():
    spec = importlib.util.spec_from_file_location("gonccl_ports", os.path.join(REPO_ROOT, "python", "gonccl", "_ports.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


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
        # A crash's cause comes first (Go's "fatal error:" or "SIGABRT: abort" and the
        # crashing goroutine, a C library's message before abort()), the goroutine dump
        # after it: keep both ends.
        head = tail // 3

        def clip(s: str) -> str:
            if len(s) <= head + tail:
                return s
            return s[:head] + "\n[... clipped ...]\n" + s[-tail:]

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
            + (f"; core files in {self.extra['cores']}" if "cores" in self.extra else "")
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
    core_limit: int = 0,
) -> RunResult:
    """Starts every argv at once and waits for all of them.

    timeout: hard limit for the whole group (then everything is killed).
    grace: once one process has failed, how long the others may keep running.
    core_limit: RLIMIT_CORE of the children, in bytes (0: no core files).
    timeout and grace are scaled by GONCCL_TEST_TIME_SCALE (scaled()).
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
                preexec_fn=_die_with_parent_fn(core_limit),
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


def rank_env(rank: int, world_size: int, port: int, base: dict | None = None, extra: dict | None = None,
             core_dir: str | None = None) -> dict:
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
    # Any non-empty value would enable faulthandler before libgonccl loads, and a
    # worker's own faulthandler.disable() would then drop Go's handlers: crash reports
    # come from crashtrace instead (crash_env), which leaves Python's handling alone.
    env.pop("PYTHONFAULTHANDLER", None)
    crash_env(env, core_dir)
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
    core_dir = cwd or tempfile.mkdtemp(prefix="gonccl-ranks-")
    envs = [rank_env(r, world_size, port, base_env, env, core_dir) for r in range(world_size)]
    run = run_processes(
        argvs, timeout=timeout, envs=envs, cwd=cwd, names=[f"rank {r}" for r in range(world_size)], grace=grace,
        core_limit=CORE_LIMIT,
    )
    run.extra["master_port"] = port
    if any(p.returncode is not None and p.returncode < 0 and not p.killed for p in run.procs):
        cores = sorted(f for f in os.listdir(core_dir) if f.startswith("core"))
        run.extra["cores"] = f"{core_dir}: {cores or 'none (see /proc/sys/kernel/core_pattern)'}"
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

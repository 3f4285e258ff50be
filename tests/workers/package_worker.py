"""Checks of the installed gonccl package in a fresh process (world size 1).

usage: package_worker.py REPORT_DIR MODE      (env: RANK=0, WORLD_SIZE=1, MASTER_*)

MODE
  import      `import gonccl` maps no libgonccl.so and starts no Go runtime (fork still
              works); ctypes can load the library with RTLD_NOW; goncclGetVersion works;
              GONCCL_DEBUG set from Python *after* the Go runtime started still applies.
  debug       never imports gonccl: init_process_group("gonccl") works through torch's
              entry points; the backend's capability is cpu+cuda; world-size-1
              collectives work; GONCCL_DEBUG=INFO set in os.environ before init makes the
              INIT log appear (the test reads stderr); a fork after the Go runtime started
              gets a clear error instead of hanging.
  quiet       like debug but without GONCCL_DEBUG (the test checks no INFO log appears)
              and with TORCH_DEVICE_BACKEND_AUTOLOAD=0 in the environment, so only the
              torch.distributed.backends entry point can register the backend.
"""

from __future__ import annotations

import ctypes
import os
import select
import sys
import time

from _common import Checker

RANK = int(os.environ["RANK"])
CK: Checker


def gonccl_maps() -> list[str]:
    with open("/proc/self/maps") as f:
        return sorted({line.split()[-1] for line in f if "libgonccl" in line})


def thread_count() -> int:
    return len(os.listdir("/proc/self/task"))


def fork_and_run(child_fn, timeout: float = 20.0) -> tuple[str, str]:
    """Forks; the child runs child_fn() -> (exit code, message) and reports through a
    pipe. Returns ("exit N" | "hung", message). A hung child is killed (by pid)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        code, msg = 99, "child_fn raised"
        try:
            code, msg = child_fn()
        except BaseException as e:  # noqa: BLE001
            code, msg = 98, f"{type(e).__name__}: {e}"
        os.write(w, msg.encode()[:4000])
        os._exit(code)
    os.close(w)
    deadline = time.monotonic() + timeout
    status = None
    while time.monotonic() < deadline:
        done, st = os.waitpid(pid, os.WNOHANG)
        if done:
            status = st
            break
        time.sleep(0.02)
    if status is None:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        os.close(r)
        return "hung", ""
    msg = b""
    while select.select([r], [], [], 0)[0]:
        chunk = os.read(r, 4096)
        if not chunk:
            break
        msg += chunk
    os.close(r)
    return f"exit {os.waitstatus_to_exitcode(status)}", msg.decode(errors="replace")


def mode_import() -> None:
    with CK.section("import_is_lazy"):
        import torch  # noqa: F401

        threads_before = thread_count()
        CK.check(gonccl_maps() == [], f"libgonccl mapped by `import torch` alone: {gonccl_maps()}")
        import gonccl

        CK.check(gonccl_maps() == [], f"`import gonccl` mapped {gonccl_maps()}")
        CK.check("gonccl._C" not in sys.modules, "`import gonccl` imported gonccl._C")
        grew = thread_count() - threads_before
        CK.check(grew == 0, f"`import gonccl` started {grew} thread(s) (the Go runtime?)")
        CK.data("library_path", gonccl.library_path())
        CK.check(os.path.isfile(gonccl.library_path()), f"library_path() {gonccl.library_path()} is not a file")
        CK.check(os.path.isfile(os.path.join(gonccl.include_path(), "gonccl.h")),
                 f"no gonccl.h in include_path() {gonccl.include_path()}")
        # Fork is safe while the Go runtime is not running.
        res, msg = fork_and_run(lambda: (7, str(float(torch.ones(3).sum()))))
        CK.check(res == "exit 7" and msg == "3.0", f"fork after `import gonccl`: child {res}: {msg}")

    with CK.section("ctypes_rtld_now"):
        import gonccl

        # ctypes always dlopens with RTLD_NOW: every undefined symbol must resolve.
        lib = ctypes.CDLL(gonccl.library_path())
        ctypes.CDLL(gonccl.library_path(), mode=os.RTLD_NOW | os.RTLD_LOCAL)
        CK.check(gonccl_maps() != [], "ctypes loaded the library but it is not in /proc/self/maps")
        version = ctypes.c_int(-1)
        lib.goncclGetVersion.restype = ctypes.c_int
        rc = lib.goncclGetVersion(ctypes.byref(version))
        CK.check(rc == 0, f"goncclGetVersion returned {rc}")
        CK.check(version.value > 0, f"goncclGetVersion gave version {version.value}")
        from gonccl import _C

        CK.check(version.value == _C.header_version(),
                 f"library version {version.value} != header GONCCL_VERSION_CODE {_C.header_version()}")
        v = version.value
        want = f"{v // 10000}.{v // 100 % 100}.{v % 100}"
        CK.check(gonccl.version() == want, f"gonccl.version() {gonccl.version()!r} != {want!r}")
        # One source (gonccl.h): the package's version and its metadata's are the library's.
        import importlib.metadata

        CK.check(gonccl.__version__ == want, f"gonccl.__version__ {gonccl.__version__!r} != library {want!r}")
        dist = importlib.metadata.version("gonccl")
        CK.check(dist == want, f"installed distribution version {dist!r} != library {want!r}")
        lib.goncclGetErrorString.restype = ctypes.c_char_p
        s = lib.goncclGetErrorString(100)  # goncclTimeout
        CK.check(bool(s), f"goncclGetErrorString(goncclTimeout) = {s!r}")
        CK.data("version", v)

    with CK.section("env_after_go_started"):
        # The Go runtime is running now (ctypes loaded it). A setting made from Python
        # at this point must still reach the communicator created next.
        import torch
        import torch.distributed as dist

        os.environ["GONCCL_DEBUG"] = "INFO"
        print("MARK before init", file=sys.stderr, flush=True)
        dist.init_process_group("gonccl")
        t = torch.ones(4)
        dist.all_reduce(t)
        CK.check(bool((t == 1).all()), f"all_reduce at world size 1 gave {t}")
        dist.destroy_process_group()
        print("MARK after destroy", file=sys.stderr, flush=True)


def mode_entrypoint(debug: bool) -> None:
    with CK.section("registered_without_import"):
        import torch
        import torch.distributed as dist

        autoload = os.environ.get("TORCH_DEVICE_BACKEND_AUTOLOAD", "1") != "0"
        if autoload:
            # The torch.backends entry point runs at `import torch`.
            CK.check("gonccl" in sys.modules, "`import torch` did not autoload gonccl (torch.backends entry point)")
        else:
            CK.check("gonccl" not in sys.modules, "gonccl was imported although autoload is off")
        CK.check(gonccl_maps() == [], f"libgonccl mapped before any process group: {gonccl_maps()}")
        if debug:
            os.environ["GONCCL_DEBUG"] = "INFO"
        print("MARK before init", file=sys.stderr, flush=True)
        dist.init_process_group("gonccl")
        print("MARK after init", file=sys.stderr, flush=True)
        CK.check("gonccl" in sys.modules, "init_process_group('gonccl') worked without loading the gonccl package?")
        CK.check(dist.get_backend() == "gonccl", f"default backend is {dist.get_backend()!r}")
        caps = dist.Backend.backend_capability.get("gonccl")
        CK.check(caps == ["cpu", "cuda"], f"backend_capability['gonccl'] = {caps}")
        CK.check("GONCCL" in dist.Backend._plugins, f"plugins: {list(dist.Backend._plugins)}")
        CK.check(gonccl_maps() != [], "a gonccl process group exists but libgonccl is not mapped")

    with CK.section("world_size_1_collectives"):
        from torch.distributed import ReduceOp

        x = torch.tensor([1.5, -2.0, 3.25])
        for op in (ReduceOp.SUM, ReduceOp.AVG, ReduceOp.MIN, ReduceOp.MAX, ReduceOp.PRODUCT):
            t = x.clone()
            dist.all_reduce(t, op=op)
            CK.check(torch.equal(t, x), f"all_reduce {op} at world size 1 gave {t}")
        i = torch.tensor([7, -3, 2**40], dtype=torch.int64)
        t = i.clone()
        dist.all_reduce(t)
        CK.check(torch.equal(t, i), f"int64 all_reduce at world size 1 gave {t}")
        b = torch.arange(6, dtype=torch.float16)
        dist.broadcast(b, src=0)
        CK.check(torch.equal(b, torch.arange(6, dtype=torch.float16)), f"broadcast gave {b}")
        outs = [torch.zeros(3)]
        dist.all_gather(outs, x)
        CK.check(torch.equal(outs[0], x), f"all_gather gave {outs}")
        out = torch.zeros(3)
        dist.all_gather_into_tensor(out, x)
        CK.check(torch.equal(out, x), f"all_gather_into_tensor gave {out}")
        dist.barrier()
        t = x.clone()
        w = dist.all_reduce(t, async_op=True)
        CK.check(w.wait() is True and torch.equal(t, x), "async all_reduce at world size 1")
        e = torch.zeros(0)
        dist.all_reduce(e)
        CK.check(e.numel() == 0, "empty all_reduce")

    with CK.section("fork_after_go_started"):
        # The Go runtime runs now; a forked child must get a clear error, not hang.
        def child():
            try:
                dist.all_reduce(torch.ones(2))
            except Exception as e:  # noqa: BLE001
                return (0, f"{type(e).__name__}: {e}")
            return (5, "all_reduce in a forked child returned without an error")

        res, msg = fork_and_run(child)
        CK.data("fork", [res, msg])
        CK.check(res == "exit 0", f"forked child: {res}: {msg}")
        CK.check("fork" in msg.lower(), f"the forked child's error does not mention fork: {msg}")
        t = torch.ones(2)
        dist.all_reduce(t)
        CK.check(torch.equal(t, torch.ones(2)), "the parent's group after the fork")

    with CK.section("destroy"):
        dist.destroy_process_group()
        CK.check(not dist.is_initialized(), "destroy_process_group() left the default group")
        print("MARK after destroy", file=sys.stderr, flush=True)


def main() -> None:
    global CK
    CK = Checker(sys.argv[1], RANK)
    mode = sys.argv[2]
    if mode == "import":
        mode_import()
    else:
        mode_entrypoint(debug=(mode == "debug"))
    CK.finish()


if __name__ == "__main__":
    main()

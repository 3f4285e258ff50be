"""The installed gonccl package behaves as a torch backend plugin should.

Three fresh processes (workers/package_worker.py, world size 1) prove:
  * `import gonccl` neither maps libgonccl.so nor starts the Go runtime (fork stays
    safe), and ctypes can load the library with RTLD_NOW (no unresolved symbols, the
    go-nvml hazard in DESIGN.md), goncclGetVersion returns the header's version code;
  * `init_process_group("gonccl")` works in a script that never imports gonccl, both
    through the `torch.backends` autoload entry point and, with autoload off, through
    the `torch.distributed.backends` entry point; backend_capability lists cpu and cuda;
    world-size-1 all_reduce / broadcast / all_gather / barrier work;
  * GONCCL_DEBUG=INFO set in os.environ from Python before init (even after the Go
    runtime has started) makes the INIT log line appear on stderr, and without it no
    such line appears (so the setting, not a default, produced it);
  * a process forked after the Go runtime started gets a clear error, not a hang.
"""

import os

import pytest

RUN_TIMEOUT = 120
MODES = {
    "import": {},
    "debug": {},
    "quiet": {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"},
}


def clean_env() -> dict:
    """The parent's environment without any GONCCL_* setting."""
    return {k: v for k, v in os.environ.items() if not k.startswith("GONCCL_")}


def package_run(worker_runs, mode):
    return worker_runs(
        f"package-{mode}", "package_worker.py", 1, timeout=RUN_TIMEOUT,
        env=MODES[mode], base_env=clean_env(), args=[mode],
    )


def is_init_log(line: str) -> bool:
    """gonccl's INFO summary of a rank's init: names gonccl, INIT and the rank."""
    return "INIT" in line and "gonccl" in line.lower() and "rank" in line


def stderr_between(run, start: str, end: str) -> list[str]:
    lines = run.run.procs[0].stderr.splitlines()
    assert start in lines, f"marker {start!r} missing:\n{run.run.describe()}"
    i = lines.index(start)
    j = lines.index(end, i) if end in lines[i:] else len(lines)
    return lines[i + 1:j]


@pytest.mark.timeout(RUN_TIMEOUT + 30)
@pytest.mark.parametrize(
    "mode,section",
    [
        ("import", "import_is_lazy"),
        ("import", "ctypes_rtld_now"),
        ("import", "env_after_go_started"),
        ("debug", "registered_without_import"),
        ("debug", "world_size_1_collectives"),
        ("debug", "fork_after_go_started"),
        ("debug", "destroy"),
        ("quiet", "registered_without_import"),
        ("quiet", "world_size_1_collectives"),
        ("quiet", "fork_after_go_started"),
        ("quiet", "destroy"),
    ],
)
def test_package_section(worker_runs, mode, section):
    package_run(worker_runs, mode).section(section)


@pytest.mark.timeout(RUN_TIMEOUT + 30)
@pytest.mark.parametrize("mode", list(MODES))
def test_package_worker_exits_cleanly(worker_runs, mode):
    package_run(worker_runs, mode).run.assert_ok(f"package worker ({mode})")


@pytest.mark.timeout(RUN_TIMEOUT + 30)
def test_gonccl_debug_from_python_logs_init(worker_runs):
    run = package_run(worker_runs, "debug")
    logs = stderr_between(run, "MARK before init", "MARK after init")
    assert any(is_init_log(line) for line in logs), (
        "GONCCL_DEBUG=INFO set in os.environ before init_process_group produced no INIT "
        f"line naming gonccl and the rank on stderr:\n{run.run.describe()}"
    )


@pytest.mark.timeout(RUN_TIMEOUT + 30)
def test_gonccl_debug_set_after_go_runtime_started(worker_runs):
    run = package_run(worker_runs, "import")
    logs = stderr_between(run, "MARK before init", "MARK after destroy")
    assert any(is_init_log(line) for line in logs), (
        "GONCCL_DEBUG=INFO set from Python after the Go runtime started was ignored "
        f"(no INIT line):\n{run.run.describe()}"
    )


@pytest.mark.timeout(RUN_TIMEOUT + 30)
def test_no_info_log_by_default(worker_runs):
    run = package_run(worker_runs, "quiet")
    run.run.assert_ok("package worker (quiet)")
    noisy = [line for line in run.run.procs[0].stderr.splitlines() if is_init_log(line) or " GONCCL INFO " in line]
    assert not noisy, f"INFO logs without GONCCL_DEBUG: {noisy}"


def test_library_leaves_no_nvml_symbol_undefined(package_dir):
    """GPU topology reads NVML through cuda/topology/nvml.go's dlopen backend, not go-nvml's
    bindings, whose undefined nvml* symbols would break RTLD_NOW loads (ctypes' default)
    and linking a C program with -lgonccl (DESIGN.md, hazards)."""
    import shutil
    import subprocess

    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("nm (binutils) is not installed")
    lib = os.path.join(package_dir, "libgonccl.so")
    out = subprocess.run([nm, "-D", "--undefined-only", lib], capture_output=True, text=True, timeout=60, check=True)
    nvml = [line.split()[-1] for line in out.stdout.splitlines() if "nvml" in line.lower()]
    assert not nvml, f"{lib} leaves NVML symbols undefined: {nvml[:10]}"


@pytest.mark.timeout(RUN_TIMEOUT + 30)
def test_init_log_describes_gpu_topology(worker_runs):
    """At INIT each rank logs its GPUs, or (no NVIDIA driver, as here and in CI) one
    INFO line saying NVML is absent; never an error or warning."""
    run = package_run(worker_runs, "debug")
    logs = stderr_between(run, "MARK before init", "MARK after init")
    topo = [line for line in logs if "INIT" in line and "rank 0: " in line and "GPU topology" in line]
    assert topo, f"no GPU topology line at INIT:\n{run.run.describe()}"
    assert all(line.startswith("INFO") or " INFO " in line for line in topo), topo
    if "no GPU topology: NVML is not available" in topo[0]:
        assert "libnvidia-ml.so.1" in topo[0], topo[0]
    else:
        assert "GPU topology (NVML): " in topo[0], topo[0]

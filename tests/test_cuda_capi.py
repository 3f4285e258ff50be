"""Device buffers through the C ABI, against the fake CUDA driver (tests/fakecuda).

tests/capi/cuda_capi_test.c runs as 2 and 3 processes with GONCCL_CUDA_LIBRARY naming
the fake, which stands in for libcuda.so.1 (host memory as device memory, streams as
ordered queues run by their own threads, with random delays). Every rank checks the
values of all_reduce (also in place and async), broadcast, all_gather (also in place),
reduce_scatter, reduce, alltoall, gather and alltoallv on "device" buffers; that a
slow kernel queued before a call is seen by it; that work queued after a blocking call
or on another stream after goncclRequestWaitStream sees the result; that no queued
copy touched freed memory and the pinned pool is freed by goncclCommDestroy; and that
bad pointers and streams give errors naming the CUDA error; and that a collective the
ranks disagree on fails everywhere without copying anything back. Stream ordering (issue
13): a consumer on the legacy or per-thread default stream after goncclRequestWaitStream
sees the result although gonccl's stream is non-blocking and its copies run late; a
copy-out queued after an op completed, under goncclRequestHoldStream, is seen by the next
op; cudaStreamPerThread and streams under graph capture are refused before anything is
queued; memory of another device than the stream's is refused; the pinned pool holds one
primary context reference until destroy; send/recv (group ring, async with tags, any
source; an exchange of messages of many chunks in a group, and one mixing host and
device buffers) and uneven alltoallv on device buffers; on the device path, a barrier
that holds the streams rather than the host.

The fake is strict where the real driver is unforgiving (issue 20's crashes):
fakecuda_fault_test shows that a destroyed event, freed pinned memory and a reset
primary context kill the process. cuda_multicomm_test runs several communicators on
one device in one process, their streams from torch's round-robin pool so that they
share one (a world communicator, one over ranks 1..N-1, a one-rank one; held operations
with copy-outs from completion threads; two issuing threads; the subset destroyed while
world operations run). Both C tests also run built with AddressSanitizer.

This is the only place the CUDA path runs in CI: no real GPU is involved.
"""

import glob
import os
import re
import shutil
import signal
import subprocess

import pytest

import _harness

from gonccl import trace

FAKE_DIR = os.path.join(_harness.TESTS_DIR, "fakecuda")
TEST_SOURCE = os.path.join(_harness.TESTS_DIR, "capi", "cuda_capi_test.c")
RUN_TIMEOUT = 180


MULTICOMM_SOURCE = os.path.join(_harness.TESTS_DIR, "capi", "cuda_multicomm_test.c")
FAULT_SOURCE = os.path.join(_harness.TESTS_DIR, "capi", "fakecuda_fault_test.c")
ASAN = ["-g", "-fsanitize=address", "-fno-omit-frame-pointer"]
# LeakSanitizer would report the C memory the Go runtime and gonccl's handles keep until
# exit; use-after-free, overflows and double frees are what these runs are for.
ASAN_ENV = {"ASAN_OPTIONS": "detect_leaks=0:abort_on_error=1"}


def _build_fake(tmp_path_factory, name: str, flags: list[str]) -> str:
    gcc = shutil.which("gcc")
    assert gcc, "gcc is needed to build the fake CUDA driver"
    # *.cc: host builds of gonccl's CUDA kernels, C++ without its runtime (gcc links them).
    sources = sorted(glob.glob(os.path.join(FAKE_DIR, "*.c")) + glob.glob(os.path.join(FAKE_DIR, "*.cc")))
    assert sources, f"no fake CUDA driver sources in {FAKE_DIR}"
    out = str(tmp_path_factory.mktemp(name) / "libfakecuda.so")
    run = _harness.run_processes(
        [[gcc, "-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-pthread", *flags, "-o", out, *sources]],
        timeout=120,
        names=["gcc fakecuda"],
    )
    run.assert_ok("compiling tests/fakecuda/*.c and *.cc")
    return out


def _build_test(tmp_path_factory, source: str, fake: str, package_dir: str | None, flags: list[str]) -> str:
    fakedir = os.path.dirname(fake)
    out = str(tmp_path_factory.mktemp("cuda_capi") / os.path.basename(source)[:-2])
    argv = [shutil.which("gcc"), "-std=c11", "-D_DEFAULT_SOURCE", "-Wall", "-Werror", "-O1", *flags,
            f"-I{FAKE_DIR}", source, "-o", out]
    if package_dir is not None:
        include = os.path.join(package_dir, "include")
        argv[1:1] = [f"-I{include}"]
        argv += [f"-L{package_dir}", "-lgonccl", f"-Wl,-rpath,{package_dir}"]
    argv += [f"-L{fakedir}", "-lfakecuda", f"-Wl,-rpath,{fakedir}", "-lpthread", "-lm"]
    run = _harness.run_processes([argv], timeout=120, names=["gcc"])
    run.assert_ok(f"compiling {source}")
    return out


@pytest.fixture(scope="module")
def fakecuda(tmp_path_factory):
    """Builds libfakecuda.so; returns its path."""
    return _build_fake(tmp_path_factory, "fakecuda", [])


@pytest.fixture(scope="module")
def fakecuda_asan(tmp_path_factory):
    """libfakecuda.so built with AddressSanitizer (skips, saying so, only where the
    compiler has no ASan runtime to link)."""
    probe = tmp_path_factory.mktemp("asan_probe")
    src = probe / "probe.c"
    src.write_text("int main(void) { return 0; }\n")
    built = subprocess.run([shutil.which("gcc"), *ASAN, str(src), "-o", str(probe / "probe")],
                           capture_output=True, text=True, timeout=120)
    if built.returncode != 0 and "asan" in built.stderr.lower():
        pytest.skip(f"gcc cannot link AddressSanitizer here (install libasan): {built.stderr.strip()[:300]}")
    return _build_fake(tmp_path_factory, "fakecuda_asan", ASAN)


@pytest.fixture(scope="module")
def cuda_capi_binary(package_dir, fakecuda, tmp_path_factory):
    return _build_test(tmp_path_factory, TEST_SOURCE, fakecuda, package_dir, [])


def _env(fake: str, extra: dict | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GONCCL_")}
    env["GONCCL_CUDA_LIBRARY"] = fake
    env.update(extra or {})
    return env


def _run_ranks(binary: str, fake: str, nranks: int, last_arg: str, cwd: str, extra: dict | None = None):
    env = _env(fake, extra)
    return _harness.run_processes(
        [[binary, str(r), str(nranks), last_arg] for r in range(nranks)],
        timeout=RUN_TIMEOUT,
        envs=[env] * nranks,
        cwd=cwd,
        names=[f"rank {r}" for r in range(nranks)],
    )


@pytest.mark.timeout(60)
def test_libgonccl_does_not_link_cuda(package_dir):
    """libgonccl.so must load on machines without CUDA: no libcuda in its NEEDED
    entries and no undefined cu* symbols (the driver is reached with dlopen)."""
    lib = os.path.join(package_dir, "libgonccl.so")
    readelf = shutil.which("readelf")
    assert readelf, "readelf (binutils) is needed"
    dyn = subprocess.run([readelf, "-d", "-W", lib], capture_output=True, text=True, timeout=30, check=True).stdout
    needed = [line for line in dyn.splitlines() if "(NEEDED)" in line]
    assert needed and not any("cuda" in line.lower() for line in needed), needed
    syms = subprocess.run([readelf, "--dyn-syms", "-W", lib], capture_output=True, text=True, timeout=30, check=True).stdout
    undefined_cu = [
        line.split()[-1] for line in syms.splitlines()
        if " UND " in line and line.split()[-1].startswith("cu")
    ]
    assert not undefined_cu, undefined_cu


@pytest.mark.timeout(RUN_TIMEOUT + 60)
@pytest.mark.parametrize("path", ["staged", "staged-pipelined", "staged-pipelined-cpu", "auto", "model", "device",
                                  "device-no-peer", "device-one-queue", "device-ring", "auto-one-gpu", "model-one-gpu",
                                  "samegpu-one-gpu"])
@pytest.mark.parametrize("nranks", [2, 3])
def test_cuda_capi_ranks(cuda_capi_binary, fakecuda, nranks, path, tmp_path):
    """The same checks on the staged path (GONCCL_DEVICE_PATH=0) and on the device path
    (GONCCL_DEVICE_PATH=1, a 1 MiB scratch so that large operations take many rounds:
    every collective, alltoallv, barrier and send/recv stay on the "GPU", the ranks on
    devices 0 and 1 mapping each other's scratch, and the test checks that no copy went
    through host memory; a group mixes staged host-buffer and device-buffer sends and
    receives). Rank r runs on device r % 2. By default (auto) every rank stages,
    unpipelined: the only path the GPU check has proven, on ranks sharing a GPU (3 ranks:
    ranks 0 and 2 are on device 0, and auto-one-gpu), and the fallback where nothing is
    proven (2 ranks, a GPU each); the INIT log says which and how to ask for the others.
    Under GONCCL_DEVICE_PATH=model the communicator takes the device path when no two
    ranks share a GPU (2 ranks), and stages when some do, every rank together. Only the staged runs have the
    mismatched collective: on the device path it is reported after the call returns
    (test_cuda_devfault.py). With devices that cannot
    access each other (FAKECUDA_NO_PEER), every rank falls back to staging.
    staged-pipelined stages in chunks of 1 KiB (GONCCL_STAGED_CHUNK), so that every
    collective but the smallest runs pipelined by chunk (sizes that are not a multiple of
    the chunk, in place, async, mismatched counts), its reductions on the GPU, or with
    staged-pipelined-cpu on the host (GONCCL_STAGED_REDUCE=cpu). model-one-gpu puts every
    rank on device 0, where the cost model sends all_reduce, all_gather, reduce_scatter
    and broadcast to the same-GPU path at every size and the rest to staging (the device
    path's waits would time-slice: it is not even set up); samegpu-one-gpu forces the
    same with GONCCL_DEVICE_PATH=samegpu. device-one-queue is the device path with one
    hardware queue per context (CUDA_DEVICE_MAX_CONNECTIONS=1, as Megatron-style training
    sets it), where a stream waiting at the head of the queue holds back every stream of
    the rank: the async sends and receives, which every rank issues receive first, must
    still progress. device-ring (3 ranks) runs every all_reduce and reduce_scatter of 1 KiB
    or more by the device path's ring (GONCCL_DEVICE_RING_THRESHOLD)."""
    if path == "device-ring" and nranks < 3:
        pytest.skip("the device ring runs among three or more ranks")
    id_file = str(tmp_path / "unique_id")
    dump = tmp_path / "trace"
    extra = {"GONCCL_DEBUG": "INFO", "GONCCL_DEBUG_SUBSYS": "INIT", "GONCCL_TRACE_DUMP_DIR": str(dump)}
    if path.startswith("device"):
        # A small scratch: large operations and messages take many rounds of it.
        extra.update(GONCCL_DEVICE_PATH="1", GONCCL_DEVICE_SCRATCH="1M")
    if path.startswith("staged"):
        extra["GONCCL_DEVICE_PATH"] = "0"
    if path == "device-no-peer":
        extra["FAKECUDA_NO_PEER"] = "1"
    if path == "device-one-queue":
        extra["CUDA_DEVICE_MAX_CONNECTIONS"] = "1"
    if path == "device-ring":
        extra["GONCCL_DEVICE_RING_THRESHOLD"] = "1K"
    if path.startswith("staged-pipelined"):
        extra["GONCCL_STAGED_CHUNK"] = "1K"
    if path == "staged-pipelined-cpu":
        extra["GONCCL_STAGED_REDUCE"] = "cpu"
    if path.endswith("one-gpu"):
        extra["CUDA_CAPI_TEST_ONE_DEVICE"] = "1"  # every rank on device 0
    if path == "samegpu-one-gpu":
        extra["GONCCL_DEVICE_PATH"] = "samegpu"
    if path.startswith("model"):
        extra["GONCCL_DEVICE_PATH"] = "model"
    run = _run_ranks(cuda_capi_binary, fakecuda, nranks, id_file, str(tmp_path), extra)
    run.assert_ok(f"cuda_capi_test with {nranks} ranks")
    on_device = path in ("device", "device-one-queue", "device-ring") or (path == "model" and nranks == 2)
    for r, proc in enumerate(run.procs):
        assert f"rank {r}:" in proc.stdout and "checks passed" in proc.stdout, proc.describe()
        log = proc.stderr + proc.stdout
        chose = "device path: same-host ranks share device memory" in log or (
            f"rank {r}/{nranks}: auto: paths set up: staged, device (" in log)
        if path.startswith("auto"):
            _check_auto_staged(log, r, nranks, proc)
        assert chose == on_device, proc.describe()
        ring = "all_reduce and reduce_scatter of 1024 bytes or more by the ring" in log
        assert ring == (path == "device-ring"), proc.describe()
        if path == "device-no-peer":
            assert "staged path:" in log and "cannot access each other's memory" in log, proc.describe()
        if path == "staged":
            assert "staged path: GONCCL_DEVICE_PATH=0" in log, proc.describe()
        same = f"rank {r}/{nranks}: same-GPU path: all {nranks} ranks run on one GPU" in log
        assert same == (path == "samegpu-one-gpu"), proc.describe()
        if path == "model-one-gpu":
            assert f"rank {r}/{nranks}: auto: paths set up: staged, same-GPU (all {nranks} ranks on one GPU; " in log, \
                proc.describe()
            assert (f"rank {r}/{nranks}: auto: all_reduce, all_gather, reduce_scatter, broadcast: at every size "
                    "same-GPU (model at 16 B: 25 us vs staged 899 us)") in log, proc.describe()
        if path == "model" and nranks == 3:
            # Ranks 0 and 2 share GPU 0 without MPS: the device path's waits would take
            # turns there, so the model never chooses it and it is not set up.
            assert f"rank {r}/{nranks}: auto: paths set up: staged (ranks on several GPUs, some sharing one; " in log, \
                proc.describe()
            assert "rank 0 is not a client of an MPS server on GPU 0000:10:00.0, which 2 ranks share" in log, proc.describe()
        # The bad-input cases only the fake can check (cuda_capi_test.c, test_bad) ran.
        assert f"rank {r}: fake-only bad-input checks ran" in proc.stdout, proc.describe()
        assert f"CUDA driver loaded from {fakecuda}" in proc.stderr, proc.describe()
    # The same-GPU path's collectives are device-path entries; its sends and receives stage.
    _check_flight_recorder(str(dump), nranks, on_device or path in ("model-one-gpu", "samegpu-one-gpu"), p2p=on_device)
    if path.startswith("staged"):
        _check_pipelined(str(dump), path)


def _check_auto_staged(log: str, r: int, nranks: int, proc):
    """auto's INIT line while the GPU check has proven nothing but unpipelined staging
    for several ranks: staged whatever the setup, nothing set up, how to ask for the
    rest."""
    assert f"rank {r}/{nranks}: auto: staged path, unpipelined, whatever the ranks' setup" in log, proc.describe()
    assert ("proven on hardware for ranks sharing a GPU without MPS (GPU check 2026-11-26 on NVIDIA H100 80GB "
            "HBM3") in log, proc.describe()
    assert "no GPU path is set up (no kernel module, no NVML, no agreement between the ranks)" in log, proc.describe()
    assert ("unproven paths run only by name (staged-pipelined: GONCCL_STAGED_CHUNK=4M, device: "
            "GONCCL_DEVICE_PATH=1, same-GPU: GONCCL_DEVICE_PATH=samegpu") in log, proc.describe()
    assert "auto: paths set up" not in log, proc.describe()


def _check_pipelined(dump: str, path: str):
    """The all_reduce of 300001 floats is one entry of the flight recorder, the caller's
    all_reduce, however it ran: staged whole, one operation; pipelined in 1 KiB chunks, 64
    chunks whose operations (all_reduces of 4688 elements when the host reduces; a
    one-element all_reduce, then two all-to-alls per chunk, when the GPU does) are not
    entries of their own: the entry spans their sequence numbers (seq to last_seq)."""
    comms = trace.load(dump)
    ranks = comms[max(comms, key=lambda c: len(comms[c]))]
    ops_per_group = {"staged-pipelined": 1 + 2 * 64, "staged-pipelined-cpu": 64}
    for r, t in sorted(ranks.items()):
        whole = [o for o in t.ops if o["op"] == "all_reduce" and o["count"] == 300001]
        chunks = [o for o in t.ops if o["op"] == "all_reduce" and o["count"] == 4688]
        alltoallv = [o for o in t.ops if o["op"] == "alltoallv"]
        assert len(whole) == 2 and not chunks, f"rank {r}: {len(whole)} whole, {len(chunks)} chunks"
        assert len(alltoallv) < 64, f"rank {r}: {len(alltoallv)} alltoallv"
        for o in whole:
            assert o["state"] == "completed", f"rank {r}: {o}"
            if path in ops_per_group:
                assert o.get("chunks") == 64, f"rank {r}: {o}"
                assert o["last_seq"] - o["seq"] + 1 == ops_per_group[path], f"rank {r}: {o}"
            else:
                assert "chunks" not in o and "last_seq" not in o, f"rank {r}: {o}"


def _check_flight_recorder(dump: str, nranks: int, device: bool, p2p: bool | None = None):
    """Every rank's flight recorder (written at destroy) lists the device-path operations
    beside the staged ones, with the same sequence numbers on every rank, and finished:
    the GPU was past them when the communicator was destroyed. The device path's sends
    and receives are there too, apart (RankTrace.p2p), completed, each send matched by
    its peer's receive of the same number and size."""
    comms = trace.load(dump)
    assert comms, f"no flight recorder in {dump}"
    ranks = comms[max(comms, key=lambda c: len(comms[c]))]
    assert sorted(ranks) == list(range(nranks)), ranks
    seen = []
    for r, t in sorted(ranks.items()):
        # The same-GPU path compares the ranks' operations before it enqueues: the
        # deliberately mismatched all_reduce (test_failure) is a failed device entry.
        mismatched = [o for o in t.ops if "different operations" in (o.get("error") or "")]
        assert len(mismatched) <= 1, mismatched
        dev = [(o["seq"], o["op"], o["dtype"], o["count"]) for o in t.ops
               if o.get("path") == "device" and o not in mismatched]
        assert all(o.get("path") in ("host", "device") for o in t.ops), t.ops
        assert bool(dev) == device, f"rank {r}: device-path ops {dev} (device path: {device})"
        for o in t.ops:
            if o.get("path") == "device" and o not in mismatched:
                assert o["state"] == "completed" and o["finished"] is not None, f"rank {r}: {o}"
                assert o["algo"] == "direct", o
        # Dense: an entry for a collective run in chunks spans its operations' numbers.
        for a, b in zip(t.ops, t.ops[1:]):
            assert b["seq"] == a.get("last_seq", a["seq"]) + 1, f"rank {r}: seq {b['seq']} after {a}"
        seen.append(dev)
        assert bool(t.p2p) == (device if p2p is None else p2p), f"rank {r}: device-path sends and receives {t.p2p}"
        for o in t.p2p:
            assert o["op"] in ("send", "recv") and 0 <= o["peer"] < nranks and o["p2p_seq"] >= 1, f"rank {r}: {o}"
            assert o["path"] == "device" and o["state"] == "completed" and o["finished"] is not None, f"rank {r}: {o}"
    assert all(d == seen[0] for d in seen), seen  # the ranks' dumps line up
    for r, t in ranks.items():
        for o in t.p2p:
            other = "recv" if o["op"] == "send" else "send"
            match = [p for p in ranks[o["peer"]].p2p if p["op"] == other and p["peer"] == r and p["p2p_seq"] == o["p2p_seq"]]
            assert len(match) == 1 and match[0]["bytes"] == o["bytes"], f"rank {r}: {o}; rank {o['peer']}: {match}"


# mode -> the signal it dies of and what its FAULT line says (None: the host's own
# access, which the kernel reports without a word).
FAULTS = {
    "event-query": (signal.SIGABRT, "cuEventQuery"),
    "event-record": (signal.SIGABRT, "cuEventRecord"),
    "event-wait": (signal.SIGABRT, "cuStreamWaitEvent"),
    "pinned-host": (signal.SIGSEGV, None),
    "pinned-copy": (signal.SIGSEGV, "pinned memory"),
    "reset-stream": (signal.SIGABRT, "was reset"),
    "reset-current": (signal.SIGABRT, "was reset"),
    "reset-event": (signal.SIGABRT, "was reset"),
    "memop-peer": (signal.SIGABRT, "without peer access"),
    "ipc-freed": (signal.SIGABRT, "which freed it"),
}


@pytest.fixture(scope="module")
def fault_binary(fakecuda, tmp_path_factory):
    return _build_test(tmp_path_factory, FAULT_SOURCE, fakecuda, None, [])


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", ["ok", "ipc-reset", *FAULTS])
def test_fakecuda_faults(fault_binary, mode, tmp_path):
    """The fake kills the process where the real driver would crash: a test that passes
    against it cannot be hiding a use of a destroyed event, freed pinned memory or a
    reset context."""
    run = _harness.run_processes([[fault_binary, mode]], timeout=30, cwd=str(tmp_path), names=[mode])
    proc = run.procs[0]
    if mode in ("ok", "ipc-reset"):
        run.assert_ok("fakecuda_fault_test ok")
        return
    sig, says = FAULTS[mode]
    assert proc.returncode == -sig, proc.describe()
    if says is not None:
        assert "fakecuda: FAULT:" in proc.stderr and says in proc.stderr, proc.describe()


@pytest.fixture(scope="module")
def multicomm_binary(package_dir, fakecuda, tmp_path_factory):
    return _build_test(tmp_path_factory, MULTICOMM_SOURCE, fakecuda, package_dir, [])


@pytest.mark.timeout(RUN_TIMEOUT + 60)
@pytest.mark.parametrize("path", ["staged", "staged-pipelined", "device", "auto", "model", "samegpu"])
@pytest.mark.parametrize("nranks", [2, 3, 4])
def test_cuda_multicomm(multicomm_binary, fakecuda, nranks, path, tmp_path):
    """Several communicators of one process on one device, sharing one pool stream:
    each operation sees the copy-out of the one issued before it on the stream, by
    whichever communicator (on 02dd7a2 the second communicator read the first one's
    input: 'the next communicator's all_reduce of that result (round 0): [0] = 2.000000,
    want 8.000000'). Every rank is on one device: model and samegpu take the same-GPU path
    (model by its cost model; the one-rank communicator is a copy either way); auto
    stages, the path proven on ranks sharing a GPU (and on one rank)."""
    extra = {"GONCCL_DEVICE_PATH": {"device": "1", "auto": "auto", "model": "model", "samegpu": "samegpu"}.get(path, "0"),
             "GONCCL_DEBUG": "INFO", "GONCCL_DEBUG_SUBSYS": "INIT"}
    if path == "staged-pipelined":
        extra["GONCCL_STAGED_CHUNK"] = "4K"  # the operations take 4 chunks and more
    run = _run_ranks(multicomm_binary, fakecuda, nranks, str(tmp_path), str(tmp_path), extra)
    run.assert_ok(f"cuda_multicomm_test with {nranks} ranks ({path})")
    for r, proc in enumerate(run.procs):
        assert f"rank {r}:" in proc.stdout and "checks passed" in proc.stdout, proc.describe()
        same = f"rank {r}/{nranks}: same-GPU path: all {nranks} ranks run on one GPU" in proc.stderr
        assert same == (path == "samegpu"), proc.describe()
        if path == "model":
            assert f"rank {r}/{nranks}: auto: paths set up: staged, same-GPU (all {nranks} ranks on one GPU" in \
                proc.stderr, proc.describe()
        if path == "auto":
            _check_auto_staged(proc.stderr, r, nranks, proc)
            assert "rank 0/1: one rank: staged path for one rank, proven on hardware" in proc.stderr, proc.describe()


AUTO_SOURCE = os.path.join(_harness.TESTS_DIR, "capi", "cuda_auto_test.c")


@pytest.fixture(scope="module")
def auto_binary(package_dir, fakecuda, tmp_path_factory):
    return _build_test(tmp_path_factory, AUTO_SOURCE, fakecuda, package_dir, [])


@pytest.mark.timeout(120)
@pytest.mark.parametrize("large", ["device", "samegpu"], ids=["own-gpus", "one-gpu"])
def test_cuda_auto_chooses_per_size(auto_binary, fakecuda, large, tmp_path):
    """Under GONCCL_DEVICE_PATH=model one communicator runs a small all_reduce (1 KiB) and a large one (4 MiB)
    on different paths, chosen per operation by the cost model: with the staged path's
    latency set to 1 us (GONCCL_DEVICE_PATH_COST), the small one stages and the large one
    takes the device path (ranks on devices 0 and 1) or the same-GPU path (both on device
    0); a small one after it stages again. tests/capi/cuda_auto_test.c proves each path
    from the fake's counters (only staging copies host to device; only the device path
    waits on the GPU) and checks every result against the CPU's sum; the INIT log says
    where the crossover is and why."""
    extra = {"GONCCL_DEBUG": "INFO", "GONCCL_DEBUG_SUBSYS": "INIT", "GONCCL_DEVICE_PATH_COST": "staged.latency=1",
             "GONCCL_DEVICE_PATH": "model"}
    if large == "samegpu":
        extra["CUDA_AUTO_TEST_ONE_DEVICE"] = "1"
    env = _env(fakecuda, extra)
    run = _harness.run_processes([[auto_binary, str(r), "2", str(tmp_path / "unique_id"), large] for r in range(2)],
                                 timeout=90, envs=[env] * 2, cwd=str(tmp_path), names=["rank 0", "rank 1"])
    run.assert_ok(f"cuda_auto_test ({large})")
    name = {"device": "device", "samegpu": "same-GPU"}[large]
    pattern = (r"rank {r}/2: auto: all_reduce, all_gather, reduce_scatter, broadcast[a-z_, ]*: "
               r"<= ([0-9.]+) KiB staged \(model at 16 B: 1 us vs [^)]*\), > \1 KiB {name} \(model at 256 MiB: ")
    for r, proc in enumerate(run.procs):
        assert f"rank {r}: " in proc.stdout and "checks passed" in proc.stdout, proc.describe()
        assert f"rank {r}/2: auto: paths set up: staged, {name} (" in proc.stderr, proc.describe()
        m = re.search(pattern.format(r=r, name=re.escape(name)), proc.stderr)
        assert m and 1 < float(m.group(1)) < 4096, proc.describe()


@pytest.mark.timeout(2 * RUN_TIMEOUT + 120)
@pytest.mark.parametrize("source,nranks", [(TEST_SOURCE, 2), (MULTICOMM_SOURCE, 3)], ids=["cuda_capi", "multicomm"])
def test_cuda_capi_asan(package_dir, fakecuda_asan, tmp_path_factory, source, nranks, tmp_path):
    """The C tests and the fake built with AddressSanitizer (libgonccl.so as it ships:
    the test program links libasan first, which is all ASan needs beside Go's runtime)."""
    binary = _build_test(tmp_path_factory, source, fakecuda_asan, package_dir, ASAN)
    last = str(tmp_path / "unique_id") if source == TEST_SOURCE else str(tmp_path)
    run = _run_ranks(binary, fakecuda_asan, nranks, last, str(tmp_path), ASAN_ENV)
    run.assert_ok(f"{os.path.basename(source)} under AddressSanitizer with {nranks} ranks")
    for proc in run.procs:
        assert "AddressSanitizer" not in proc.stderr, proc.describe()


CALLS_SOURCE = os.path.join(_harness.TESTS_DIR, "capi", "cuda_calls_test.c")

# The driver calls of one rank's all_reduce on device buffers on the default path (auto,
# while the GPU check has proven nothing but staging), at most: what e18d63d's staged
# path made on the H100, counted by the same fake (cuda_calls_test.c run on e18d63d;
# docs/gpu.md lists them with why). The event queries of the host's waits and the
# capture-mode exchanges around the potentially unsafe calls are bounded apart.
DEFAULT_PATH_CALLS = {
    "cuInit": 1,  # the driver's load, at the first operation on device buffers
    "cuStreamGetCtx": 1, "cuStreamIsCapturing": 1, "cuCtxGetDevice": 2,
    "cuCtxGetCurrent": 12, "cuCtxSetCurrent": 24,
    "cuPointerGetAttribute": 4,
    "cuDevicePrimaryCtxRetain": 1, "cuMemHostAlloc": 1,
    "cuMemcpyDtoHAsync_v2": 1, "cuMemcpyHtoDAsync_v2": 1,
    "cuEventCreate": 1, "cuEventRecord": 2, "cuEventDestroy_v2": 1,
}


@pytest.fixture(scope="module")
def calls_binary(package_dir, fakecuda, tmp_path_factory):
    return _build_test(tmp_path_factory, CALLS_SOURCE, fakecuda, package_dir, [])


@pytest.mark.timeout(RUN_TIMEOUT + 60)
@pytest.mark.parametrize("one_gpu", [True, False], ids=["one-gpu", "own-gpus"])
def test_cuda_default_path_calls(calls_binary, fakecuda, one_gpu, tmp_path):
    """Two ranks' 256 MiB all_reduces on device buffers under the default settings make
    only the driver calls of DEFAULT_PATH_CALLS (each rank, each operation, the first
    included): no kernel module, no bus id, no NVML, none of a path auto cannot choose.
    The host's waits poll the event at most twice per millisecond waited plus 16, and
    exchange the capture mode only around the potentially unsafe calls. On befa1ef the
    first operation also made cuModuleLoadData 1, cuModuleGetFunction 186, cuFuncLoad 186
    and cuDeviceGetPCIBusId 1, and its waits up to 97 event queries with a context
    switch and a capture-mode exchange around each."""
    env = _env(fakecuda, {"CUDA_CALLS_TEST_ONE_DEVICE": "1" if one_gpu else "0"})
    run = _harness.run_processes([[calls_binary, str(r), "2", str(tmp_path / "unique_id"), "256"] for r in range(2)],
                                 timeout=RUN_TIMEOUT, envs=[env] * 2, cwd=str(tmp_path), names=["rank 0", "rank 1"])
    run.assert_ok("cuda_calls_test")
    for r, proc in enumerate(run.procs):
        assert f"rank {r}: checks passed" in proc.stdout, proc.describe()
        for op in range(2):
            m = re.search(rf"^rank {r}: op {op} calls:(.*)$", proc.stdout, re.M)
            t = re.search(rf"^rank {r}: op {op} took: (\d+)$", proc.stdout, re.M)
            assert m and t, proc.describe()
            words = m.group(1).split()
            calls = {words[i]: int(words[i + 1]) for i in range(0, len(words), 2)}
            queries = calls.pop("cuEventQuery", 0)
            exchanges = calls.pop("cuThreadExchangeStreamCaptureMode", 0)
            extra_calls = {k: n for k, n in calls.items() if n > DEFAULT_PATH_CALLS.get(k, 0)}
            assert not extra_calls, f"rank {r} op {op}: calls beyond the default path's: {extra_calls}\n" + proc.describe()
            waited_ms = int(t.group(1)) // 1000
            assert queries <= 2 * (8 + waited_ms), f"rank {r} op {op}: {queries} event queries in {waited_ms} ms"
            unsafe = queries + calls.get("cuMemHostAlloc", 0) + calls.get("cuMemFreeHost", 0)
            assert exchanges <= 2 * unsafe, f"rank {r} op {op}: {exchanges} capture-mode exchanges for {unsafe} unsafe calls"

"""The extension's CUDA branch: built where torch has CUDA, and its device checks.

This machine (and CI) has a CUDA build of torch but no GPU: the build must report CUDA
support and the CPU path must work unchanged; the checks that decide an op's device
(one device, all CPU or all CUDA, CUDA only in a CUDA build) run through the same C++
function the backend uses, via gonccl._C._op_device, since torch cannot make a CUDA
tensor here. Where torch does see a GPU, a 2-rank run on one shared device runs too.
"""

from __future__ import annotations

import pytest
import torch

RUN_TIMEOUT = 120


def _c():
    # Importing gonccl._C neither loads libgonccl.so nor starts Go (test_package.py).
    from gonccl import _C

    return _C


def test_built_with_cuda_support_iff_torch_has_cuda():
    assert _c().cuda_support() == (torch.version.cuda is not None), (
        f"gonccl._C.cuda_support() is {_c().cuda_support()} but torch.version.cuda is "
        f"{torch.version.cuda!r}: setup.py did not pick the CUDA branch it should have"
    )


def test_torch_here_has_cuda():
    # The environment this project builds in has a CUDA torch (no GPU): if that changes,
    # the CUDA branch is no longer compiled anywhere and this says so.
    assert torch.version.cuda is not None, "torch here has no CUDA: the CUDA branch of csrc is not built"
    assert _c().cuda_support()


@pytest.mark.parametrize(
    "devices,want",
    [
        ([], "cpu"),
        (["cpu", "cpu"], "cpu"),
        (["cuda:0"], "cuda:0"),
        (["cuda:1", "cuda:1", "cuda:1"], "cuda:1"),
    ],
)
def test_op_device(devices, want):
    got = _c()._op_device("all_reduce", [torch.device(d) for d in devices], True)
    assert got == torch.device(want)


@pytest.mark.parametrize(
    "devices,message",
    [
        (["cpu", "cuda:0"], "gonccl: all_reduce: tensors must all be on CPU or all on CUDA; got cpu and cuda:0"),
        (["cuda:0", "cpu"], "gonccl: all_reduce: tensors must all be on CPU or all on CUDA; got cpu and cuda:0"),
        (["cuda:0", "cuda:0", "cuda:1"], "gonccl: all_reduce: tensors must all be on one CUDA device; got cuda:0 and cuda:1"),
        (["cpu", "meta"], "gonccl: all_reduce: tensors must be on the CPU or on a CUDA device (got device meta)"),
    ],
)
def test_op_device_refuses(devices, message):
    with pytest.raises(ValueError) as info:
        _c()._op_device("all_reduce", [torch.device(d) for d in devices], True)
    assert message in str(info.value)


def test_cuda_tensor_in_a_build_without_cuda():
    with pytest.raises(ValueError) as info:
        _c()._op_device("broadcast", [torch.device("cuda:0")], False)
    assert "gonccl: broadcast: CUDA tensors are not supported by this build of gonccl" in str(info.value)
    # The build's own answer is used when not overridden.
    if _c().cuda_support():
        assert _c()._op_device("broadcast", [torch.device("cuda:0")]) == torch.device("cuda:0")


# One gonccl rank of a CUDA build on a machine without a GPU: CPU collectives work and
# leave CUDA alone (torch's CUDA state uninitialised, no driver library mapped), and an op
# said to be on a CUDA device goes the CUDA way in the backend's own device check. (torch
# cannot make a CUDA tensor here, so the op itself cannot be given one.)
_NO_GPU_RANK = """
import torch, torch.distributed as dist
from gonccl import _C
dist.init_process_group("gonccl", store=dist.HashStore(), rank=0, world_size=1)
t = torch.arange(6, dtype=torch.float32)
dist.all_reduce(t)
dist.broadcast(t, 0)
assert torch.equal(t, torch.arange(6, dtype=torch.float32)), t
assert _C._op_device("all_reduce", [torch.device("cuda:0")]) == torch.device("cuda:0")
maps = open("/proc/self/maps").read()
print("cuda initialized:", torch.cuda.is_initialized())
print("driver mapped:", "libcuda.so" in maps or "libfakecuda" in maps)
dist.destroy_process_group()
"""


def test_cuda_build_without_a_gpu_leaves_cuda_alone():
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: test_cuda_one_device_shared_by_two_ranks runs the real path")
    import _harness

    run = _harness.run_processes([[_harness.PYTHON, "-c", _NO_GPU_RANK]], timeout=RUN_TIMEOUT, names=["rank 0"])
    run.assert_ok("one gonccl rank without a GPU")
    out = run.procs[0].stdout
    assert "cuda initialized: False" in out and "driver mapped: False" in out, run.describe()


@pytest.fixture
def cuda_build_run(worker_runs):
    return worker_runs("cuda-build", "cuda_build_worker.py", 2, timeout=RUN_TIMEOUT)


@pytest.mark.timeout(RUN_TIMEOUT + 30)
def test_cpu_path_in_a_cuda_build(cuda_build_run):
    cuda_build_run.section("cpu")
    cuda_build_run.run.assert_ok("cuda_build_worker on 2 ranks")


@pytest.mark.timeout(RUN_TIMEOUT + 30)
@pytest.mark.requires("gpu")
def test_cuda_one_device_shared_by_two_ranks(cuda_build_run):
    if not torch.cuda.is_available():
        pytest.skip("no GPU here (torch.cuda.is_available() is False): scripts/gpu-check.sh runs it on a GPU machine")
    cuda_build_run.section("cuda_one_device")


@pytest.mark.timeout(RUN_TIMEOUT + 30)
@pytest.mark.requires("gpu")
def test_cuda_stream_ordering_on_a_real_gpu(cuda_build_run):
    """Issue 13's stream-ordering bugs, read back on the GPU right away (see
    cuda_build_worker.py); the fake-driver versions run in test_cuda_capi.py."""
    if not torch.cuda.is_available():
        pytest.skip("no GPU here (torch.cuda.is_available() is False): scripts/gpu-check.sh runs it on a GPU machine")
    cuda_build_run.section("cuda_ordering")

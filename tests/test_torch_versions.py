"""csrc compiles against every torch it claims to support, not only the pinned one.

The build sees only the torch it is installed beside (2.15 here), so a csrc change that
uses an API newer than 2.11 would pass everything else and break users of torch 2.11
(the GPU machines run 2.11). This compiles every csrc/*.cpp with `g++ -fsyntax-only`
against the headers of the supported range's ends other than the installed torch
(scripts/csrc_compat.py: the headers are downloaded once, ~60 MB kept per version in
~/.cache/gonccl/torch-headers), with GONCCL_WITH_CUDA and, for the files that test it,
without. It skips only where the headers cannot be fetched (no network), saying so.
`make csrc-compat` checks every release in between as well.
"""

from __future__ import annotations

import os
import re
import sys

import pytest
import torch

import _harness

sys.path.insert(0, os.path.join(_harness.REPO_ROOT, "scripts"))
import csrc_compat  # noqa: E402

INSTALLED = torch.__version__.split("+")[0]
ENDS = [csrc_compat.SUPPORTED[0], csrc_compat.SUPPORTED[-1]]
CHECKED = [v for v in ENDS if v != INSTALLED]


@pytest.mark.timeout(1800)
@pytest.mark.requires("torch-headers")
@pytest.mark.parametrize("version", CHECKED)
def test_csrc_compiles_against(version):
    try:
        csrc_compat.fetch(version, python=_harness.PYTHON, log=lambda *a: None)
    except csrc_compat.FetchError as e:
        pytest.skip(f"torch {version}'s headers cannot be fetched here: {e}")
    lines = []
    failures = csrc_compat.check([version], log=lines.append)
    assert not failures, f"csrc does not compile against torch {version}:\n\n" + "\n\n".join(failures)
    # Every csrc file was compiled, the CUDA branch both ways.
    files = [f for f in os.listdir(csrc_compat.CSRC) if f.endswith(".cpp")]
    assert sum(" (with CUDA)" in line for line in lines) == len(files), lines
    assert any("cuda.cpp (without CUDA)" in line for line in lines), lines


def test_cuda_branch_is_compiled_both_ways():
    cuda_cpp = os.path.join(csrc_compat.CSRC, "cuda.cpp")
    pairs = csrc_compat.jobs_for([cuda_cpp, os.path.join(csrc_compat.CSRC, "library.cpp")])
    assert (cuda_cpp, False) in pairs and (cuda_cpp, True) in pairs
    assert (os.path.join(csrc_compat.CSRC, "library.cpp"), False) not in pairs


def test_pyproject_requires_the_oldest_checked_torch():
    with open(os.path.join(_harness.REPO_ROOT, "pyproject.toml")) as f:
        text = f.read()
    oldest = ".".join(csrc_compat.SUPPORTED[0].split(".")[:2])
    newest = csrc_compat.SUPPORTED[-1].split(".")
    below = f"{newest[0]}.{int(newest[1]) + 1}"
    want = f"torch>={oldest},<{below}"
    assert re.search(rf'dependencies = \["{re.escape(want)}"\]', text), (
        f"pyproject.toml's torch requirement should be {want}: from the oldest release "
        "scripts/csrc_compat.py checks to below the one after its newest"
    )
    assert INSTALLED in csrc_compat.SUPPORTED, f"the pinned torch {INSTALLED} is not in SUPPORTED"

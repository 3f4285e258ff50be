"""What the package says about itself, and the torch it refuses.

* `python -m gonccl --version` prints gonccl, torch (and the torch it was built
  against), CUDA support and the library's path;
* a package built for another torch refuses to load its extension with an ImportError
  naming both releases, before the extension's undefined symbols could (faked here by
  changing the recorded build torch; the check runs before gonccl._C is imported).
"""

import os
import subprocess

import pytest

import _harness
from gonccl import _library

TIMEOUT = 120


def run_python(code_or_args, timeout=TIMEOUT):
    args = ["-c", code_or_args] if isinstance(code_or_args, str) else code_or_args
    return subprocess.run([_harness.PYTHON, *args], capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, PYTHONUNBUFFERED="1"))


@pytest.mark.timeout(TIMEOUT + 30)
def test_version_command():
    out = run_python(["-m", "gonccl", "--version"])
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == 4, out.stdout
    assert lines[0].startswith("gonccl ") and lines[0].split()[1][0].isdigit(), lines
    torch_version = run_python("import torch; print(torch.__version__)").stdout.strip()
    assert lines[1].startswith(f"torch {torch_version}"), lines
    assert "(gonccl built against " in lines[1], lines  # an installed package records its torch
    assert lines[2] in ("CUDA support: yes", "CUDA support: no (built against a torch without CUDA)"), lines
    assert lines[3].startswith("library: ") and lines[3].endswith("libgonccl.so"), lines
    assert os.path.isfile(lines[3][len("library: "):]), lines


@pytest.mark.timeout(TIMEOUT + 30)
def test_info_does_not_start_go():
    out = run_python(
        "import gonccl, os\n"
        "i = gonccl.info()\n"
        "print(sorted(i), i['problem'])\n"
        "print(any('libgonccl' in l for l in open('/proc/self/maps')))\n"
    )
    assert out.returncode == 0, out.stdout + out.stderr
    keys, loaded = out.stdout.splitlines()
    assert keys == "['built_for_torch', 'cuda_support', 'gonccl', 'library', 'problem', 'torch'] None", keys
    assert loaded == "False", "gonccl.info() loaded libgonccl.so (and so started the Go runtime)"


@pytest.mark.timeout(TIMEOUT + 30)
def test_wrong_torch_is_refused_by_name():
    out = run_python(
        "import sys\n"
        "import gonccl._build_info as built\n"
        "from gonccl import _library\n"
        "built.TORCH_VERSION = '2.11.0+cpu'\n"
        "try:\n"
        "    _library.load_extension()\n"
        "except ImportError as e:\n"
        "    print('refused:', e)\n"
        "print('extension imported:', 'gonccl._C' in sys.modules)\n"
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "refused: gonccl was built for torch 2.11.0+cpu but this process runs torch " in out.stdout, out.stdout
    assert "extension imported: False" in out.stdout, out.stdout
    # The command-line check says so too, and fails.
    cli = run_python(
        "import sys, gonccl._build_info as b; b.TORCH_VERSION = '2.11.0'\n"
        "from gonccl.__main__ import main; sys.exit(main(['--version']))\n"
    )
    assert cli.returncode == 1 and "gonccl was built for torch 2.11.0" in cli.stderr, cli.stdout + cli.stderr


def test_check_torch_rules():
    """The release must match; the local tag need not, but a CUDA build needs a CUDA torch."""
    _library.check_torch(("2.15.0+cu130", "13.0"), ("2.15.0+cu130", "13.0"))
    _library.check_torch(("2.15.0", None), ("2.15.0+cu130", "13.0"))
    _library.check_torch(("2.15.0+cu128", "12.8"), ("2.15.0+cu130", "13.0"))
    with pytest.raises(ImportError, match=r"built for torch 2\.15\.0 but this process runs torch 2\.14\.1"):
        _library.check_torch(("2.15.0", None), ("2.14.1", None))
    with pytest.raises(ImportError, match=r"built for torch 2\.15\.0\+cu130 .* runs torch 2\.15\.0\+cpu"):
        _library.check_torch(("2.15.0+cu130", "13.0"), ("2.15.0+cpu", None))

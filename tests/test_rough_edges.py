"""Small things a new user trips on first: an example without its optional dependency,
the quick start's output lines."""

import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.timeout(120)
def test_torchft_example_without_torchft_says_what_to_install():
    # sys.modules["torchft"] = None: every `import torchft` fails as if it were not installed
    code = ("import runpy, sys; sys.modules['torchft'] = None; sys.argv = sys.argv[1:]; "
            "runpy.run_path(sys.argv[0], run_name='__main__')")
    example = os.path.join(ROOT, "examples", "torchft_ddp.py")
    out = subprocess.run([sys.executable, "-c", code, example, "lighthouse"], capture_output=True, text=True,
                         timeout=90)
    assert out.returncode != 0
    assert "pip install torchft" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr, out.stderr


def test_quick_start_prints_each_line_in_one_write():
    """Two ranks print to one terminal: each line goes out whole (flush=True makes print's
    text and newline one write), so the lines cannot interleave."""
    readme = open(os.path.join(ROOT, "README.md")).read()
    block = re.search(r"```python\n# allreduce\.py\n(.*?)```", readme, re.S)
    assert block, "the README's quick start"
    prints = re.findall(r"^print\(.*$", block.group(1), re.M)
    assert prints and all("flush=True" in p for p in prints), prints


def test_bench_drops_the_ranks_python_warnings():
    """gonccl.bench shows a successful rank 0's stderr, but not the deprecation warnings
    torch prints there, which would end its output as if something were wrong."""
    from gonccl.bench import cli

    stderr = ("/x/torch/distributed/c10d.py:123: FutureWarning: `foo` is deprecated\n"
              "  warnings.warn(\n"
              "/x/torch/_tensor.py:9: UserWarning: something\n"
              "  return f()\n"
              "a line of its own\n")
    text, dropped = cli.without_warnings(stderr)
    assert (text, dropped) == ("a line of its own\n", 2)

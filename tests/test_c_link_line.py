"""docs/c-api.md's build line makes a program that runs as it is, with no
LD_LIBRARY_PATH: the page's commands are run as written on a program of our own."""

import os
import re
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PROGRAM = r"""
#include <stdio.h>
#include "gonccl.h"
int main(void) {
  int v = 0;
  if (goncclGetVersion(&v) != goncclSuccess) return 1;
  printf("version %d\n", v);
  return 0;
}
"""


@pytest.mark.timeout(120)
def test_c_api_build_line_runs_without_ld_library_path(tmp_path):
    if shutil.which("cc") is None:
        pytest.skip("no C compiler")
    page = open(os.path.join(ROOT, "docs", "c-api.md")).read()
    m = re.search(r"```sh\n(GONCCL_LIB=.*?\ncc my_prog\.c .*?)\n```", page, re.S)
    assert m, "docs/c-api.md shows how to build a program"
    (tmp_path / "my_prog.c").write_text(PROGRAM)
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    build = subprocess.run(["bash", "-euc", m.group(1)], cwd=tmp_path, env=env, capture_output=True, text=True,
                           timeout=90)
    assert build.returncode == 0, build.stderr
    run = subprocess.run([str(tmp_path / "my_prog")], env=env, capture_output=True, text=True, timeout=30)
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("version "), run.stdout

"""GONCCL_LIBRARY: building the package around a prebuilt libgonccl.so checks it first.

`GONCCL_LIBRARY=/path/libgonccl.so pip install --no-build-isolation .` builds only the C++
extension (no Go); the library must match the sources: goncclGetVersion equal to
gonccl.h's GONCCL_VERSION_CODE, and every function gonccl.h declares exported. Here tiny
C libraries stand in for a stale or foreign library, and the checks are called as
setup.py defines them (its functions, without running setup()); one real `pip wheel`
shows the refusal reaches the user. The good path (the real library, pip, the wheel,
the demo from it without Go) is `make test-wheel` and `make gpu-check-dry`, in make test.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess

import pytest

import _harness

SETUP_PY = os.path.join(_harness.REPO_ROOT, "setup.py")


def setup_functions() -> dict:
    """_source_version and check_prebuilt from setup.py, defined in a fresh namespace."""
    with open(SETUP_PY) as f:
        tree = ast.parse(f.read())
    wanted = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in ("_source_version", "check_prebuilt")]
    assert len(wanted) == 2, "setup.py lost _source_version or check_prebuilt"
    ns = {"os": os, "re": re, "ROOT": _harness.REPO_ROOT}
    exec(compile(ast.Module(body=wanted, type_ignores=[]), SETUP_PY, "exec"), ns)
    return ns


def fake_library(tmp_path, name: str, version: int, functions: list[str]) -> str:
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("gcc is not installed")
    src = tmp_path / f"{name}.c"
    body = [f"int goncclGetVersion(int* v) {{ *v = {version}; return 0; }}"]
    body += [f"int {fn}(void) {{ return 5; }}" for fn in functions if fn != "goncclGetVersion"]
    src.write_text("\n".join(body) + "\n")
    out = str(tmp_path / f"lib{name}.so")
    subprocess.run([gcc, "-shared", "-fPIC", "-o", out, str(src)], check=True, timeout=60)
    return out


def test_sources_agree_on_the_version():
    code, functions, package = setup_functions()["_source_version"]()
    assert f"{code // 10000}.{code // 100 % 100}.{code % 100}" == package
    assert "goncclAllReduceAsync" in functions and "goncclGetVersion" in functions and len(functions) > 30


def test_the_installed_library_matches(package_dir):
    ns = setup_functions()
    _, _, package = ns["_source_version"]()
    assert ns["check_prebuilt"](os.path.join(package_dir, "libgonccl.so")) == package


def test_wrong_version_is_refused(tmp_path):
    ns = setup_functions()
    _, functions, package = ns["_source_version"]()
    lib = fake_library(tmp_path, "old", 9_99_99, functions)
    with pytest.raises(SystemExit) as info:
        ns["check_prebuilt"](lib)
    assert f"is gonccl 9.99.99 (99999) but these sources are gonccl {package}" in str(info.value)


def test_missing_functions_are_refused(tmp_path):
    ns = setup_functions()
    code, functions, _ = ns["_source_version"]()
    lib = fake_library(tmp_path, "partial", code, [f for f in functions if f not in ("goncclSend", "goncclRecv")])
    with pytest.raises(SystemExit) as info:
        ns["check_prebuilt"](lib)
    assert "lacks 2 function(s) that capi/gonccl.h declares: goncclRecv, goncclSend" in str(info.value)


def test_the_extension_requires_every_entry_point(tmp_path):
    """gonccl._C binds every libgonccl.so function it calls when it loads the library: one
    that lacks any (here goncclCommEpoch, which older extensions treated as optional and
    went on without) is refused at load with an error naming it, not found missing later."""
    code, functions, _ = setup_functions()["_source_version"]()
    lib = fake_library(tmp_path, "noepoch", code, [f for f in functions if f != "goncclCommEpoch"])
    proc = subprocess.run(
        [_harness.PYTHON, "-c", "import sys, gonccl._C as C; print(C.library_version(sys.argv[1]))", lib],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )
    assert proc.returncode != 0, f"the library loaded: {proc.stdout}"
    assert f"{lib} has no symbol goncclCommEpoch" in proc.stderr, proc.stderr[-2000:]


def test_not_a_library_is_refused(tmp_path):
    ns = setup_functions()
    with pytest.raises(SystemExit, match="no such file"):
        ns["check_prebuilt"](str(tmp_path / "nothing.so"))
    text = tmp_path / "text.so"
    text.write_text("not an ELF file")
    with pytest.raises(SystemExit, match="cannot be loaded"):
        ns["check_prebuilt"](str(text))
    code, _, _ = ns["_source_version"]()
    lib = fake_library(tmp_path, "other", code, [])
    with pytest.raises(SystemExit, match="lacks"):
        ns["check_prebuilt"](lib)


@pytest.mark.timeout(600)
def test_pip_stops_on_a_mismatched_library(tmp_path):
    """The real command a user runs, with a stale library: pip fails and says why."""
    _, functions, _ = setup_functions()["_source_version"]()
    lib = fake_library(tmp_path, "stale", 9_99_99, functions)
    env = dict(os.environ, GONCCL_LIBRARY=lib)
    proc = subprocess.run(
        [_harness.PYTHON, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
         "--disable-pip-version-check", "-w", str(tmp_path / "dist"), _harness.REPO_ROOT],
        capture_output=True, text=True, timeout=540, env=env, start_new_session=True,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "is gonccl 9.99.99 (99999) but these sources are gonccl" in out, out
    assert not os.path.exists(tmp_path / "dist") or not os.listdir(tmp_path / "dist")

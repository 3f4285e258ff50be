"""The extension shares torch's libstdc++ and never carries a copy of its own.

On the first lent H100 every rank that built a group whose members are not ranks 0..k-1
died with SIGSEGV at address 0 inside gonccl/_C.so, formatting the group's global ranks
into its note (csrc/backend.cpp groupNote: std::ostream << unsigned long). The GPU image
compiled the extension with a g++ under /opt/gcc that has only a static libstdc++, so
_C.so held its own copy (crashtrace named std::codecvt<char16_t>::do_in and
std::ostream::_M_insert<unsigned long> inside _C.so), and that copy's code ran on the
locale tables of the process's other libstdc++ (torch's, newer), bound by the dynamic
linker. setup.py now links torch's libstdc++.so.6 itself (libstdcxx_for_torch) and
refuses an extension that still carries a copy (check_shared_libstdcxx). A compiler
with only a static libstdc++ is what `-static-libstdc++` makes of any g++, so these
tests link the same kind of object both ways."""

import ast
import os
import re
import shutil
import subprocess

import pytest

import _harness

SETUP_PY = os.path.join(_harness.REPO_ROOT, "setup.py")
NAMES = ("libstdcxx_for_torch", "check_shared_libstdcxx")

SOURCE = r"""
#include <sstream>
#include <string>
#include <vector>
extern "C" __attribute__((visibility("default"))) int note(char* out, int n) {
  std::vector<unsigned long> ranks = {1, 2};
  std::ostringstream ss;
  ss << " (in group '1', whose ranks 0.." << 1 << " are global ranks " << ranks[0] << ", " << ranks[1] << ")";
  return snprintf(out, n, "%s", ss.str().c_str());
}
"""


def setup_functions() -> dict:
    with open(SETUP_PY) as f:
        tree = ast.parse(f.read())
    wanted = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in NAMES]
    assert len(wanted) == len(NAMES), f"setup.py lost one of {NAMES}"
    ns = {"os": os, "re": re, "shutil": shutil, "subprocess": subprocess}
    exec(compile(ast.Module(body=wanted, type_ignores=[]), SETUP_PY, "exec"), ns)
    return ns


def link(tmp_path, name: str, extra: list[str]) -> str:
    gxx = shutil.which("g++")
    if gxx is None or shutil.which("nm") is None:
        pytest.skip("g++ and binutils are needed")
    src = tmp_path / "note.cpp"
    src.write_text("#include <cstdio>\n" + SOURCE)
    out = str(tmp_path / f"lib{name}.so")
    # As setup.py's link: the objects, then extra_link_args, then the compiler's own
    # -lstdc++ (here the static archive, as a toolchain without libstdc++.so would use).
    subprocess.run([gxx, "-shared", "-fPIC", "-O2", "-fvisibility=hidden", "-static-libstdc++",
                    str(src), "-o", out, *extra], check=True, timeout=120)
    return out


def test_a_static_libstdcxx_is_refused(tmp_path):
    """What the GPU image's compiler made: the check names the problem."""
    ns = setup_functions()
    problem = ns["check_shared_libstdcxx"](link(tmp_path, "static", []))
    assert problem and "carries its own libstdc++" in problem and "std::locale" in problem


def test_linking_torchs_libstdcxx_first_leaves_no_copy(tmp_path):
    ns = setup_functions()
    stdcxx = ns["libstdcxx_for_torch"]()
    assert stdcxx and os.path.basename(stdcxx).startswith("libstdc++.so."), stdcxx
    out = link(tmp_path, "shared", [stdcxx])
    assert ns["check_shared_libstdcxx"](out) is None
    needed = subprocess.run(["readelf", "-d", out], capture_output=True, text=True, check=True).stdout
    assert "libstdc++.so.6" in needed


def test_the_installed_extension_shares_libstdcxx(package_dir):
    ns = setup_functions()
    ext = [f for f in os.listdir(package_dir) if f.startswith("_C") and f.endswith(".so")]
    assert ext, f"no gonccl/_C*.so in {package_dir}"
    assert ns["check_shared_libstdcxx"](os.path.join(package_dir, ext[0])) is None

"""Runs this checkout's python/gonccl/bench (the bench tool's source) with the installed
gonccl package for everything else (the C++ extension, libgonccl.so): for working on the
tool without reinstalling. `python -m gonccl.bench` runs the installed copy.

    $(scripts/python-env.sh) bench/run.py all_reduce -b 8 -e 64M --backends gonccl,gloo -np 2
"""

import importlib.util
import os
import runpy
import sys

import gonccl  # noqa: F401 - the installed package; only gonccl.bench comes from here

src = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python", "gonccl", "bench")
spec = importlib.util.spec_from_file_location(
    "gonccl.bench", os.path.join(src, "__init__.py"), submodule_search_locations=[src]
)
module = importlib.util.module_from_spec(spec)
sys.modules["gonccl.bench"] = module
spec.loader.exec_module(module)

sys.argv[0] = "python -m gonccl.bench"
runpy.run_module("gonccl.bench", run_name="__main__", alter_sys=True)

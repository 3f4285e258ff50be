"""Runs gonccl.bench from this checkout's python/gonccl/bench when the installed
gonccl package does not include it (setup.py lists only the top-level package), and
the installed one otherwise. The rest of gonccl (the C++ extension, libgonccl.so)
always comes from the installed package.

    $(scripts/python-env.sh) bench/run.py all_reduce -b 8 -e 64M --backends gonccl,gloo -np 2
"""

import importlib.util
import os
import runpy
import sys

import gonccl

if importlib.util.find_spec("gonccl.bench") is None:
    src = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python", "gonccl")
    gonccl.__path__.append(src)  # after the installed directory: only bench comes from here

sys.argv[0] = "python -m gonccl.bench"
runpy.run_module("gonccl.bench", run_name="__main__", alter_sys=True)

#!/usr/bin/env bash
# Prints the path of a Python interpreter that has the pinned torch, pytest and numpy,
# creating it if needed. Order of preference:
#   1. $GONCCL_PYTHON, if set (used as is);
#   2. the venv at ${GONCCL_VENV:-$HOME/.cache/gonccl/venv}, created on first use and
#      reused afterwards (it survives fresh clones of the repository);
# Missing packages are installed from PyPI. Progress goes to stderr, the path to stdout.
set -euo pipefail

TORCH_VERSION="${GONCCL_TORCH_VERSION:-2.15.0}"

if [[ -n "${GONCCL_PYTHON:-}" ]]; then
  echo "$GONCCL_PYTHON"
  exit 0
fi

venv="${GONCCL_VENV:-$HOME/.cache/gonccl/venv}"
if [[ ! -x "$venv/bin/python" ]]; then
  echo "gonccl: creating Python environment in $venv" >&2
  mkdir -p "$(dirname "$venv")"
  python3 -m venv "$venv" >&2
fi
py="$venv/bin/python"

have() { "$py" - "$@" <<'PY' 2>/dev/null
import importlib.metadata as md, sys
want = dict(a.split("==") if "==" in a else (a, None) for a in sys.argv[1:])
for name, ver in want.items():
    try:
        got = md.version(name)
    except md.PackageNotFoundError:
        sys.exit(1)
    if ver and got.split("+")[0] != ver:
        sys.exit(1)
PY
}

# Dev tools, pinned so that `make lint` gives the same verdict everywhere.
DEV_TOOLS=(ruff==0.17.6 clang-format==19.1.7)

if ! have "torch==$TORCH_VERSION" numpy pytest pytest-timeout pytest-xdist expecttest setuptools wheel matplotlib "${DEV_TOOLS[@]}"; then
  echo "gonccl: installing torch==$TORCH_VERSION, numpy, pytest, matplotlib into $venv (first run: several GB)" >&2
  "$py" -m pip install --quiet --disable-pip-version-check \
    "torch==$TORCH_VERSION" numpy pytest pytest-timeout pytest-xdist expecttest setuptools wheel matplotlib "${DEV_TOOLS[@]}" >&2
fi
echo "$py"

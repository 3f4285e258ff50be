#!/usr/bin/env bash
# Runs Python tests against another torch release than the pinned one:
#
#   scripts/test-torch.sh VERSION [pytest arguments...]     (default: the whole tests/ suite)
#   make test-torch TORCH=2.11.0 [FILES="tests/test_contract.py ..."] [PYTEST_ARGS="-k cpu"]
#
# That torch lives in its own venv, ${GONCCL_CACHE:-~/.cache/gonccl}/venv-torch-VERSION,
# made (once, several GB from PyPI; pip's usual cache) and kept up to date by
# scripts/python-env.sh with GONCCL_TORCH_VERSION and GONCCL_VENV. gonccl is installed
# there around build/lib/libgonccl.so (make lib; the Go library does not depend on torch),
# its extension built against that torch in a build directory of its own
# (build/torch-VERSION), so neither build reuses the other's objects. pytest then runs
# with that venv's Python, which is what the tests start their ranks with.
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ $# -lt 1 || ! "$1" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]]; then
  echo "usage: $0 VERSION [pytest arguments...]   (VERSION like 2.11.0)" >&2
  exit 2
fi
version="$1"
shift
lib="$PWD/build/lib/libgonccl.so"
if [[ ! -f "$lib" ]]; then
  echo "test-torch: $lib is missing: run make lib first (make test-torch does)" >&2
  exit 2
fi

venv="${GONCCL_CACHE:-$HOME/.cache/gonccl}/venv-torch-$version"
# GONCCL_PYTHON names the pinned environment; it must not stand in for this one.
py="$(env -u GONCCL_PYTHON GONCCL_TORCH_VERSION="$version" GONCCL_VENV="$venv" scripts/python-env.sh)"

build_base="$PWD/build/torch-$version"
mkdir -p "$build_base"
cfg="$build_base/setup.cfg"
printf '[build]\nbuild_base = %s\n[egg_info]\negg_base = %s\n' "$build_base" "$build_base" >"$cfg"
echo "test-torch: installing gonccl into $venv (extension built against torch $version)" >&2
DIST_EXTRA_CONFIG="$cfg" GONCCL_LIBRARY="$lib" \
  "$py" -m pip install --quiet --disable-pip-version-check --no-build-isolation --no-deps . >&2

# The tests must see this torch and the gonccl just built for it, nothing else.
"$py" - "$version" "$venv" <<'PY'
import os, sys
import torch, gonccl
from gonccl import _C
want, venv = sys.argv[1], os.path.realpath(sys.argv[2])
got = torch.__version__.split("+")[0]
if got != want:
    sys.exit(f"test-torch: the venv has torch {torch.__version__}, not {want}")
where = os.path.realpath(_C.__file__)
if not where.startswith(venv + os.sep):
    sys.exit(f"test-torch: gonccl._C is imported from {where}, not from {venv}")
print(f"test-torch: torch {torch.__version__}, gonccl {gonccl.__version__} from {os.path.dirname(where)}",
      file=sys.stderr)
PY

if [[ $# -eq 0 ]]; then
  set -- tests
fi
exec "$py" -m pytest "$@"

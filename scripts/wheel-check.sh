#!/usr/bin/env bash
# Installs a gonccl wheel into a fresh venv and runs the demo from it, with no Go toolchain:
#     scripts/wheel-check.sh PYTHON WHEEL
# PYTHON is an interpreter that has torch (the venv sees the site-packages holding torch
# through a .pth file, as the helper venvs do, instead of copying GBs of
# torch). PATH keeps only the venv and system directories that hold no `go`. Checks that
# gonccl is imported from the venv (not from the sources or PYTHON's environment), that
# the wheel holds libgonccl.so, the extension and gonccl.h, and that torchrun
# examples/ddp_simple.py on 2 CPU ranks prints the averaged gradient on both ranks.
set -euo pipefail

py="$1"
wheel="$2"
root="$(cd "$(dirname "$0")/.." && pwd)"
work="$root/build/wheel-check"
rm -rf "$work"
mkdir -p "$work/run"

echo "wheel-check: $(basename "$wheel"): $(du -h "$wheel" | cut -f1) ($(stat -c %s "$wheel") bytes)"
for member in gonccl/libgonccl.so gonccl/include/gonccl.h 'gonccl/_C.*\.so'; do
  "$py" - "$wheel" "$member" <<'PY' || { echo "wheel-check: FAIL: the wheel lacks $member"; exit 1; }
import re, sys, zipfile
sys.exit(0 if any(re.fullmatch(sys.argv[2], n) for n in zipfile.ZipFile(sys.argv[1]).namelist()) else 1)
PY
done

"$py" -m venv "$work/venv"
# Install first, then let the venv see torch: pip must not find another gonccl beside torch.
"$work/venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-index --no-deps "$wheel"
site="$("$py" -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')"
vsite="$("$work/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
echo "$site" >"$vsite/_gonccl_torch_env.pth"

# A PATH without go: the venv, then the system directories that have no go in them.
path="$work/venv/bin"
for d in /usr/local/sbin /usr/local/bin /usr/sbin /usr/bin /sbin /bin; do
  [[ -d "$d" && ! -e "$d/go" ]] && path="$path:$d"
done
export PATH="$path"
if command -v go >/dev/null; then
  echo "wheel-check: FAIL: go is still on PATH ($(command -v go))"
  exit 1
fi
unset GONCCL_PYTHON PYTHONPATH

cd "$work/run"
where="$(python -c 'import gonccl, os; print(os.path.dirname(gonccl.__file__))')"
case "$where" in
  "$vsite"/*) echo "wheel-check: gonccl $(python -c 'import gonccl; print(gonccl.version())') imported from $where" ;;
  *) echo "wheel-check: FAIL: gonccl was imported from $where, not from the wheel's venv"; exit 1 ;;
esac

port=$(python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
out="$work/ddp_simple.log"
if ! OMP_NUM_THREADS=1 timeout -k 10 300 python -m torch.distributed.run --nproc_per_node=2 --nnodes=1 \
  --master_addr=127.0.0.1 --master_port="$port" "$root/examples/ddp_simple.py" >"$out" 2>&1; then
  cat "$out"
  echo "wheel-check: FAIL: torchrun examples/ddp_simple.py from the wheel failed"
  exit 1
fi
for r in 0 1; do
  grep -q "rank $r: reduced dy/dw: 3.5" "$out" || { cat "$out"; echo "wheel-check: FAIL: rank $r did not print 3.5"; exit 1; }
done
echo "wheel-check: ok: the wheel installs without Go and torchrun ddp_simple.py runs from it (2 CPU ranks)"

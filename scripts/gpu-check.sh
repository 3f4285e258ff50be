#!/usr/bin/env bash
# gpu-check.sh: everything gonccl needs checked on a machine with GPUs, in one command and
# one report file. Run from the source tree, on a machine with torch and one or more GPUs:
#
#   scripts/gpu-check.sh [--library PATH/libgonccl.so] [--python PY] [--report FILE] [--dry-run]
#
# Go is optional: give a libgonccl.so built elsewhere (`make lib`) with --library or
# GONCCL_LIBRARY, and only the C++ extension is built here (against this machine's torch).
# The steps (each with a time limit; each reports pass, fail or skip with the reason):
#   build        pip install --no-build-isolation . into PY's environment (the prebuilt
#                library when given; else `go build`, which needs Go)
#   import       import gonccl, its library's version, CUDA support in the extension
#   capi-cuda    tests/capi/cuda_capi_test.c against the real libcuda.so.1 (through
#                tests/capi/realcuda.c), 2 ranks (and 3: ranks sharing devices); again
#                with GONCCL_DEVICE_PATH=1 (capi-cuda-device-*)
#   init-log     the INIT log (GONCCL_DEBUG=INFO GONCCL_DEBUG_SUBSYS=INIT): topology, transports
#   stream-*     scripts/gpu_stream_check.py on 2 ranks: 256 MiB sync all_reduce checked at once
#                on the default stream x50, all_gather into a list, chained async ops; also
#                under PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
#   ddp-*        examples/ddp_simple.py and ddp_example.py under torchrun: one rank per GPU,
#                and 2 ranks sharing GPU 0
#   pytest-cuda  the pytest suite's CUDA cases (pytest -k cuda: device-parametrized tests)
#   bench-*      python -m gonccl.bench all_reduce on CUDA tensors: gonccl vs gloo, gonccl
#                with GONCCL_DEVICE_PATH=1 (bench-device), and vs nccl with one rank per
#                GPU (2+ GPUs)
# --dry-run runs what needs no GPU (build, import, compiling the C test, the init log and
# the stream checker and ddp_simple on CPU ranks) and lists the GPU steps it would run.
# Nothing here needs the network. The report (default build/gpu-check/report.md) holds
# the machine, each step's verdict and the tail of its output; REPORT.logs/ beside it holds
# every step's whole log.
set -uo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DRY=0
LIB="${GONCCL_LIBRARY:-}"
PY="${GONCCL_PYTHON:-$(command -v python3 || command -v python)}"
REPORT="$ROOT/build/gpu-check/report.md"
SCALE="${GONCCL_CHECK_TIMEOUT_SCALE:-1}"

usage() { sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//'; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --dry-run) DRY=1 ;;
    --library) LIB="$2"; shift ;;
    --library=*) LIB="${1#*=}" ;;
    --python) PY="$2"; shift ;;
    --python=*) PY="${1#*=}" ;;
    --report) REPORT="$2"; shift ;;
    --report=*) REPORT="${1#*=}" ;;
    -h|--help) usage; exit 0 ;;
    *) echo "gpu-check: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
[[ -n "$LIB" ]] && LIB="$(cd "$(dirname "$LIB")" && pwd)/$(basename "$LIB")"
REPORT="$(mkdir -p "$(dirname "$REPORT")" && cd "$(dirname "$REPORT")" && pwd)/$(basename "$REPORT")"
LOGS="${REPORT%.md}.logs"   # this report's own: every step's full log, and work/ for its files
WORK="$LOGS/work"
rm -rf "$LOGS"
mkdir -p "$LOGS" "$WORK"

RESULTS=()   # "name|status|seconds|reason"
PASS=0; FAIL=0; SKIP=0

record() {  # name status seconds reason
  RESULTS+=("$1|$2|$3|$4")
  case "$2" in pass) PASS=$((PASS + 1)) ;; fail) FAIL=$((FAIL + 1)) ;; *) SKIP=$((SKIP + 1)) ;; esac
  printf 'gpu-check: %-22s %-4s %4ss  %s\n' "$1" "$2" "$3" "$4"
}

# run NAME TIMEOUT CHECK CMD...: runs CMD (a command or an exported function; it and its
# children are killed at TIMEOUT*SCALE seconds), output in $LOGS/NAME.log; then CHECK (a
# shell function given the log, or "-") decides: it prints a reason, returns 0 to pass.
run() {
  local name="$1" limit="$2" check="$3"; shift 3
  local log="$LOGS/$name.log" t0=$SECONDS rc reason
  limit=$(awk -v a="$limit" -v b="$SCALE" 'BEGIN { printf "%d", a * b }')
  { echo "\$ $*"; echo; } >"$log"
  timeout -k 15 "$limit" bash -c '"$@"' bash "$@" >>"$log" 2>&1 </dev/null
  rc=$?
  local secs=$((SECONDS - t0))
  if [[ $rc -eq 124 || $rc -eq 137 ]]; then
    record "$name" fail "$secs" "timed out after ${limit}s (killed)"
  elif [[ $rc -ne 0 ]]; then
    record "$name" fail "$secs" "exit status $rc: $(grep -m1 -E 'FAIL|Error|error:|CHECK failed' "$log" | cut -c1-160)"
  elif [[ "$check" != "-" ]] && ! reason="$("$check" "$log")"; then
    record "$name" fail "$secs" "$reason"
  else
    record "$name" pass "$secs" "${reason:-exit 0}"
  fi
}

skip() { record "$1" skip 0 "$2"; }

pyq() { (cd "$WORK" && timeout 120 "$PY" -c "$1" 2>/dev/null); }

free_port() { pyq 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

torchrun() {  # NPROC SCRIPT ARGS...: torchrun on this host, a fresh port
  local n="$1"; shift
  (cd "$WORK" && exec "$PY" -m torch.distributed.run --nproc_per_node="$n" --nnodes=1 \
    --master_addr=127.0.0.1 --master_port="$(free_port)" "$@")
}

# ---- checks of a step's output ----
check_build() {
  local how; how=$(grep -m1 -o 'gonccl: building the extension with.*' "$1")
  local lib; lib=$(grep -m1 -o 'gonccl: GONCCL_LIBRARY: using [^ ]*' "$1")
  echo "${lib:+$lib; }${how:-no 'building the extension' line in the log}"
  if [[ -n "$LIB" && -z "$lib" ]]; then
    echo "; the build did not use --library $LIB"
    return 1
  fi
  [[ $DRY -eq 1 || "$how" == *"with CUDA support"* ]]
}
check_import() {
  grep -m1 '^gonccl ' "$1"
  [[ $DRY -eq 1 ]] || grep -q 'cuda_support True' "$1"
}
check_capi() {
  local ok ranks
  ok=$(grep -c 'checks passed' "$1")
  ranks=$(grep -o '^\[rank [0-9]*\]' "$1" | sort -u | wc -l)
  [[ $ok -ge 2 && $ok -eq $ranks ]] && { grep -m1 'checks passed' "$1"; return 0; }
  echo "$ok of $ranks ranks reported their checks passed"; return 1
}
check_init() {
  local n; n=$(grep -c 'GONCCL.INIT' "$1")
  [[ $n -gt 0 ]] && { echo "$n INIT lines (in the report below)"; return 0; }
  echo "no INIT line logged"; return 1
}
check_stream() {
  local bad; bad=$(grep '^STREAMCHECK' "$1" | grep -c '"ok": false')
  local good; good=$(grep '^STREAMCHECK' "$1" | grep -v '"check": "setup"' | grep -c '"ok": true')
  [[ $bad -eq 0 && $good -gt 0 ]] && { echo "$good checks x ranks passed"; return 0; }
  echo "$bad checks failed: $(grep '^STREAMCHECK' "$1" | grep -m1 '"ok": false' | cut -c13-200)"; return 1
}
ddp_simple_ranks=2
check_ddp_simple() {
  local want; want=$(awk -v n="$ddp_simple_ranks" 'BEGIN { printf "%.1f", 3.5 * (n - 1) }')
  # Rank by rank, anywhere in the output: two ranks' prints can share a line
  # ("rank 0: reduced dy/dw: 3.5rank 1: reduced dy/dw: 3.5").
  local n=0 r
  for ((r = 0; r < ddp_simple_ranks; r++)); do
    grep -Eq "rank $r: reduced dy/dw: ${want//./\\.}([^0-9]|\$)" "$1" && n=$((n + 1))
  done
  [[ $n -eq $ddp_simple_ranks ]] && { echo "$n ranks printed reduced dy/dw: $want"; return 0; }
  echo "$n of $ddp_simple_ranks ranks printed reduced dy/dw: $want"; return 1
}
check_ddp_example() {
  local n; n=$(grep -c 'Start running basic DDP example' "$1")
  [[ $n -ge 1 ]] && { echo "$n ranks ran"; return 0; }
  echo "no rank started"; return 1
}
check_pytest() { tail -1 "$1" | grep -E 'passed|skipped' || { echo "no pytest summary"; return 1; }; }
check_bench() { grep -qE '^#? *[0-9]+ ' "$1" && { echo "table written"; return 0; }; echo "no table"; return 1; }

# ---- the machine ----
gpus=0
if [[ $DRY -eq 0 ]]; then
  gpus=$(pyq 'import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)')
  gpus=${gpus:-0}
fi
machine() {
  echo "- date: $(date -u '+%Y-%m-%d %H:%M:%S UTC'); host: $(hostname); $(uname -srm)"
  echo "- source: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$ROOT" diff --quiet 2>/dev/null || echo ' (modified)')"
  echo "- python: $PY ($("$PY" --version 2>&1))"
  echo "- torch: $(pyq 'import torch; print(torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())')"
  echo "- GPUs seen by torch: $gpus$([[ $DRY -eq 1 ]] && echo ' (dry run: not asked)')"
  if command -v nvidia-smi >/dev/null; then
    timeout 30 nvidia-smi --query-gpu=index,name,driver_version,memory.total,pci.bus_id --format=csv,noheader 2>&1 | sed 's/^/  - /'
  else
    echo "- nvidia-smi: not on PATH"
  fi
  echo "- nvcc: $(command -v nvcc >/dev/null && nvcc --version | tail -1 || echo none); gcc: $(gcc -dumpfullversion 2>/dev/null || echo none); go: $(command -v go >/dev/null && go version || echo none)"
  echo "- library: ${LIB:-none given (built with Go)}"
}


# ---- the steps, as functions run() can run ----
build() {
  cd "$ROOT" || return 1
  if [[ -n "$LIB" ]]; then
    GONCCL_LIBRARY="$LIB" "$PY" -m pip install -v --no-build-isolation --no-deps --no-index --disable-pip-version-check .
  else
    "$PY" -m pip install -v --no-build-isolation --no-deps --no-index --disable-pip-version-check .
  fi
}

capi_compile() {
  gcc -c -std=c11 -D_DEFAULT_SOURCE -Wall -Werror -O1 -fPIC -I"$ROOT/tests/fakecuda" \
    -o "$CAPI/realcuda.o" "$ROOT/tests/capi/realcuda.c" &&
    gcc -c -std=c11 -D_DEFAULT_SOURCE -Wall -Werror -O1 -I"$PKG/include" -I"$ROOT/tests/fakecuda" \
      -I"$ROOT/tests/capi" -o "$CAPI/cuda_capi_test.o" "$ROOT/tests/capi/cuda_capi_test.c"
}

capi_link() {
  gcc -shared -o "$CAPI/librealcuda.so" "$CAPI/realcuda.o" -L"$libcuda_dir" -l:libcuda.so.1 -ldl -lpthread &&
    gcc -o "$CAPI/cuda_capi_test" "$CAPI/cuda_capi_test.o" -L"$PKG" -lgonccl -Wl,-rpath,"$PKG" \
      -L"$CAPI" -lrealcuda -Wl,-rpath,"$CAPI" -lpthread -lm
}

capi_ranks() {  # NRANKS [DEVICE_PATH: 0 staged, 1 the device path]
  local n="$1" dp="${2:-0}" pids=() rc=0
  rm -f "$CAPI/id.$n"
  for ((r = 0; r < n; r++)); do
    GONCCL_CUDA_LIBRARY="$CAPI/librealcuda.so" GONCCL_DEBUG=INFO GONCCL_DEBUG_SUBSYS=INIT GONCCL_DEVICE_PATH="$dp" \
      "$CAPI/cuda_capi_test" "$r" "$n" "$CAPI/id.$n" > >(sed "s/^/[rank $r] /") 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  return $rc
}

stream() { torchrun 2 "$ROOT/scripts/gpu_stream_check.py" "$@"; }

ddp() { OMP_NUM_THREADS=1 torchrun "$1" "$ROOT/examples/$2"; }  # NPROC SCRIPT

CAPI="$WORK/capi"
mkdir -p "$CAPI"
libcuda_dir="$(ldconfig -p 2>/dev/null | awk '/libcuda\.so\.1 .*x86-64/ { print $NF; exit }' | xargs -r dirname)"
export ROOT PY WORK LOGS CAPI LIB DRY libcuda_dir
export -f pyq free_port torchrun build capi_compile capi_link capi_ranks stream ddp
echo "gpu-check: $([[ $DRY -eq 1 ]] && echo 'DRY RUN: ')report in $REPORT"

if [[ -z "$LIB" ]] && ! command -v go >/dev/null; then
  record build fail 0 "no Go on PATH and no --library/GONCCL_LIBRARY: build libgonccl.so elsewhere (make lib) and pass it"
elif [[ -n "$LIB" && ! -f "$LIB" ]]; then
  record build fail 0 "--library $LIB: no such file"
else
  run build 1800 check_build build
fi
built=$([[ $FAIL -eq 0 ]] && echo 1 || echo 0)

if [[ $built -eq 1 ]]; then
  run import 120 check_import bash -c 'cd "$WORK" && "$PY" -c "$1"' bash \
    'import gonccl, torch; from gonccl import _C; print("gonccl", gonccl.version(), "from", gonccl.__file__, "cuda_support", _C.cuda_support(), "torch", torch.__version__)'
else
  skip import "the build failed"
fi
PKG=""
[[ $built -eq 1 ]] && PKG="$(pyq 'import gonccl, os; print(os.path.dirname(gonccl.__file__))')"
export PKG

# ---- the C ABI on CUDA buffers ----
if [[ -z "$PKG" ]]; then
  skip capi-compile "gonccl is not importable (build failed)"
else
  run capi-compile 300 - capi_compile
fi
if [[ $DRY -eq 1 ]]; then
  skip capi-cuda "dry run: would link tests/capi/cuda_capi_test.c with tests/capi/realcuda.c and libcuda.so.1 and run it on 2 and 3 ranks, staged and with GONCCL_DEVICE_PATH=1"
elif [[ -z "$libcuda_dir" ]]; then
  skip capi-cuda "no libcuda.so.1 in ldconfig's cache (no NVIDIA driver?)"
elif [[ -z "$PKG" ]]; then
  skip capi-cuda "gonccl is not importable"
else
  run capi-link 300 - capi_link
  run capi-cuda-2ranks 300 check_capi capi_ranks 2
  run capi-cuda-3ranks 300 check_capi capi_ranks 3
  # The device path (GONCCL_DEVICE_PATH=1): scratch shared by CUDA IPC, copies, kernels
  # and stream memory operations; its INIT line says "device path" or why it staged.
  run capi-cuda-device-2ranks 300 check_capi capi_ranks 2 1
  run capi-cuda-device-3ranks 300 check_capi capi_ranks 3 1
fi

# ---- torch: on GPUs, or on CPU ranks in a dry run ----
if [[ $DRY -eq 1 ]]; then
  dev=cpu
  export CUDA_VISIBLE_DEVICES=""
else
  dev=cuda
fi
export dev
if [[ -z "$PKG" ]]; then
  skip init-log "gonccl is not importable"
elif [[ $DRY -eq 0 && $gpus -eq 0 ]]; then
  skip init-log "torch sees no GPU"
else
  run init-log 300 check_init env GONCCL_DEBUG=INFO GONCCL_DEBUG_SUBSYS=INIT \
    bash -c 'torchrun 2 "$ROOT/scripts/gpu_stream_check.py" --device "$dev" --init-only'
fi

if [[ -z "$PKG" ]]; then
  skip stream "gonccl is not importable"
elif [[ $DRY -eq 1 ]]; then
  run stream-cpu 300 check_stream stream --device cpu --size-mib 4 --iters 3 --small-mib 1 --small-iters 2
  skip stream-cuda "dry run: would run scripts/gpu_stream_check.py --device cuda (256 MiB x50, all_gather list, chained async) on 2 ranks (one per GPU on 2+ GPUs, else both on GPU 0), and again with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
elif [[ $gpus -eq 0 ]]; then
  skip stream-cuda "torch sees no GPU"
else
  run stream-cuda 900 check_stream stream --device cuda
  run stream-cuda-expandable 900 check_stream env PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True \
    bash -c 'stream --device cuda'
fi

# ---- the lecture's examples ----
if [[ -z "$PKG" ]]; then
  skip ddp "gonccl is not importable"
elif [[ $DRY -eq 1 ]]; then
  ddp_simple_ranks=2
  run ddp-simple-cpu 300 check_ddp_simple ddp 2 ddp_simple.py
  skip ddp-gpu "dry run: would run examples/ddp_simple.py and ddp_example.py under torchrun with one rank per GPU, and with 2 ranks sharing GPU 0 (CUDA_VISIBLE_DEVICES=0)"
elif [[ $gpus -eq 0 ]]; then
  skip ddp-gpu "torch sees no GPU"
else
  ddp_simple_ranks=$gpus
  run ddp-simple-per-gpu 600 check_ddp_simple ddp "$gpus" ddp_simple.py
  run ddp-example-per-gpu 900 check_ddp_example ddp "$gpus" ddp_example.py
  ddp_simple_ranks=2
  run ddp-simple-shared-gpu0 600 check_ddp_simple env CUDA_VISIBLE_DEVICES=0 bash -c 'ddp 2 ddp_simple.py'
  run ddp-example-shared-gpu0 900 check_ddp_example env CUDA_VISIBLE_DEVICES=0 bash -c 'ddp 2 ddp_example.py'
fi

# ---- the test suite's CUDA cases ----
PYTEST=(-m pytest -v -k cuda -p no:cacheprovider "$ROOT/tests")
if [[ $DRY -eq 1 ]]; then
  skip pytest-cuda "dry run: would run $PY ${PYTEST[*]} (the collective, p2p, groups/hooks and differential tests on CUDA tensors against Gloo)"
elif [[ $gpus -eq 0 ]]; then
  skip pytest-cuda "torch sees no GPU"
elif ! pyq 'import pytest, pytest_timeout' >/dev/null; then
  skip pytest-cuda "pytest and pytest-timeout are not installed for $PY (no network here: install them beforehand)"
else
  run pytest-cuda 1800 check_pytest bash -c 'cd "$ROOT" && "$PY" "$@"' bash "${PYTEST[@]}"
fi

# ---- the benchmark on CUDA tensors ----
BENCH=(-m gonccl.bench all_reduce --device cuda -b 8 -e 256M -f 4 -n 10 -w 3 -c 1)
if [[ $DRY -eq 1 ]]; then
  skip bench "dry run: would run $PY ${BENCH[*]} -np 2 --backends gonccl,gloo, again with GONCCL_DEVICE_PATH=1 --backends gonccl, and with --backends gonccl,gloo,nccl -np N on N>=2 GPUs (one rank per GPU)"
elif [[ $gpus -eq 0 ]]; then
  skip bench "torch sees no GPU"
else
  run bench-gloo 1200 check_bench bash -c 'cd "$WORK" && "$PY" "$@"' bash "${BENCH[@]}" -np 2 --backends gonccl,gloo --json "$LOGS/bench-gloo.json"
  run bench-device 1200 check_bench bash -c 'cd "$WORK" && GONCCL_DEVICE_PATH=1 GONCCL_DEBUG=INFO GONCCL_DEBUG_SUBSYS=INIT "$PY" "$@"' bash "${BENCH[@]}" -np 2 --backends gonccl --json "$LOGS/bench-device.json"
  if [[ $gpus -ge 2 ]]; then
    run bench-nccl 1200 check_bench bash -c 'cd "$WORK" && "$PY" "$@"' bash "${BENCH[@]}" -np "$gpus" --backends gonccl,gloo,nccl --json "$LOGS/bench-nccl.json"
  else
    skip bench-nccl "one GPU: NCCL needs one rank per GPU"
  fi
fi

# ---- the report ----
{
  echo "# gonccl GPU check$([[ $DRY -eq 1 ]] && echo ' (dry run: no GPU used)')"
  echo
  machine
  echo
  echo "**$PASS passed, $FAIL failed, $SKIP skipped**"
  echo
  echo "| step | result | seconds | why |"
  echo "|---|---|---|---|"
  for r in "${RESULTS[@]}"; do
    IFS='|' read -r n s t why <<<"$r"
    echo "| $n | $s | $t | ${why//|//} |"
  done
  if [[ -f "$LOGS/init-log.log" ]]; then
    echo
    echo "## INIT lines"
    echo '```'
    grep 'GONCCL.INIT' "$LOGS/init-log.log" | head -60
    echo '```'
  fi
  for r in "${RESULTS[@]}"; do  # in the order the steps ran
    f="$LOGS/${r%%|*}.log"
    [[ -f "$f" ]] || continue
    echo
    echo "## $(basename "$f" .log)"
    echo '```'
    head -2 "$f"
    echo "..."
    tail -40 "$f"
    echo '```'
  done
} >"$REPORT"
echo "gpu-check: $PASS passed, $FAIL failed, $SKIP skipped; report: $REPORT"
[[ $FAIL -eq 0 ]]

#!/usr/bin/env bash
# gpu-check.sh: everything gonccl needs checked on a machine with GPUs, in one command and
# one report, within a time budget (a lent GPU gives 15 minutes, start and build included).
# Run from the source tree, on a machine with torch and one or more GPUs:
#
#   scripts/gpu-check.sh [--part A|B] [--library PATH/libgonccl.so | --wheel WHEEL_OR_DIR]
#                        [--python PY] [--report FILE.md | DIR] [--only STEP,...]
#                        [--budget SECONDS] [--part-budget PART=SECONDS] [--jobs N]
#                        [--kernels-test BINARY] [--dry-run]
#
# Two parts fit one lent GPU machine (15 minutes of device time, its 2-4 minute start and
# the transfers included; docs/development/gpu-check.md): --part A (245 s: the build, the
# import, the kernels on the GPU, the C ABI, the stream check, the lecture's script), then
# --part B --wheel DIR (295 s: the benchmarks first, then one pytest case of each class
# that once crashed) on the same warm machine, reusing A's wheel. Without --part, both.
# Each part's plan is its steps' figures (measured on the last real run where a GPU ran
# them, an estimate where none has, each plus a margin) and the script's own time, and
# must fit the part's budget: a dry run (CI) fails when it does not.
#
# Go is optional: give a libgonccl.so built elsewhere (`make lib`) with --library or
# GONCCL_LIBRARY, and only the C++ extension is built here (against this machine's torch),
# as a wheel that is installed and kept under the report (DIR/wheel/) and in
# build/gpu-check/wheel/: a second run passes --wheel with either and skips the build.
# The steps (each with a time limit; each reports pass, fail or skip with the reason):
#   build        pip wheel . and install it (the prebuilt library when given; else `go
#                build`, which needs Go); install-wheel instead with --wheel
#   import       import gonccl, its library's version, CUDA support in the extension
#   kernels-gpu  the reduction kernels' sweeps on GPU 0 (TestKernelsOnARealGPU), from the
#                test binary `make gpu-check-kernels` prebuilds (go test -c: the GPU
#                machine has no Go) at build/gpu-check/kernels-gpu.test, or --kernels-test;
#                a skip there fails it
#   capi-link    tests/capi/link-realcuda.sh: realcuda.c (the fake driver's test hooks on
#                the real driver API) and tests/capi/cuda_capi_test.c linked against
#                libcuda.so.1 with --no-undefined, every hook of fakecuda.h checked (nm)
#   capi-cuda-*  that test on 2 ranks and on 3 (ranks sharing devices; on one GPU every
#                rank shares it); again with GONCCL_DEVICE_PATH=1 (capi-cuda-device-*; at
#                3 ranks the device ring takes all_reduce and reduce_scatter from 1 KiB)
#   capi-memcheck  the 2-rank run under compute-sanitizer --tool memcheck (if installed),
#                with --report-api-errors no: the C test's deliberate bad pointer (test_bad)
#                is an API error CUDA returns, not a memory error
#   stream-*     scripts/gpu_stream_check.py on 2 ranks, with the INIT log: 256 MiB sync
#                all_reduce checked at once on the default stream x50, all_gather into a
#                list, chained async ops; also with expandable_segments:True
#   ddp-*        examples/ddp_simple.py and ddp_example.py under torchrun: 2 ranks sharing
#                GPU 0, and one rank per GPU on 2+ GPUs
#   bench-*      python -m gonccl.bench on CUDA tensors, three backends named with
#                --backends: on one GPU gonccl's staged path (gonccl-staged), its same-GPU
#                path (gonccl-samegpu) and gloo; on 2+ GPUs gonccl-staged, gonccl-device
#                and nccl: all_reduce 16 B to 256 MiB (bench-paths; on 2+ GPUs then 256 MiB
#                with 256 MiB of device scratch, one round); the lecture's DDP step
#                (bench-ddp); small ops blocking (bench-small); gonccl-model and
#                gonccl-samegpu under a CUDA MPS daemon of its own, where one starts
#                (bench-mps). Part B runs them before pytest.
#   pytest-cuda  the suite's CUDA cases on torch (pytest -k cuda), in parallel with
#                pytest-xdist when installed; pytest-cuda-device: the collective and
#                differential files' 2- and 3-rank CUDA cases with GONCCL_DEVICE_PATH=1;
#                the first lines of each failure go into the report; pytest-smoke and
#                pytest-smoke-device (part A): the worker runs SMOKE_K and SMOKE_DEVICE_K
#                select, which part B leaves out
# Every rank any step starts has the crash tracer (tests/crashtrace, built here with gcc)
# preloaded and GOTRACEBACK=crash: a crash names its signal, instruction and stack.
# --only STEP,... runs those steps (a name, or a prefix: capi, stream, ddp, bench); the
# build runs only if named, if --wheel is given, or if gonccl is not importable.
# --extended adds the steps a run leaves out to fit its parts on one GPU (capi-cuda-2ranks
# and capi-cuda-device-2ranks, which the 3-rank runs cover, stream-cuda-expandable,
# ddp-example-shared-gpu0, which ddp-simple's path covers, bench-small, and the suite's
# CUDA cases beyond part B's smoke run: pytest-smoke-device, pytest-cuda,
# pytest-cuda-device, for a machine lent longer); --only runs them when it names them.
# --budget (default: the part's budget, 245 s for --part A, 295 s for B, 540 s for both;
# none in a dry run) bounds the run: each step's limit is cut to what is left, a step that
# no longer fits is skipped, saying so. --part-budget A=SECONDS (or B=) sets a part's
# budget, for a machine lent for longer or shorter.
# --dry-run prints the plan of each part (steps, limits, the seconds each took on the last
# real run, on one H100, and with the margin) and fails if a part does not fit its budget, and runs what
# needs no GPU: the build, the import, the C test linked and run on 2 ranks against the
# fake driver built as a libcuda.so.1 stand-in, and the stream checker and ddp_simple on
# CPU ranks. Nothing here needs the network. The report (default
# build/gpu-check/report.md; with --report DIR, DIR/report.md) holds the machine, each
# step's verdict and the tail of its output; every step's whole log is beside it, and all
# of them in one file, report.logs.tgz (what to bring back from a lent machine).
set -uo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DRY=0
LIB="${GONCCL_LIBRARY:-}"
WHEEL=""
PY="${GONCCL_PYTHON:-$(command -v python3 || command -v python)}"
REPORT="$ROOT/build/gpu-check/report.md"
SCALE="${GONCCL_CHECK_TIMEOUT_SCALE:-1}"
ONLY=""
BUDGET=""
JOBS=""
EXTENDED=0
PART=""
CRASHTRACE=""
KTEST=""
declare -A PART_BUDGET=([A]=245 [B]=295)  # A fits the one-rank-per-GPU step on 2+ GPUs
ONE_CALL=540       # both parts in one call: a GPU machine's command runs at most 600 s
CARRY_MAX_MIB=64   # what a GPU machine takes besides the tracked files
CARRY_MAX_PATHS=8
PLANNED=0

usage() { sed -n '2,83p' "$0" | sed 's/^# \{0,1\}//'; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --dry-run) DRY=1 ;;
    --extended) EXTENDED=1 ;;
    --library|--wheel|--python|--report|--only|--budget|--jobs|--part|--part-budget|--kernels-test)
      [[ $# -ge 2 ]] || { echo "gpu-check: $1 needs a value" >&2; exit 2; }
      opt="$1" v="$2"; shift
      case "$opt" in
        --library) LIB="$v" ;; --wheel) WHEEL="$v" ;; --python) PY="$v" ;; --report) REPORT="$v" ;;
        --only) ONLY="$v" ;; --budget) BUDGET="$v" ;; --jobs) JOBS="$v" ;; --part) PART="$v" ;;
        --kernels-test) KTEST="$v" ;;
        --part-budget)
          [[ "$v" =~ ^([AaBb])=([0-9]+)$ ]] || { echo "gpu-check: --part-budget $v: PART=SECONDS, PART A or B" >&2; exit 2; }
          PART_BUDGET[${BASH_REMATCH[1]^^}]="${BASH_REMATCH[2]}" ;;
      esac ;;
    --library=*) LIB="${1#*=}" ;;
    --wheel=*) WHEEL="${1#*=}" ;;
    --python=*) PY="${1#*=}" ;;
    --report=*) REPORT="${1#*=}" ;;
    --only=*) ONLY="${1#*=}" ;;
    --budget=*) BUDGET="${1#*=}" ;;
    --jobs=*) JOBS="${1#*=}" ;;
    --part=*) PART="${1#*=}" ;;
    -h|--help) usage; exit 0 ;;
    *) echo "gpu-check: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
PART="${PART^^}"
[[ -z "$PART" || "$PART" == A || "$PART" == B ]] || { echo "gpu-check: --part $PART: A or B" >&2; exit 2; }
WHOLE_BUDGET=$((PART_BUDGET[A] + PART_BUDGET[B]))
[[ -z "$BUDGET" ]] && BUDGET=$([[ $DRY -eq 1 ]] && echo 0 || echo "${PART_BUDGET[$PART]:-$WHOLE_BUDGET}")
[[ "$BUDGET" =~ ^[0-9]+$ ]] || { echo "gpu-check: --budget $BUDGET: not a number of seconds" >&2; exit 2; }
[[ -z "$JOBS" || "$JOBS" =~ ^[0-9]+$ ]] || { echo "gpu-check: --jobs $JOBS: not a number" >&2; exit 2; }
abspath() { echo "$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"; }
[[ -n "$LIB" ]] && LIB="$(abspath "$LIB")"
[[ -z "$KTEST" ]] && KTEST="$ROOT/build/gpu-check/kernels-gpu.test"
[[ "$KTEST" == /* ]] || KTEST="$PWD/$KTEST"
if [[ -n "$WHEEL" ]]; then
  [[ -d "$WHEEL" ]] && WHEEL="$(ls -t "$WHEEL"/gonccl-*.whl 2>/dev/null | head -1)"
  [[ -f "$WHEEL" ]] || { echo "gpu-check: --wheel: no gonccl wheel there" >&2; exit 2; }
  WHEEL="$(abspath "$WHEEL")"
fi
[[ "$REPORT" == *.md ]] || REPORT="$REPORT/report.md"
REPORT="$(mkdir -p "$(dirname "$REPORT")" && cd "$(dirname "$REPORT")" && pwd)/$(basename "$REPORT")"
LOGS="${REPORT%.md}.logs"   # this report's own: every step's full log, and work/ for its files
WORK="$LOGS/work"
WHEELDIR="$(dirname "$REPORT")/wheel"
rm -rf "$LOGS"
mkdir -p "$LOGS" "$WORK"

# ---- the steps: name, time limit (s), seconds on one H100 on the last real run (the plan) ----
# In the order they run: part A's, then part B's benchmarks before its pytest cases.
STEPS=(build install-wheel import kernels-gpu capi-link capi-cuda-2ranks capi-cuda-3ranks capi-cuda-device-2ranks
  capi-cuda-device-3ranks capi-memcheck stream-cuda stream-cuda-expandable ddp-simple-shared-gpu0
  ddp-example-shared-gpu0 ddp-simple-per-gpu ddp-example-per-gpu bench-paths bench-ddp bench-mps bench-small
  pytest-smoke pytest-smoke-device pytest-cuda pytest-cuda-device)
declare -A LIMIT=([build]=300 [install-wheel]=60 [import]=30 [kernels-gpu]=60 [capi-link]=30 [capi-cuda-2ranks]=30
  [capi-cuda-3ranks]=30 [capi-cuda-device-2ranks]=30 [capi-cuda-device-3ranks]=30 [capi-memcheck]=60
  [stream-cuda]=45 [stream-cuda-expandable]=45
  [ddp-simple-shared-gpu0]=45 [ddp-example-shared-gpu0]=45 [ddp-simple-per-gpu]=45
  [ddp-example-per-gpu]=45 [bench-paths]=100 [bench-mps]=40 [bench-small]=90 [bench-ddp]=75
  [pytest-smoke]=90 [pytest-smoke-device]=60 [pytest-cuda]=250 [pytest-cuda-device]=60)
# EXPECT: the step's seconds on the last real run (one H100, 2026-11-26, second run:
# bench/results/h100-2026-11-26/gpu-check-report.md; first run:
# ../shared/gpu-runs/2026-11-26-h100), or an estimate where it never ran; SOURCE says which.
# The plan adds MARGIN_PCT percent (at least MARGIN_MIN s) to each, and OVERHEAD to each part.
declare -A EXPECT=([build]=67 [install-wheel]=10 [import]=5 [kernels-gpu]=15 [capi-link]=1 [capi-cuda-2ranks]=2
  [capi-cuda-3ranks]=2 [capi-cuda-device-2ranks]=2 [capi-cuda-device-3ranks]=2 [capi-memcheck]=30
  [stream-cuda]=17 [stream-cuda-expandable]=14
  [ddp-simple-shared-gpu0]=17 [ddp-example-shared-gpu0]=19 [ddp-simple-per-gpu]=15
  [ddp-example-per-gpu]=17 [bench-paths]=70 [bench-mps]=40 [bench-small]=44 [bench-ddp]=49
  [pytest-smoke]=60 [pytest-smoke-device]=30 [pytest-cuda]=230 [pytest-cuda-device]=45)
declare -A SOURCE=([build]="measured (run 2)" [install-wheel]="estimate: pip install of a local wheel, no build"
  [import]="measured (run 2)"
  [kernels-gpu]="estimate: never ran on a GPU (the sweeps take 2 s on the fake; the binary's start, a context and the module load)"
  [capi-link]="measured (run 2)" [capi-cuda-2ranks]="measured (run 2)"
  [capi-cuda-3ranks]="measured (run 2)" [capi-cuda-device-2ranks]="measured (run 2)"
  [capi-cuda-device-3ranks]="measured (run 2)"
  [capi-memcheck]="estimate: never ran (no compute-sanitizer); the 2-rank run took 2 s, memcheck slows it ~10x plus its start"
  [stream-cuda]="measured (run 2)" [stream-cuda-expandable]="measured (run 2)"
  [ddp-simple-shared-gpu0]="measured (run 2)" [ddp-example-shared-gpu0]="measured (run 2)"
  [ddp-simple-per-gpu]="measured (run 1, 1 rank)" [ddp-example-per-gpu]="measured (run 1, 1 rank)"
  [bench-paths]="measured (run 2: bench-gloo 36 s + bench-device 24 s, three backends, now one run naming three) + ~10 s for the 2+ GPU 256 MiB device row"
  [bench-mps]="estimate: its limit (the probe alone takes ~5 s; the rows under MPS run only where the daemon starts)"
  [bench-small]="measured (run 2)" [bench-ddp]="measured (run 2: 49 s with three backends at -n 10 -w 3 --rounds 2; now three named, -n 5 -w 2)"
  [pytest-smoke]="estimate: 4 worker runs of 3 ranks and one of 2, side by side (run 1: 181 cases in 189 s on 12 workers)"
  [pytest-smoke-device]="estimate: 2 worker runs of 2 ranks, side by side"
  [pytest-cuda]="measured: 189 s with 65 cases dying early (run 1), killed unfinished at 208 s and 239 s (run 2)"
  [pytest-cuda-device]="estimate: test_differential ws2 ran in run 2 (ws3/ws4 crashed in the old constructor)")
MARGIN_PCT=20
MARGIN_MIN=2
# OVERHEAD: a part's seconds outside its steps (the torch probes for the machine's
# description, the crash tracer's build, the report and its archive): 16 s on run 2 (525 s
# used, its steps 509 s), planned with the margin.
OVERHEAD=16
# What runs where: g = on a GPU machine, 2 = only with 2+ GPUs, d = in a dry run too.
declare -A WHERE=([build]=gd [install-wheel]=gd [import]=gd [kernels-gpu]=gd [capi-link]=gd [capi-cuda-2ranks]=gd
  [capi-cuda-3ranks]=g [capi-cuda-device-2ranks]=g [capi-cuda-device-3ranks]=g [capi-memcheck]=g
  [stream-cuda]=g [stream-cuda-expandable]=g
  [ddp-simple-shared-gpu0]=g [ddp-example-shared-gpu0]=g [ddp-simple-per-gpu]=2
  [ddp-example-per-gpu]=2 [bench-paths]=g [bench-mps]=g [bench-small]=g [bench-ddp]=g
  [pytest-smoke]=g [pytest-smoke-device]=g [pytest-cuda]=g [pytest-cuda-device]=g)
# Which part each step belongs to; build and install-wheel run in whichever part needs them
# (planned: the build in A, the install of A's wheel in B).
declare -A PART_OF=([import]=A [kernels-gpu]=A [capi-link]=A [capi-cuda-2ranks]=A
  [capi-cuda-3ranks]=A [capi-cuda-device-2ranks]=A [capi-cuda-device-3ranks]=A [capi-memcheck]=A
  [stream-cuda]=A [stream-cuda-expandable]=A [ddp-simple-shared-gpu0]=A [ddp-example-shared-gpu0]=A
  [ddp-simple-per-gpu]=A [ddp-example-per-gpu]=A
  [bench-paths]=B [bench-ddp]=B [bench-mps]=B [bench-small]=B
  [pytest-smoke]=B [pytest-smoke-device]=B [pytest-cuda]=B [pytest-cuda-device]=B
  [stream-cpu]=A [ddp-simple-cpu]=A)
# Left out of a run on a GPU unless --extended, or --only names them.
declare -A EXTRA=([capi-cuda-2ranks]=1 [capi-cuda-device-2ranks]=1 [stream-cuda-expandable]=1
  [ddp-example-shared-gpu0]=1 [ddp-example-per-gpu]=1 [bench-small]=1 [pytest-smoke-device]=1 [pytest-cuda]=1 [pytest-cuda-device]=1)

# planned STEP: the seconds the plan gives it (its figure plus the margin).
planned() {
  local e="${EXPECT[$1]}" m
  m=$(( (e * MARGIN_PCT + 99) / 100 ))
  [[ $m -lt $MARGIN_MIN ]] && m=$MARGIN_MIN
  echo $((e + m))
}

# ---- each path by name beside the default: the steps that promote paths ----
# By default (GONCCL_DEVICE_PATH=auto) gonccl takes only the paths a GPU check has proven
# for the ranks' setup (internal/route's table). These steps run the C ABI test and the
# lecture's script on each other path by name, beside the default runs above; the report's
# paths table says, per setup and path, whether every step that ran it passed.
# name  limit  expected  part  source
PATH_STEPS=(
  "capi-cuda-samegpu-2ranks 30 2 A estimate: as capi-cuda-2ranks (2 s, run 2)"
  "capi-cuda-pipelined-2ranks 30 3 A estimate: as capi-cuda-2ranks (2 s, run 2), in 1 KiB chunks"
  "ddp-simple-one-rank 45 15 B measured (run 1, ddp-simple-per-gpu on 1 rank)"
  "ddp-simple-one-rank-copy 45 15 B estimate: as ddp-simple-one-rank"
  "ddp-simple-shared-gpu0-samegpu 45 17 B estimate: as ddp-simple-shared-gpu0 (17 s, run 2)"
  "ddp-simple-shared-gpu0-device 45 17 B estimate: as ddp-simple-shared-gpu0 (17 s, run 2)"
  "ddp-simple-shared-gpu0-pipelined 45 17 B estimate: as ddp-simple-shared-gpu0 (17 s, run 2)"
)
# Part B's are left out unless --extended (or --only names them): its plan is full.
for row in "${PATH_STEPS[@]}"; do
  read -r n lim exp part src <<<"$row"
  STEPS+=("$n")
  LIMIT[$n]=$lim EXPECT[$n]=$exp PART_OF[$n]=$part SOURCE[$n]=$src WHERE[$n]=g
  [[ $part == B ]] && EXTRA[$n]=1
done
# PATH_OF: the setup and path (route.Setup and route.Route names) each step ran, set as it
# runs (the setup depends on the GPUs).
declare -A PATH_OF=()

in_part() {  # STEP or GROUP: whether --part (if any) has it, or a step of it
  [[ -z "$PART" || "$1" == build || "$1" == install-wheel ]] && return 0
  [[ -n "${PART_OF[$1]:-}" ]] && { [[ "${PART_OF[$1]}" == "$PART" ]]; return; }
  local t
  for t in "${!PART_OF[@]}"; do
    [[ "$t" == "$1"-* && "${PART_OF[$t]}" == "$PART" ]] && return 0
  done
  return 1
}

selected() {  # STEP or GROUP: whether --only (if any) names it, a prefix of it, or a step of it
  if [[ -z "$ONLY" ]]; then
    in_part "$1" || return 1
    [[ $DRY -eq 1 || $EXTENDED -eq 1 || -z "${EXTRA[$1]:-}" ]]
    return
  fi
  local s
  for s in ${ONLY//,/ }; do
    [[ "$1" == "$s" || "$1" == "$s"-* || "$s" == "$1"-* ]] && return 0
  done
  return 1
}
if [[ -n "$ONLY" ]]; then
  for s in ${ONLY//,/ }; do
    known=0
    for t in "${STEPS[@]}" stream-cpu ddp-simple-cpu; do [[ "$t" == "$s" || "$t" == "$s"-* ]] && known=1; done
    [[ $known -eq 1 ]] || { echo "gpu-check: --only $s: no such step (steps: ${STEPS[*]})" >&2; exit 2; }
  done
fi

T0=$SECONDS
RESULTS=()   # "name|status|seconds|reason"
PASS=0; FAIL=0; SKIP=0

record() {  # name status seconds reason
  RESULTS+=("$1|$2|$3|$4")
  case "$2" in pass) PASS=$((PASS + 1)) ;; fail) FAIL=$((FAIL + 1)) ;; *) SKIP=$((SKIP + 1)) ;; esac
  printf 'gpu-check: %-24s %-4s %4ss  %s\n' "$1" "$2" "$3" "$4"
}

skip() { record "$1" skip 0 "$2"; }

always() { local only="$ONLY"; ONLY=""; run "$@"; ONLY="$only"; }  # run, whatever --only says

# run NAME CHECK CMD...: runs CMD (a command or an exported function; it and its children
# are killed at the step's limit, scaled by SCALE and cut to what is left of the budget),
# output in $LOGS/NAME.log; then CHECK (a shell function given the log, or "-") decides:
# it prints a reason, returns 0 to pass. A step --only leaves out is not run.
run() {
  local name="$1" check="$2"; shift 2
  selected "$name" || return 0
  local log="$LOGS/$name.log" t0=$SECONDS rc reason limit left
  limit=$(awk -v a="${LIMIT[$name]:-300}" -v b="$SCALE" 'BEGIN { printf "%d", a * b }')
  if [[ $BUDGET -gt 0 ]]; then
    left=$((BUDGET - (SECONDS - T0)))
    if [[ $left -lt 10 ]]; then
      skip "$name" "out of the ${BUDGET}s budget (${left}s left)"
      return 0
    fi
    [[ $limit -gt $left ]] && limit=$left
  fi
  { echo "\$ $*"; echo "(crash tracer: ${CRASHTRACE:-none}; LD_PRELOAD=${LD_PRELOAD:-})"; echo; } >"$log"
  timeout -k 10 "$limit" bash -c '"$@"' bash "$@" >>"$log" 2>&1 </dev/null
  rc=$?
  local secs=$((SECONDS - t0))
  if [[ $rc -eq 124 || $rc -eq 137 ]]; then
    record "$name" fail "$secs" "timed out after ${limit}s (killed)"
  elif [[ $rc -ne 0 ]]; then
    reason=$(tail -1 "$log" | grep -E '(passed|failed|error).* in [0-9.]+s' ||
      grep -m1 -E 'FAIL|Error|error:|CHECK failed|does not define' "$log")
    record "$name" fail "$secs" "exit status $rc: $(echo "$reason" | cut -c1-160)"
  elif [[ "$check" != "-" ]] && ! reason="$("$check" "$log")"; then
    record "$name" fail "$secs" "$reason"
  else
    record "$name" pass "$secs" "${reason:-exit 0}"
  fi
}

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
  local whl; whl=$(ls "$WHEELDIR"/gonccl-*.whl 2>/dev/null | head -1)
  local cxx; cxx=$(grep -m1 -o "linking the extension against torch's libstdc++: [^ ]*" "$1")
  echo "${lib:+$lib; }${how:-no 'building the extension' line in the log}${cxx:+; $cxx}${whl:+; wheel kept: $whl}"
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
check_memcheck() {
  check_capi "$1" >/dev/null || { check_capi "$1"; return 1; }
  local clean; clean=$(grep -c 'ERROR SUMMARY: 0 errors' "$1")
  [[ $clean -ge 2 ]] && { echo "$clean ranks: ERROR SUMMARY: 0 errors"; return 0; }
  echo "memcheck: $(grep -m1 'ERROR SUMMARY' "$1" || echo 'no ERROR SUMMARY line')"; return 1
}
check_stream() {
  local bad; bad=$(grep '^STREAMCHECK' "$1" | grep -c '"ok": false')
  local good; good=$(grep '^STREAMCHECK' "$1" | grep -v '"check": "setup"' | grep -c '"ok": true')
  local init; init=$(grep -c 'GONCCL INFO INIT' "$1")
  [[ $bad -eq 0 && $good -gt 0 && $init -gt 0 ]] && { echo "$good checks x ranks passed; $init INIT lines"; return 0; }
  [[ $init -eq 0 ]] && { echo "no INIT line logged"; return 1; }
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
# kernels-gpu: passes when the sweeps ran on the GPU; a skip (no driver, no GPU 0) fails it
# on a GPU machine, and is what a dry run expects.
check_kernels() {
  local pass; pass=$(grep -m1 -e '--- PASS: TestKernelsOnARealGPU' "$1") && { echo "$pass"; return 0; }
  local skip; skip=$(grep -m1 -A1 -e '--- SKIP: TestKernelsOnARealGPU' "$1" | tail -1 | sed 's/^ *//')
  if [[ -n "$skip" && $DRY -eq 1 ]]; then echo "dry run: the binary runs and skips: $skip"; return 0; fi
  [[ -n "$skip" ]] && { echo "skipped on a GPU machine: $skip"; return 1; }
  grep -m1 -e '--- FAIL' "$1" || echo "no PASS line"
  return 1
}
check_pytest() { tail -1 "$1" | grep -E 'passed|skipped' || { echo "no pytest summary"; return 1; }; }
check_ddp_bench() { grep -q 'ms/step' "$1" && { grep -E '^ +(gonccl[a-z-]*|gloo|nccl) ' "$1" | tr -s ' ' | paste -sd';' -; return 0; }; echo "no ms/step"; return 1; }
check_bench() { grep -qE '^#? *[0-9]+ ' "$1" && { echo "table written"; return 0; }; echo "no table"; return 1; }
# bench-mps: passes when MPS could not start (saying why) or when the rows under it were
# written; says what the INIT log said about MPS.
check_mps() {
  local no; no=$(grep -m1 '^MPS: not started' "$1") && { echo "$no"; return 0; }
  check_bench "$1" >/dev/null || { echo "MPS started, but the bench under it wrote no table"; return 1; }
  echo "table written under MPS; $(grep -m1 -o 'MPS active on GPU [^ ]* ([^)]*)\|rank [0-9]* is not a client of an MPS server[^;]*' "$1" || echo 'no MPS line in the INIT log')"
}

# ---- the machine ----
gpus=0
if [[ $DRY -eq 0 ]]; then
  gpus=$(pyq 'import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)')
  gpus=${gpus:-0}
fi
SANITIZER="$(command -v compute-sanitizer || true)"
if [[ -z "$SANITIZER" ]]; then
  for d in "$(dirname "$(command -v nvcc 2>/dev/null || echo /nonexistent/x)")" /usr/local/cuda/bin /usr/local/cuda/compute-sanitizer; do
    [[ -x "$d/compute-sanitizer" ]] && { SANITIZER="$d/compute-sanitizer"; break; }
  done
fi
# pytest workers: each runs 1-4 ranks, each rank a CUDA context on the same GPU; 6 keep a
# GPU under ~24 contexts (14 put ~50 there, and cases died of it).
if [[ -z "$JOBS" ]]; then
  cores=$(nproc 2>/dev/null || echo 2)
  JOBS=$((cores > 4 ? cores - 2 : 2))
  [[ $JOBS -gt 6 ]] && JOBS=6
fi
machine() {
  echo "- date: $(date -u '+%Y-%m-%d %H:%M:%S UTC'); host: $(hostname); $(uname -srm); $(nproc) cores"
  echo "- source: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$ROOT" diff --quiet 2>/dev/null || echo ' (modified)')"
  echo "- python: $PY ($("$PY" --version 2>&1))"
  echo "- torch: $(pyq 'import torch; print(torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())')"
  echo "- GPUs seen by torch: $gpus$([[ $DRY -eq 1 ]] && echo ' (dry run: not asked)')"
  if command -v nvidia-smi >/dev/null; then
    timeout 30 nvidia-smi --query-gpu=index,name,driver_version,memory.total,pci.bus_id --format=csv,noheader 2>&1 | sed 's/^/  - /'
  else
    echo "- nvidia-smi: not on PATH"
  fi
  echo "- nvcc: $(command -v nvcc >/dev/null && nvcc --version | tail -1 || echo none); compute-sanitizer: ${SANITIZER:-none}; gcc: $(gcc -dumpfullversion 2>/dev/null || echo none); go: $(command -v go >/dev/null && go version || echo none)"
  echo "- library: ${LIB:-none given}; wheel: ${WHEEL:-built here}"
  echo "- budget: ${BUDGET}s$([[ $BUDGET -eq 0 ]] && echo ' (none)'); used: $((SECONDS - T0))s; --only: ${ONLY:-all}"
}

# plan NGPUS PART: the steps part PART (A or B) runs on a GPU machine with NGPUS GPUs
# (whatever --only says), their limits and the seconds each took on the last real run;
# the sum must fit the part's budget (returns 1 if it does not). Part A plans the build,
# part B the install of A's wheel (--wheel), as docs/development/gpu-check.md runs them.
plan() {
  local n="$1" part="$2" total=0 s ONLY="" PART="$2"
  local budget="${PART_BUDGET[$part]}"
  echo "part $part:"
  echo
  echo "| step | runs on $n GPU(s) | in a dry run | limit (s) | last real run (s) | planned (s) | from |"
  echo "|---|---|---|---|---|---|---|"
  for s in "${STEPS[@]}"; do
    [[ "$s" == build && "$part" == B ]] && continue
    [[ "$s" == install-wheel && "$part" == A ]] && continue
    in_part "$s" || continue
    local runs="yes"
    if [[ $EXTENDED -eq 0 && -n "${EXTRA[$s]:-}" ]]; then
      runs="no (--extended)"
    elif [[ "${WHERE[$s]}" == 2 && $n -lt 2 ]]; then
      runs="no (2+ GPUs)"
    else
      total=$((total + $(planned "$s")))
    fi
    local dry="no"
    [[ "${WHERE[$s]}" == *d* ]] && dry="yes"
    [[ "$s" == capi-* && "$dry" == yes ]] && dry="yes (fake libcuda.so.1)"
    echo "| $s | $runs | $dry | ${LIMIT[$s]} | ${EXPECT[$s]} | $(planned "$s") | ${SOURCE[$s]} |"
  done
  local over=$((OVERHEAD + (OVERHEAD * MARGIN_PCT + 99) / 100))
  total=$((total + over))
  echo "| (the script itself) | yes | yes | - | $OVERHEAD | $over | measured (run 2: 525 s used, its steps 509 s) |"
  echo
  if [[ $total -le $budget ]]; then
    echo "part $part planned: ${total}s of its ${budget}s budget on $n GPU(s), with a ${MARGIN_PCT}% margin: fits"
  else
    echo "part $part planned: ${total}s of its ${budget}s budget on $n GPU(s), with a ${MARGIN_PCT}% margin: DOES NOT FIT"
  fi
  [[ $EXTENDED -eq 0 ]] && echo "left out to fit: $(for s in "${!EXTRA[@]}"; do in_part "$s" && echo -n "$s "; done)(--extended, or --only, runs them)"
  PLANNED=$total
  [[ $total -le $budget ]]
}

# plans NGPUS: the plan of each part --part names (both without it); 1 if one does not
# fit, or if both parts together, run in one call, exceed ONE_CALL seconds.
plans() {
  local p rc=0 all=0
  for p in A B; do
    [[ -n "$PART" && "$p" != "$PART" ]] && continue
    plan "$1" "$p" || rc=1
    all=$((all + PLANNED))
    echo
  done
  if [[ -z "$PART" ]]; then
    one_call "$all" "" || rc=1
    if [[ "$1" -lt 2 ]]; then  # the one-rank-per-GPU steps must fit too, where there are 2+ GPUs
      all=0
      for p in A B; do
        plan 2 "$p" >/dev/null
        all=$((all + PLANNED))
      done
      one_call "$all" " on 2+ GPUs (the one-rank-per-GPU steps included)" || rc=1
    fi
  fi
  return $rc
}

one_call() {  # SECONDS WHERE: whether both parts, planned SECONDS, fit one call
  if [[ $1 -le $ONE_CALL ]]; then
    echo "both parts in one call$2: ${1}s planned of at most ${ONE_CALL}s: fits"
  else
    echo "both parts in one call$2: ${1}s planned of at most ${ONE_CALL}s: DOES NOT FIT"
    return 1
  fi
}

# carry_plan: the files built elsewhere that the GPU machine needs besides the tree's
# tracked files (the library, the kernels' test binary, a wheel built by an earlier
# run), each with its stamp, as paths under the tree, their size against CARRY_MAX_MIB,
# and the command that runs both parts from them. 1 if one is missing, outside the
# tree, stale, or if they are too many or too large.
carry_plan() {
  local f paths=() bytes=0 rc=0 why
  local files=("${LIB:-$ROOT/build/lib/libgonccl.so}" "$KTEST")
  [[ -n "$WHEEL" ]] && files+=("$WHEEL")
  echo "| carried file | size (MiB) | stamp |"
  echo "|---|---|---|"
  for f in "${files[@]}"; do
    if [[ ! -f "$f" ]]; then
      echo "| $f | - | missing: build it here (make lib gpu-check-kernels) |"; rc=1; continue
    fi
    if [[ "$f" != "$ROOT"/* ]]; then
      echo "| $f | - | outside the tree: only paths under it can be carried |"; rc=1; continue
    fi
    why="$("$ROOT/scripts/carried-stamp.sh" check "$f" 2>&1)" || rc=1
    why="${why#carried-stamp: }" why="${why//"$ROOT"\//}"
    bytes=$((bytes + $(stat -c %s "$f") + $(stat -c %s "$f.stamp" 2>/dev/null || echo 0)))
    echo "| ${f#"$ROOT"/} | $(( ($(stat -c %s "$f") + 1048575) / 1048576 )) | ${why//|/-} |"
    paths+=("${f#"$ROOT"/}" "${f#"$ROOT"/}.stamp")
  done
  [[ "${LIB:-$ROOT/build/lib/libgonccl.so}" == "$ROOT"/* ]] && paths+=("$(dirname "${LIB:-$ROOT/build/lib/libgonccl.so}" | sed "s|^$ROOT/||")/gonccl.h")
  echo
  local mib=$(( (bytes + 1048575) / 1048576 )) list
  list="$(printf '"%s", ' "${paths[@]}")"
  echo "carry: [${list%, }] (${#paths[@]} paths, ${mib} MiB of at most ${CARRY_MAX_PATHS} paths and ${CARRY_MAX_MIB} MiB)"
  if [[ ${#paths[@]} -gt $CARRY_MAX_PATHS || $mib -gt $CARRY_MAX_MIB ]]; then
    echo "carry: DOES NOT FIT"; rc=1
  fi
  echo "one call: scripts/gpu-check.sh --library ${LIB#"$ROOT"/}${WHEEL:+ --wheel ${WHEEL#"$ROOT"/}} --kernels-test ${KTEST#"$ROOT"/} --report OUT/gpu-check (both parts, at most ${ONE_CALL}s; bring back OUT/gpu-check/)"
  [[ $rc -eq 0 ]] && echo "carry: every carried file matches this tree" || echo "carry: NOT READY"
  return $rc
}

# ---- the steps, as functions run() can run ----
build() {
  cd "$ROOT" || return 1
  rm -rf "$WHEELDIR" && mkdir -p "$WHEELDIR" || return 1
  local pip=(-m pip --disable-pip-version-check)
  if [[ -n "$LIB" ]]; then
    GONCCL_LIBRARY="$LIB" "$PY" "${pip[@]}" wheel -v --no-build-isolation --no-deps --no-index -w "$WHEELDIR" . || return 1
  else
    "$PY" "${pip[@]}" wheel -v --no-build-isolation --no-deps --no-index -w "$WHEELDIR" . || return 1
  fi
  local whl; whl=$(ls "$WHEELDIR"/gonccl-*.whl) || return 1
  bash "$ROOT/scripts/carried-stamp.sh" write "$whl" || return 1  # a later run may carry it (--wheel)
  "$PY" "${pip[@]}" install --no-deps --no-index --force-reinstall "$whl" || return 1
  local keep="$ROOT/build/gpu-check/wheel"  # survives on the machine between runs
  if [[ "$(abspath "$keep")" != "$WHEELDIR" ]]; then
    rm -rf "$keep" && mkdir -p "$keep" && cp "$whl" "$whl.stamp" "$keep/"
  fi
}
install_wheel() {
  "$PY" -m pip --disable-pip-version-check install --no-deps --no-index --force-reinstall "$WHEEL"
}

capi_link() { bash "$ROOT/tests/capi/link-realcuda.sh" "$CAPI" "$libcuda_dir" "$PKG"; }

capi_ranks() {  # NRANKS [WRAPPER...]: the C test on NRANKS ranks, each under WRAPPER
  local n="$1" pids=() rc=0; shift
  rm -f "$CAPI/id.$n"
  for ((r = 0; r < n; r++)); do
    GONCCL_CUDA_LIBRARY="$CAPI/librealcuda.so" GONCCL_DEBUG=INFO GONCCL_DEBUG_SUBSYS=INIT \
      "$@" "$CAPI/cuda_capi_test" "$r" "$n" "$CAPI/id.$n" > >(sed "s/^/[rank $r] /") 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  return $rc
}

# The fake driver built as a libcuda.so.1 stand-in (a dry run links and runs against it).
standin() {
  mkdir -p "$WORK/standin" &&
    gcc -shared -fPIC -O1 -Wall -Werror -pthread -Wl,-soname,libcuda.so.1 -Wl,-Bsymbolic \
      -o "$WORK/standin/libcuda.so.1" "$ROOT"/tests/fakecuda/*.c "$ROOT"/tests/fakecuda/*.cc
}

stream() { torchrun 2 "$ROOT/scripts/gpu_stream_check.py" "$@"; }

ddp() { OMP_NUM_THREADS=1 torchrun "$1" "$ROOT/examples/$2"; }  # NPROC SCRIPT

# The test files whose CUDA cases run on torch over a real GPU (the C ABI and fake-driver
# tests, which build with Go and gcc, run in CI); GONCCL_CHECK_PYTEST_FILES overrides.
PYTEST_FILES="${GONCCL_CHECK_PYTEST_FILES:-tests/test_collectives.py tests/test_ops_reference.py tests/test_groups_hooks.py tests/test_differential.py tests/test_contract.py tests/test_cuda_build.py tests/test_windows.py}"
# The device path's run (GONCCL_DEVICE_PATH=1): its CUDA cases at 2 and 3 ranks.
PYTEST_DEVICE_FILES="${GONCCL_CHECK_PYTEST_DEVICE_FILES:-tests/test_collectives.py tests/test_differential.py}"
# Part A's pytest cases: one worker run of each class that crashed on the last real run
# (the 3-rank collective, ops, groups/hooks and differential runs: every CUDA case of
# those runs, since a case runs its worker's whole script; the one-GPU shared-by-two-ranks
# case), which part B leaves out ...
SMOKE_K='(cuda and ws3 and not ring) or one_device_shared_by_two_ranks'
SMOKE_FILES="tests/test_collectives.py tests/test_ops_reference.py tests/test_groups_hooks.py tests/test_differential.py tests/test_cuda_build.py"
REST_K='cuda and not (ws3 and not ring) and not one_device_shared_by_two_ranks'
# ... and, with GONCCL_DEVICE_PATH=1, of each device-path feature: the 2-rank collective
# run (descriptor checks, watcher, barrier) and the 2-rank ops run (send/recv: p2p;
# alltoallv: alltoall_uneven), which part B's device run leaves out.
SMOKE_DEVICE_K='cuda and ws2 and not ring'
SMOKE_DEVICE_FILES="tests/test_collectives.py tests/test_ops_reference.py"
REST_DEVICE_K='cuda and (ws3 or (ws2 and differential))'
pytest_cuda() {  # NAME ARGS... : pytest's CUDA cases ARGS name, in parallel when xdist is there
  local xdist=() name="$1"; shift
  if pyq 'import xdist' >/dev/null; then xdist=(-n "$JOBS" --dist loadgroup); else echo "gpu-check: no pytest-xdist: the cases run one at a time"; fi
  cd "$ROOT" && "$PY" -m pytest -v -p no:cacheprovider --timeout 180 -rfE "${xdist[@]}" \
    --junitxml="$LOGS/$name.xml" "$@"
}

CAPI="$WORK/capi"
mkdir -p "$CAPI"
libcuda_dir="$(ldconfig -p 2>/dev/null | awk '/libcuda\.so\.1 .*x86-64/ { print $NF; exit }' | xargs -r dirname)"
[[ $DRY -eq 1 ]] && libcuda_dir="$WORK/standin"
export ROOT PY WORK LOGS CAPI LIB WHEEL WHEELDIR DRY JOBS gpus libcuda_dir PYTEST_FILES PYTEST_DEVICE_FILES
export -f abspath pyq free_port torchrun build install_wheel capi_link capi_ranks standin stream ddp pytest_cuda
echo "gpu-check: $([[ $DRY -eq 1 ]] && echo 'DRY RUN: ')report in $REPORT"
PLAN_OK=1
if [[ $DRY -eq 1 ]]; then
  echo "gpu-check: the plan on a machine with one GPU (a dry run runs those marked 'in a dry run', the stream checker and ddp_simple on CPU ranks):"
  plans 1 >"$LOGS/plan.md" || PLAN_OK=0
else
  echo "gpu-check: the plan on this machine:"
  plans "$gpus" >"$LOGS/plan.md" || PLAN_OK=0
fi
sed 's/^/  /' "$LOGS/plan.md"
CARRY_OK=1
if [[ -z "$ONLY" || -n "$LIB" || -n "$WHEEL" ]]; then
  echo "gpu-check: what to carry to the GPU machine (built here, checked against this tree):"
  carry_plan >"$LOGS/carry.md" || CARRY_OK=0
  sed 's/^/  /' "$LOGS/carry.md"
fi

# ---- build or install ----
pkg_dir() { pyq 'import gonccl, os; print(os.path.dirname(gonccl.__file__))'; }
PKG=""
[[ -n "$ONLY" && -z "$WHEEL" ]] && ! selected build && PKG="$(pkg_dir)"
if [[ -n "$WHEEL" ]] && ! stale="$("$ROOT/scripts/carried-stamp.sh" check "$WHEEL" 2>&1)"; then
  record install-wheel fail 0 "--wheel: $stale"
elif [[ -n "$WHEEL" ]]; then
  always install-wheel - install_wheel
elif [[ -n "$PKG" ]]; then
  skip build "--only leaves it out and gonccl is installed: $PKG"
elif [[ -z "$LIB" ]] && ! command -v go >/dev/null; then
  record build fail 0 "no Go on PATH and no --library/GONCCL_LIBRARY: build libgonccl.so elsewhere (make lib) and pass it"
elif [[ -n "$LIB" && ! -f "$LIB" ]]; then
  record build fail 0 "--library $LIB: no such file"
elif [[ -n "$LIB" ]] && ! stale="$("$ROOT/scripts/carried-stamp.sh" check "$LIB" 2>&1)"; then
  record build fail 0 "--library: $stale"
else
  always build check_build build  # whenever it is needed
fi
[[ -z "$PKG" ]] && PKG="$(pkg_dir)"
export PKG
if [[ $FAIL -gt 0 ]]; then
  PKG=""
  why="the build or install failed"
elif [[ -z "$PKG" ]]; then
  why="gonccl is not importable"
fi

if [[ -n "$PKG" ]]; then
  run import check_import bash -c 'cd "$WORK" && "$PY" -c "$1"' bash \
    'import gonccl, torch; from gonccl import _C; print("gonccl", gonccl.version(), "from", gonccl.__file__, "cuda_support", _C.cuda_support(), "torch", torch.__version__)'
else
  selected import && skip import "$why"
fi

# ---- the reduction kernels on GPU 0: the prebuilt test binary (the GPU machine has no Go) ----
if [[ ! -x "$KTEST" ]] && command -v go >/dev/null && selected kernels-gpu; then
  mkdir -p "$(dirname "$KTEST")" &&
    (cd "$ROOT" && CGO_ENABLED=1 go test -c -o "$KTEST" ./cuda/kernels &&
      scripts/carried-stamp.sh write "$KTEST") >"$LOGS/kernels-gpu-build.log" 2>&1
fi
if [[ -x "$KTEST" ]] && ! stale="$("$ROOT/scripts/carried-stamp.sh" check "$KTEST" 2>&1)"; then
  selected kernels-gpu && record kernels-gpu fail 0 "$stale"
elif [[ -x "$KTEST" ]]; then
  run kernels-gpu check_kernels "$KTEST" -test.run '^TestKernelsOnARealGPU$' -test.v -test.count=1
else
  selected kernels-gpu && record kernels-gpu fail 0 "no test binary at $KTEST: build it where Go is (make gpu-check-kernels) and bring build/gpu-check/kernels-gpu.test, or pass --kernels-test"
fi

# ---- the crash tracer, in every rank from here on ----
# tests/crashtrace/crashtrace.c, preloaded: a rank that dies of SIGSEGV/SIGBUS/SIGFPE/
# SIGILL/SIGABRT prints the signal, the faulting instruction, the native backtrace and
# every Python thread's traceback; GOTRACEBACK=crash makes a fault in Go code print every
# goroutine. The pytest harness preloads the same file into the ranks it starts.
CRASHTRACE="$WORK/crashtrace.so"
if gcc -shared -fPIC -O1 -o "$CRASHTRACE" "$ROOT/tests/crashtrace/crashtrace.c" -ldl >"$LOGS/crashtrace.log" 2>&1; then
  export LD_PRELOAD="$CRASHTRACE${LD_PRELOAD:+ $LD_PRELOAD}" GOTRACEBACK=crash
  echo "gpu-check: crash tracer $CRASHTRACE preloaded in every rank (GOTRACEBACK=crash)"
else
  record crashtrace fail 0 "tests/crashtrace/crashtrace.c did not build (crashtrace.log): crashes would not say where"
  CRASHTRACE=""
fi

# ---- the C ABI on CUDA buffers, through realcuda.c ----
capi_ok=0
if [[ -z "$PKG" ]]; then
  selected capi && skip capi "$why"
elif [[ $DRY -eq 1 ]] && selected capi && ! standin >"$LOGS/standin.log" 2>&1; then
  record capi-link fail 0 "building the fake driver as libcuda.so.1 failed (standin.log)"
elif [[ -z "$libcuda_dir" ]]; then
  selected capi && skip capi "no libcuda.so.1 in ldconfig's cache (no NVIDIA driver?)"
else
  selected capi && always capi-link - capi_link  # what the other capi steps run
  [[ -x "$CAPI/cuda_capi_test" ]] && capi_ok=1
fi
if [[ $capi_ok -eq 1 ]]; then
  run capi-cuda-2ranks check_capi capi_ranks 2 env GONCCL_DEVICE_PATH=0
  # On one GPU the C test's device 1 is GPU 0 too: 2 ranks share it.
  PAIR=shared-gpu
  [[ $gpus -ge 2 ]] && PAIR=gpu-per-rank
  [[ $gpus -ge 2 ]] && nvidia-smi nvlink -s 2>/dev/null | grep -q 'GB/s' && PAIR=gpu-per-rank-nvlink
  PATH_OF[capi-cuda-2ranks]="$PAIR staged"
  if [[ $DRY -eq 1 ]]; then
    selected capi && skip capi-cuda-3ranks "dry run: 2 ranks over the fake stand-in show the link and the hooks work"
    selected capi && skip capi-memcheck "dry run: would run the 2 ranks under compute-sanitizer --tool memcheck"
  else
    run capi-cuda-3ranks check_capi capi_ranks 3 env GONCCL_DEVICE_PATH=0
    PATH_OF[capi-cuda-3ranks]="shared-gpu staged"  # ranks 0 and 2 share device 0
    # The device path (GONCCL_DEVICE_PATH=1): scratch shared by CUDA IPC, copies, kernels
    # and stream memory operations; its INIT line says "device path" or why it staged.
    run capi-cuda-device-2ranks check_capi capi_ranks 2 env GONCCL_DEVICE_PATH=1
    # At 3 ranks every all_reduce and reduce_scatter of 1 KiB or more runs the device ring
    # (the 2-rank run keeps the one-shot).
    run capi-cuda-device-3ranks check_capi capi_ranks 3 env GONCCL_DEVICE_PATH=1 GONCCL_DEVICE_RING_THRESHOLD=1K
    PATH_OF[capi-cuda-device-2ranks]="$PAIR device" PATH_OF[capi-cuda-device-3ranks]="shared-gpu device"
    # The paths auto does not take until proven, by name: the same-GPU path (every rank
    # on device 0) and the pipelined staged path (1 KiB chunks, reductions on the GPU).
    run capi-cuda-samegpu-2ranks check_capi capi_ranks 2 env GONCCL_DEVICE_PATH=samegpu CUDA_CAPI_TEST_ONE_DEVICE=1
    run capi-cuda-pipelined-2ranks check_capi capi_ranks 2 env GONCCL_DEVICE_PATH=0 GONCCL_STAGED_CHUNK=1K
    PATH_OF[capi-cuda-samegpu-2ranks]="shared-gpu same-GPU" PATH_OF[capi-cuda-pipelined-2ranks]="$PAIR staged-pipelined"
    if [[ -n "$SANITIZER" ]]; then
      run capi-memcheck check_memcheck capi_ranks 2 "$SANITIZER" --tool memcheck --report-api-errors no --error-exitcode 7 --print-limit 20
    else
      selected capi-memcheck && skip capi-memcheck "no compute-sanitizer on PATH, next to nvcc or in /usr/local/cuda/bin"
    fi
  fi
fi

# ---- torch: on GPUs, or on CPU ranks in a dry run ----
if [[ $DRY -eq 1 ]]; then
  export CUDA_VISIBLE_DEVICES=""
fi
INIT_ENV=(env GONCCL_DEBUG=INFO GONCCL_DEBUG_SUBSYS=INIT)
if [[ -z "$PKG" ]]; then
  selected stream && skip stream "$why"
elif [[ $DRY -eq 1 ]]; then
  if selected stream-cpu || selected stream; then
    LIMIT[stream-cpu]=300
    always stream-cpu check_stream "${INIT_ENV[@]}" bash -c 'stream --device cpu --size-mib 4 --iters 3 --small-mib 1 --small-iters 2'
    skip stream-cuda "dry run: would run scripts/gpu_stream_check.py --device cuda (256 MiB x50, all_gather list, chained async) on 2 ranks (one per GPU on 2+ GPUs, else both on GPU 0), and again with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
  fi
elif [[ $gpus -eq 0 ]]; then
  selected stream && skip stream-cuda "torch sees no GPU"
else
  run stream-cuda check_stream "${INIT_ENV[@]}" bash -c 'stream --device cuda'
  run stream-cuda-expandable check_stream "${INIT_ENV[@]}" PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True \
    bash -c 'stream --device cuda'
fi

# ---- the lecture's examples ----
if [[ -z "$PKG" ]]; then
  selected ddp && skip ddp "$why"
elif [[ $DRY -eq 1 ]]; then
  if selected ddp-simple-cpu || selected ddp; then
    LIMIT[ddp-simple-cpu]=300
    ddp_simple_ranks=2
    always ddp-simple-cpu check_ddp_simple ddp 2 ddp_simple.py
    skip ddp-gpu "dry run: would run examples/ddp_simple.py and ddp_example.py under torchrun with 2 ranks sharing GPU 0 (CUDA_VISIBLE_DEVICES=0), and with one rank per GPU on 2+ GPUs"
  fi
elif [[ $gpus -eq 0 ]]; then
  selected ddp && skip ddp-gpu "torch sees no GPU"
else
  ddp_simple_ranks=2
  run ddp-simple-shared-gpu0 check_ddp_simple env CUDA_VISIBLE_DEVICES=0 bash -c 'ddp 2 ddp_simple.py'
  run ddp-example-shared-gpu0 check_ddp_example env CUDA_VISIBLE_DEVICES=0 bash -c 'ddp 2 ddp_example.py'
  PATH_OF[ddp-simple-shared-gpu0]="shared-gpu staged" PATH_OF[ddp-example-shared-gpu0]="shared-gpu staged"
  # The default beside each path by name: one rank (staged; the copy), two ranks sharing
  # GPU 0 (the same-GPU path, the device path, pipelined staging in 1 KiB chunks).
  ddp_simple_ranks=1
  run ddp-simple-one-rank check_ddp_simple env CUDA_VISIBLE_DEVICES=0 bash -c 'ddp 1 ddp_simple.py'
  run ddp-simple-one-rank-copy check_ddp_simple env CUDA_VISIBLE_DEVICES=0 GONCCL_DEVICE_PATH=samegpu bash -c 'ddp 1 ddp_simple.py'
  ddp_simple_ranks=2
  run ddp-simple-shared-gpu0-samegpu check_ddp_simple env CUDA_VISIBLE_DEVICES=0 GONCCL_DEVICE_PATH=samegpu bash -c 'ddp 2 ddp_simple.py'
  run ddp-simple-shared-gpu0-device check_ddp_simple env CUDA_VISIBLE_DEVICES=0 GONCCL_DEVICE_PATH=1 bash -c 'ddp 2 ddp_simple.py'
  run ddp-simple-shared-gpu0-pipelined check_ddp_simple env CUDA_VISIBLE_DEVICES=0 GONCCL_STAGED_CHUNK=1K bash -c 'ddp 2 ddp_simple.py'
  PATH_OF[ddp-simple-one-rank]="one-rank staged" PATH_OF[ddp-simple-one-rank-copy]="one-rank same-GPU"
  PATH_OF[ddp-simple-shared-gpu0-samegpu]="shared-gpu same-GPU" PATH_OF[ddp-simple-shared-gpu0-device]="shared-gpu device"
  PATH_OF[ddp-simple-shared-gpu0-pipelined]="shared-gpu staged-pipelined"
  if [[ $gpus -ge 2 ]]; then
    ddp_simple_ranks=$gpus
    run ddp-simple-per-gpu check_ddp_simple ddp "$gpus" ddp_simple.py
    run ddp-example-per-gpu check_ddp_example ddp "$gpus" ddp_example.py
    PATH_OF[ddp-simple-per-gpu]="$PAIR staged" PATH_OF[ddp-example-per-gpu]="$PAIR staged"
  else
    selected ddp && skip ddp-per-gpu "one GPU: the 2 ranks sharing GPU 0 above are the multi-rank run"
  fi
fi

# ---- the benchmark on CUDA tensors (trimmed: x16 steps, 5 iterations) ----
# Three backends, named (the bench's default on CUDA tensors is five): on one GPU, where the
# ranks share it, gonccl's staged and same-GPU paths and gloo; on 2+ GPUs, one rank per
# GPU, its staged and device paths and nccl.
NP=$((gpus >= 2 ? gpus : 2))
BACKENDS=gonccl-staged,gonccl-samegpu,gloo
[[ $gpus -ge 2 ]] && BACKENDS=gonccl-staged,gonccl-device,nccl
BENCH=(-m gonccl.bench all_reduce --device cuda -b 16 -e 256M -f 16 -n 5 -w 2 -c 1 --backends "$BACKENDS")
SMALL=(-m gonccl.bench all_reduce --device cuda -b 8 -e 4K -f 8 -n 200 -w 20 -c 1 -z 1 --backends "$BACKENDS")
# Under MPS (if the machine lets us start its daemon): the cost model's choice among every
# path (GONCCL_DEVICE_PATH=model: the device path when every rank sharing the GPU is an MPS
# client; auto takes it only once a GPU check has proven it there) and the same-GPU path,
# 16 B and 256 MiB.
MPSB=(-m gonccl.bench all_reduce --device cuda -b 16 -e 256M -f 16777216 -n 5 -w 2 -c 1 --backends gonccl-model,gonccl-samegpu)
DDPB=(-m gonccl.bench ddp --device cuda -n 5 -w 2 --backends "$BACKENDS")
if [[ $DRY -eq 1 ]]; then
  selected bench && skip bench "dry run: would run $PY ${BENCH[*]} -np 2 (on N>=2 GPUs -np N --backends gonccl-staged,gonccl-device,nccl, then 256 MiB with GONCCL_DEVICE_SCRATCH=256M), the DDP step (${DDPB[*]}), small ops blocking (${SMALL[*]}), and under MPS if nvidia-cuda-mps-control -d starts (${MPSB[*]})"
elif [[ -z "$PKG" ]]; then
  selected bench && skip bench "$why"
elif [[ $gpus -eq 0 ]]; then
  selected bench && skip bench "torch sees no GPU"
else
  # the paths side by side; on 2+ GPUs then the device path on 256 MiB with 256 MiB of
  # scratch (one round; the default 8 MiB takes a round per 8 MiB)
  run bench-paths check_bench bash -c 'cd "$WORK" && GONCCL_DEBUG=INFO GONCCL_DEBUG_SUBSYS=INIT "$PY" "$@" --json "$LOGS/bench-paths.json" &&
    if [[ $gpus -ge 2 ]]; then GONCCL_DEVICE_SCRATCH=256M "$PY" "$@" -b 256M --backends gonccl-device --json "$LOGS/bench-device-256m.json"; fi' bash "${BENCH[@]}" -np "$NP"
  # MPS: start a daemon of our own (pipe and log directories of ours: no root needed),
  # rerun gonccl's rows under it, stop it (also when the step is killed at its limit)
  run bench-mps check_mps bash -c '
    cd "$WORK"
    ctl=$(command -v nvidia-cuda-mps-control) || { echo "MPS: not started: no nvidia-cuda-mps-control on PATH"; exit 0; }
    export CUDA_MPS_PIPE_DIRECTORY; CUDA_MPS_PIPE_DIRECTORY=$(mktemp -d /tmp/gonccl-mps.XXXXXX)
    export CUDA_MPS_LOG_DIRECTORY="$LOGS/mps-log"; mkdir -p "$CUDA_MPS_LOG_DIRECTORY"
    if ! "$ctl" -d; then echo "MPS: not started: $ctl -d failed"; exit 0; fi
    trap "echo quit | \"$ctl\"; sleep 1; tail -5 \"$CUDA_MPS_LOG_DIRECTORY/control.log\" 2>/dev/null; rm -rf \"$CUDA_MPS_PIPE_DIRECTORY\"" EXIT
    for _ in $(seq 50); do [[ -p "$CUDA_MPS_PIPE_DIRECTORY/control" ]] && break; sleep 0.1; done
    [[ -p "$CUDA_MPS_PIPE_DIRECTORY/control" ]] || { echo "MPS: not started: no control pipe in $CUDA_MPS_PIPE_DIRECTORY"; exit 0; }
    echo "MPS: daemon started (pipes in $CUDA_MPS_PIPE_DIRECTORY)"
    GONCCL_DEBUG=INFO GONCCL_DEBUG_SUBSYS=INIT timeout -k 3 30 "$PY" "$@" --json "$LOGS/bench-mps.json"' bash "${MPSB[@]}" -np 2
  # the lecture's DDP step (2 ranks sharing GPU 0, or one rank per GPU): both paths and gloo
  run bench-ddp check_ddp_bench bash -c 'cd "$WORK" && "$PY" "$@"' bash "${DDPB[@]}" -np "$NP"
  # small ops, blocking (-z 1; the rows of bench-paths are queued)
  run bench-small check_bench bash -c 'cd "$WORK" && "$PY" "$@"' bash "${SMALL[@]}" -np "$NP"
fi

# ---- the test suite's CUDA cases (part B, after the benchmarks): the smoke run, then the rest (--extended) ----
if [[ $DRY -eq 1 ]]; then
  selected pytest-smoke && skip pytest-smoke "dry run: would run $PY -m pytest -v -n $JOBS --dist loadgroup --timeout 180 -k '$SMOKE_K' $SMOKE_FILES, then with GONCCL_DEVICE_PATH=1 -k '$SMOKE_DEVICE_K' $SMOKE_DEVICE_FILES"
  selected pytest-cuda && skip pytest-cuda "dry run: would run $PY -m pytest -v -k '$REST_K' -n $JOBS --dist loadgroup --timeout 180 $PYTEST_FILES (the collective, p2p, groups/hooks, contract and differential tests on CUDA tensors against Gloo), then with GONCCL_DEVICE_PATH=1 -k '$REST_DEVICE_K' $PYTEST_DEVICE_FILES"
elif [[ -z "$PKG" ]]; then
  selected pytest && skip pytest "$why"
elif [[ $gpus -eq 0 ]]; then
  selected pytest && skip pytest "torch sees no GPU"
elif ! pyq 'import pytest, pytest_timeout' >/dev/null; then
  selected pytest && skip pytest "pytest and pytest-timeout are not installed for $PY (no network here: install them beforehand)"
else
  # shellcheck disable=SC2086
  run pytest-smoke check_pytest pytest_cuda pytest-smoke -k "$SMOKE_K" $SMOKE_FILES
  # shellcheck disable=SC2086
  run pytest-smoke-device check_pytest env GONCCL_DEVICE_PATH=1 bash -c 'pytest_cuda "$@"' bash pytest-smoke-device \
    -k "$SMOKE_DEVICE_K" $SMOKE_DEVICE_FILES
  # shellcheck disable=SC2086
  run pytest-cuda check_pytest pytest_cuda pytest-cuda -k "$REST_K" $PYTEST_FILES
  # shellcheck disable=SC2086
  run pytest-cuda-device check_pytest env GONCCL_DEVICE_PATH=1 bash -c 'pytest_cuda "$@"' bash pytest-cuda-device \
    -k "$REST_DEVICE_K" $PYTEST_DEVICE_FILES
  for f in pytest-smoke pytest-smoke-device pytest-cuda pytest-cuda-device; do
    if [[ -f "$LOGS/$f.xml" ]]; then
      "$PY" "$ROOT/scripts/pytest_failures.py" "$LOGS/$f.xml" >"$LOGS/$f-failures.md" 2>&1
    fi
  done
fi

[[ $PLAN_OK -eq 0 ]] && record plan fail 0 "a part's steps do not fit its budget, or both parts one call (the plan)"
[[ $DRY -eq 1 && $CARRY_OK -eq 0 ]] && record carry fail 0 "a carried file is missing, stale or too large (the carry plan)"

# paths_table: the report's paths table: per setup and path the steps ran, "passed" when
# every one of them passed, "failed" when one failed (skipped steps do not count).
# internal/route's test of the proven table reads it: keep the header as it is.
paths_table() {
  [[ $DRY -eq 1 ]] && return  # the fake standing in for a GPU proves no path
  local -A res=()
  local r n st key
  for r in "${RESULTS[@]}"; do
    IFS='|' read -r n st _ _ <<<"$r"
    key="${PATH_OF[$n]:-}"
    [[ -z "$key" || "$st" == skip ]] && continue
    if [[ "$st" == pass ]]; then
      [[ "${res[$key]:-}" == failed ]] || res[$key]=passed
    else
      res[$key]=failed
    fi
  done
  [[ ${#res[@]} -eq 0 ]] && return
  echo
  echo "## Paths"
  echo
  echo "| setup | path | result |"
  echo "|---|---|---|"
  for key in $(printf '%s\n' "${!res[@]}" | tr ' ' '/' | sort); do
    echo "| ${key%%/*} | ${key#*/} | ${res[${key/\// }]} |"
  done
}

# ---- the report ----
{
  echo "# gonccl GPU check$([[ $DRY -eq 1 ]] && echo ' (dry run: no GPU used)')"
  echo
  machine
  echo
  echo "**$PASS passed, $FAIL failed, $SKIP skipped** in $((SECONDS - T0))s"
  echo
  echo "| step | result | seconds | why |"
  echo "|---|---|---|---|"
  for r in "${RESULTS[@]}"; do
    IFS='|' read -r n s t why <<<"$r"
    echo "| $n | $s | $t | ${why//|//} |"
  done
  echo
  echo "## The plan$([[ $DRY -eq 1 ]] && echo ' on one GPU')"
  echo
  cat "$LOGS/plan.md"
  if [[ -f "$LOGS/carry.md" ]]; then
    echo
    echo "## What to carry"
    echo
    cat "$LOGS/carry.md"
  fi
  paths_table
  initlog=$(ls "$LOGS"/stream-cuda.log "$LOGS"/stream-cpu.log 2>/dev/null | head -1)
  if [[ -n "$initlog" ]]; then
    echo
    echo "## INIT lines ($(basename "$initlog" .log))"
    echo '```'
    grep 'GONCCL INFO INIT' "$initlog" | head -60
    echo '```'
  fi
  for f in pytest-smoke pytest-smoke-device pytest-cuda pytest-cuda-device; do
    if [[ -s "$LOGS/$f-failures.md" ]]; then
      echo
      echo "## $f failures (first lines of each)"
      echo
      cat "$LOGS/$f-failures.md"
    fi
  done
  for r in "${RESULTS[@]}"; do  # in the order the steps ran
    IFS='|' read -r n s _ _ <<<"$r"
    f="$LOGS/$n.log"
    [[ -f "$f" ]] || continue
    echo
    echo "## $n"
    echo '```'
    head -2 "$f"
    echo "..."
    tail -"$([[ $s == fail ]] && echo 40 || echo 12)" "$f"
    echo '```'
  done
} >"$REPORT"
# One file with every step's log (the device tool brings back only a few files per call).
tar czf "${REPORT%.md}.logs.tgz" --exclude=work -C "$(dirname "$LOGS")" "$(basename "$LOGS")" 2>/dev/null
echo "gpu-check: $PASS passed, $FAIL failed, $SKIP skipped in $((SECONDS - T0))s; report: $REPORT"
[[ $FAIL -eq 0 ]]

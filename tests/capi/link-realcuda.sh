#!/usr/bin/env bash
# link-realcuda.sh: builds tests/capi/cuda_capi_test.c against tests/capi/realcuda.c (the
# fake driver's test hooks on the real driver API) and a libcuda.so.1, with the one link
# line both places use: scripts/gpu-check.sh on a GPU machine (the NVIDIA driver's
# libcuda.so.1) and CI (tests/test_realcuda_link.py: the fake driver built as a
# libcuda.so.1 stand-in). Everything links with -Wl,--no-undefined, so a driver entry
# point realcuda.c calls that the libcuda lacks, or a name the test uses that nobody
# defines, fails here and not on a lent GPU.
#
#   tests/capi/link-realcuda.sh OUT_DIR LIBCUDA_DIR GONCCL_PACKAGE_DIR
#
# LIBCUDA_DIR holds libcuda.so.1; GONCCL_PACKAGE_DIR is the installed gonccl package
# (libgonccl.so and include/gonccl.h). Writes OUT_DIR/realcuda.o, librealcuda.so,
# cuda_capi_test and hooks_selftest (the hooks checked alone; CI runs it). Before linking, checks that realcuda.o defines every hook that
# tests/fakecuda/fakecuda.h declares (the list is read from the header, comments
# stripped), and after linking that librealcuda.so exports them (nm -D).
set -euo pipefail

if [[ $# -ne 3 ]]; then
  echo "usage: $0 OUT_DIR LIBCUDA_DIR GONCCL_PACKAGE_DIR" >&2
  exit 2
fi
OUT="$1" LIBCUDA_DIR="$2" PKG="$3"
HERE="$(cd "$(dirname "$0")" && pwd)"
FAKE="$HERE/../fakecuda"
CC="${CC:-gcc}"
mkdir -p "$OUT"
[[ -e "$LIBCUDA_DIR/libcuda.so.1" ]] || { echo "link-realcuda: no libcuda.so.1 in $LIBCUDA_DIR" >&2; exit 1; }
[[ -e "$PKG/libgonccl.so" ]] || { echo "link-realcuda: no libgonccl.so in $PKG" >&2; exit 1; }

# The hooks fakecuda.h declares: every fakecuda* name followed by "(", outside comments.
hooks() {
  "$CC" -fpreprocessed -dD -E -P -x c "$FAKE/fakecuda.h" | grep -oE '\bfakecuda[A-Za-z0-9_]*[[:space:]]*\(' |
    tr -d '( \t' | sort -u
}

# check_hooks NM_ARGS... FILE: every hook is a defined global function in FILE.
check_hooks() {
  local file="${*: -1}" missing
  missing=$(comm -23 <(hooks) <(nm "$@" | awk '$2 == "T" { print $3 }' | sed 's/@.*//' | sort -u))
  if [[ -n "$missing" ]]; then
    echo "link-realcuda: $(basename "$file") does not define these hooks of tests/fakecuda/fakecuda.h:" $missing >&2
    return 1
  fi
  echo "link-realcuda: $(basename "$file") defines all $(hooks | wc -l) hooks of fakecuda.h"
}

set -x
"$CC" -c -std=c11 -D_DEFAULT_SOURCE -Wall -Werror -O1 -fPIC -I"$FAKE" -o "$OUT/realcuda.o" "$HERE/realcuda.c"
"$CC" -c -std=c11 -D_DEFAULT_SOURCE -Wall -Werror -O1 -I"$PKG/include" -I"$FAKE" -I"$HERE" \
  -o "$OUT/cuda_capi_test.o" "$HERE/cuda_capi_test.c"
{ set +x; } 2>/dev/null
check_hooks -g --defined-only "$OUT/realcuda.o"
set -x
"$CC" -shared -o "$OUT/librealcuda.so" "$OUT/realcuda.o" -Wl,--no-undefined \
  -L"$LIBCUDA_DIR" -l:libcuda.so.1 -Wl,-rpath,"$LIBCUDA_DIR" -ldl -lpthread
"$CC" -o "$OUT/cuda_capi_test" "$OUT/cuda_capi_test.o" -Wl,--no-undefined \
  -L"$OUT" -lrealcuda -Wl,-rpath,"$OUT" -L"$PKG" -lgonccl -Wl,-rpath,"$PKG" \
  -L"$LIBCUDA_DIR" -l:libcuda.so.1 -Wl,-rpath,"$LIBCUDA_DIR" -lpthread -lm
"$CC" -std=c11 -D_DEFAULT_SOURCE -Wall -Werror -O1 -I"$FAKE" -o "$OUT/hooks_selftest" "$HERE/hooks_selftest.c" \
  -Wl,--no-undefined -L"$OUT" -lrealcuda -Wl,-rpath,"$OUT" -L"$LIBCUDA_DIR" -l:libcuda.so.1 -Wl,-rpath,"$LIBCUDA_DIR"
{ set +x; } 2>/dev/null
check_hooks -D --defined-only "$OUT/librealcuda.so"

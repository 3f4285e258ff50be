#!/usr/bin/env bash
# carried-stamp.sh: ties a file built where Go is (libgonccl.so, the kernels' test binary)
# to the sources it was built from, by content, so that the GPU check refuses a stale one.
#
#   scripts/carried-stamp.sh write FILE...   after building FILE: writes FILE.stamp
#   scripts/carried-stamp.sh check FILE...   before using FILE: exit 1, saying why, if
#                                            FILE.stamp is missing, FILE changed since, or
#                                            the sources differ from those it was built from
#
# The sources' hash is the sha256 of the sorted "sha256  path" lines of every *.go file
# of the tree (build/ and .git/ left out), go.mod, go.sum, capi/gonccl.h and the kernels'
# fatbin: what `make lib` and `make gpu-check-kernels` compile. A wheel (*.whl, built by
# the GPU check's build step against the GPU machine's torch) also covers what it
# packages: csrc/, setup.py, pyproject.toml and python/gonccl/. No git needed (the GPU
# machine gets a copy of the tree).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

sources_hash() {  # [wheel]
  (cd "$ROOT" && { find . \( -path ./build -o -path ./.git -o -path ./dist \) -prune -o -name '*.go' -print;
    ls ./go.mod ./go.sum ./capi/gonccl.h ./cuda/kernels/*.fatbin
    if [[ "${1:-}" == wheel ]]; then
      ls ./setup.py ./pyproject.toml
      find ./csrc ./python/gonccl -type f \( -name '*.py' -o -name '*.cpp' -o -name '*.cc' -o -name '*.h' \) -print
    fi; } | LC_ALL=C sort | xargs -d '\n' sha256sum) |
    sha256sum | cut -d' ' -f1
}

file_hash() { sha256sum "$1" | cut -d' ' -f1; }

cmd="${1:-}"
shift || true
[[ "$cmd" == write || "$cmd" == check ]] && [[ $# -gt 0 ]] || {
  echo "usage: $0 write|check FILE..." >&2
  exit 2
}
src_go="$(sources_hash)"
src_wheel=""
bad=0
for f in "$@"; do
  src="$src_go"
  if [[ "$f" == *.whl ]]; then
    [[ -z "$src_wheel" ]] && src_wheel="$(sources_hash wheel)"
    src="$src_wheel"
  fi
  if [[ "$cmd" == write ]]; then
    printf 'sources %s\nsha256 %s\n' "$src" "$(file_hash "$f")" >"$f.stamp"
    continue
  fi
  if [[ ! -f "$f" ]]; then
    echo "carried-stamp: $f: no such file"
    bad=1
  elif [[ ! -f "$f.stamp" ]]; then
    echo "carried-stamp: $f has no stamp ($f.stamp): build it with make lib / make gpu-check-kernels, which write one"
    bad=1
  else
    want_src="$(sed -n 's/^sources //p' "$f.stamp")"
    want_file="$(sed -n 's/^sha256 //p' "$f.stamp")"
    if [[ "$(file_hash "$f")" != "$want_file" ]]; then
      echo "carried-stamp: $f changed since it was built (its sha256 is not the stamp's)"
      bad=1
    elif [[ "$src" != "$want_src" ]]; then
      echo "carried-stamp: $f is stale: it was built from other sources (sources $want_src) than this tree's ($src); rebuild it here and carry it again"
      bad=1
    else
      echo "carried-stamp: $f matches this tree's sources ($src)"
    fi
  fi
done
exit $bad

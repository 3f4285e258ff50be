#!/bin/bash
# The A/B of this directory, run from the repository root on a quiet machine:
#   bench/results/cpu-2026-12-08-crowded/run.sh OLD_LIB_DIR NEW_LIB_DIR OLD_VENV NEW_VENV
# OLD/NEW_LIB_DIR hold a libgonccl.so each (before: 409a3e7; after: this commit's build);
# the venvs have gonccl installed with those libraries (for bench/targets.py).
set -u
old=$1; new=$2; oldv=$3; newv=$4
out=$(dirname "$0")
log() { echo "$(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg): $*" | tee -a "$out/log"; }
for r in 1 2 3; do
  for lib in old new; do
    d=$old; [ $lib = new ] && d=$new
    log "256 processes, round $r, $lib"
    python3 bench/scale/scale.py -np 256 --loop 10 --lib "$d/libgonccl.so" --json "$out/scale256-$lib$r.json" 2>&1 | tail -2 | tee -a "$out/log"
  done
done
for r in 1 2 3; do
  for lib in old new; do
    d=$old; [ $lib = new ] && d=$new
    log "16 hosts x 16 ranks, round $r, $lib"
    python3 bench/scale/scale.py --hosts 16 -np 256 --loop 10 --lib "$d/libgonccl.so" --json "$out/hosts16-$lib$r.json" 2>&1 | tail -2 | tee -a "$out/log"
  done
done
for r in 1 2; do
  for lib in old new; do
    v=$oldv; [ $lib = new ] && v=$newv
    log "bench/targets.py --skip-scale --rounds 3, round $r, $lib"
    "$v/bin/python" bench/targets.py --skip-scale --rounds 3 --out "$out/targets-$lib$r" > "$out/targets-$lib$r.log" 2>&1
    tail -30 "$out/targets-$lib$r/targets.md" >> "$out/log"
  done
done
log done

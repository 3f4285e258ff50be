#!/bin/bash
# Alternating A/B at 2-8 ranks: new (HEAD) vs base (d20a1cb) libgonccl.
out=$(dirname $0)/ab-2-8-ranks-before-gosched-fix; mkdir -p $out
VLIB=/work/venv-cores48/lib/python3.11/site-packages/gonccl/libgonccl.so
cp $VLIB $out/venv-orig.so
PY=/work/venv-cores48/bin/python
cd /work/wt-cores48
for round in 1 2 3; do
  if [ $round = 2 ]; then order="base new"; else order="new base"; fi
  for lib in $order; do
    tag=${lib}-r$round
    echo "$(date -u +%H:%M:%S) $tag load: $(cut -d' ' -f1-3 /proc/loadavg)" >> $out/log
    $PY bench/scale/scale.py -np 2 4 8 --loop 50 --lib /tmp/cores48/$lib/libgonccl.so --json $out/scale-$tag.json > $out/scale-$tag.txt 2>&1
    cp /tmp/cores48/$lib/libgonccl.so $VLIB
    for np in 2 4; do
      timeout 300 $PY -m gonccl.bench all_reduce -np $np -b 8 -e 64M -f 8 --backends gonccl -n 20 -w 5 --no-memcpy --no-floor > $out/ar$np-$tag.txt 2>&1
    done
    timeout 300 $PY -m gonccl.bench reduce_scatter -np 4 -b 8 -e 16M -f 8 --backends gonccl -n 20 -w 5 --no-memcpy --no-floor > $out/rs4-$tag.txt 2>&1
    echo "$(date -u +%H:%M:%S) $tag done load: $(cut -d' ' -f1-3 /proc/loadavg)" >> $out/log
  done
done
cp $out/venv-orig.so $VLIB
echo ALLDONE >> $out/log

#!/bin/bash
out=$(dirname $0)/ab-2-8-ranks; mkdir -p $out
VLIB=/work/venv-cores48/lib/python3.11/site-packages/gonccl/libgonccl.so
cp $VLIB $out/venv-orig.so
PY=/work/venv-cores48/bin/python
cd /work/wt-cores48
while grep -q ALLDONE /tmp/cores48/final256/log; [ $? -ne 0 ]; do sleep 2; done
for round in 1 2 3; do
  if [ $round = 2 ]; then order="base new"; else order="new base"; fi
  for lib in $order; do
    src=/tmp/cores48/$lib/libgonccl.so; [ $lib = new ] && src=/tmp/cores48/fix/libgonccl.so
    tag=${lib}-r$round
    echo "$(date -u +%H:%M:%S) $tag load: $(cut -d' ' -f1-3 /proc/loadavg)" >> $out/log
    $PY bench/scale/scale.py -np 2 4 8 --loop 200 --lib $src --json $out/scale-$tag.json > $out/scale-$tag.txt 2>&1
    cp $src $VLIB
    timeout 300 $PY -m gonccl.bench all_reduce -np 2 -b 8 -e 64M -f 8 --backends gonccl -n 20 -w 5 --no-memcpy --no-floor > $out/ar2-$tag.txt 2>&1
    echo "$(date -u +%H:%M:%S) $tag done load: $(cut -d' ' -f1-3 /proc/loadavg)" >> $out/log
  done
done
cp $out/venv-orig.so $VLIB
echo ALLDONE >> $out/log

#!/bin/bash
out=$(dirname $0)/ab-torch-2-ranks-small; mkdir -p $out
VLIB=/work/venv-cores48/lib/python3.11/site-packages/gonccl/libgonccl.so
cp $VLIB $out/venv-orig.so
PY=/work/venv-cores48/bin/python
cd /work/wt-cores48
for round in 1 2 3 4; do
  if [ $((round % 2)) = 0 ]; then order="base new"; else order="new base"; fi
  for lib in $order; do
    src=/tmp/cores48/$lib/libgonccl.so; [ $lib = new ] && src=/tmp/cores48/fix/libgonccl.so
    cp $src $VLIB
    echo "$(date -u +%H:%M:%S) $lib-r$round load: $(cut -d' ' -f1-3 /proc/loadavg)" >> $out/log
    timeout 200 $PY -m gonccl.bench all_reduce -np 2 -b 8 -e 32768 -f 8 --backends gonccl -n 200 -w 20 --no-memcpy --no-floor > $out/ar2-$lib-r$round.txt 2>&1
  done
done
cp $out/venv-orig.so $VLIB
echo ALLDONE >> $out/log

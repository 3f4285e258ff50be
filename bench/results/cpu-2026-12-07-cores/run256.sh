#!/bin/bash
# usage: run256.sh LIB LABEL OUTDIR [N]
lib=$1; label=$2; out=$3; n=${4:-256}
mkdir -p $out
cd /work/wt-cores48
echo "$(date -u +%H:%M:%S) $label load: $(cut -d' ' -f1-3 /proc/loadavg)" >> $out/log
/work/venv-cores48/bin/python bench/scale/scale.py -np $n --loop 10 --lib $lib --json $out/$label.json > $out/$label.txt 2>&1
echo "$(date -u +%H:%M:%S) $label done load: $(cut -d' ' -f1-3 /proc/loadavg)" >> $out/log
cat $out/$label.txt >> $out/log

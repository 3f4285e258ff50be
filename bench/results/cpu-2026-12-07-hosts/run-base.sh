#!/usr/bin/env bash
# The bench-hosts recipe with the library built at befa1ef (build/base-site) and the bench tool of this branch.
cd /work/wt-links45b
export PYTHONPATH=$PWD/build/base-site
echo "# start $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)"
for c in all_reduce all_gather reduce_scatter broadcast; do
  echo "# $c: GONCCL_2H_PREFIX=gnbh$$ GONCCL_PYTHON=$PWD/build/venv/bin/python scripts/two-hosts.sh bench $c -b 8 -e 64M -f 4 -n 10 -w 2 -c 1 --backends gonccl,gonccl-noresume,gloo --json build/bench/${c}_hosts.json"
  GONCCL_2H_PREFIX=gnbh$$ GONCCL_PYTHON=$PWD/build/venv/bin/python timeout 1500 scripts/two-hosts.sh bench $c -b 8 -e 64M -f 4 -n 10 -w 2 -c 1 \
    --backends gonccl,gonccl-noresume,gloo --json $PWD/build/bench/${c}_hosts.json || echo "# $c failed: rc=$?"
  echo "# $c done $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)"
done

#!/usr/bin/env bash
# hccl_test sweeps on this host: pycann's hccl backend, its C-style API and raw gloo, 2 and 4 ranks,
# then the 64 MB point of every collective, alternating engines (three rounds) for the overhead figure.
# Usage: [ROUNDS=3] [SWEEP_RANKS="2 4"] bench/hccl_bench.sh [outdir]   (PYTHONPATH: this tree first)
set -euo pipefail
out=${1:-/tmp/hccl_bench}
mkdir -p "$out"
export PYTHONWARNINGS=ignore
for p in ${SWEEP_RANKS-2 4}; do
  for b in gloo hccl hccl-c; do
    python -m pycann.tools.hccl_test all_reduce_test -b 8K -e 64M -f 2 -p $p -n 10 -w 3 --backend $b \
      2>/dev/null | tee "$out/sweep_p${p}_${b}.txt"
  done
done
for round in $(seq 1 ${ROUNDS:-3}); do
  for p in 2 4; do
    for t in ${TESTS:-all_reduce_test all_gather_test reduce_scatter_test broadcast_test alltoall_test}; do
      for b in gloo hccl hccl-c; do
        python -m pycann.tools.hccl_test $t -b 64M -e 64M -p $p -n 5 -w 1 --backend $b 2>/dev/null \
          | awk -v t=$t -v b=$b -v p=$p -v r=$round '$1 ~ /^[0-9]+$/ {print r, p, t, b, $2, $4, $NF}' \
          | tee -a "$out/point64.txt"
      done
    done
  done
done

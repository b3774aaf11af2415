#!/usr/bin/env bash
# Pairs the MLP training benchmark of two kiln builds (for instance the last commit and the working
# tree, each built with -DKILN_BUILD_BENCH=ON): both run back to back for each row, in alternating
# order, PAIRS times; prints each side's median examples/s and the median of the per-pair ratios
# new/old (the machines' speed drifts by up to 2x within a minute: only pairs are comparable).
# Usage: bench/compare_builds.sh OLD_BUILD_DIR NEW_BUILD_DIR
set -euo pipefail
old=$1/bench/bench_mlp_kiln
new=$2/bench/bench_mlp_kiln
pairs=${PAIRS:-7}
median() { printf "%s\n" "$@" | sort -g | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }
printf "%-24s %5s %3s %10s %10s %7s\n" model batch thr old new "new/old"
for threads in ${THREADS:-1 2}; do
  for model in ${MODELS:-784-10 784-500-10 784-1000-1000-1000-10}; do
    for batch in ${BATCHES:-1 10 60 1000}; do
      ratios=(); olds=(); news=()
      for ((r = 0; r < pairs; ++r)); do
        if ((r % 2)); then n=$($new mlp $model $batch $threads); o=$($old mlp $model $batch $threads)
        else o=$($old mlp $model $batch $threads); n=$($new mlp $model $batch $threads); fi
        ratios+=("$(awk -v a="$n" -v b="$o" 'BEGIN{printf "%.3f", a/b}')"); olds+=("$o"); news+=("$n")
      done
      printf "%-24s %5s %3s %10s %10s %7s\n" "$model" "$batch" "$threads" "$(median "${olds[@]}")" "$(median "${news[@]}")" "$(median "${ratios[@]}")"
    done
  done
done

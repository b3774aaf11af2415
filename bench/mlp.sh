#!/usr/bin/env bash
# Builds and runs the MLP benchmark for kiln and LibTorch and prints the table.
# kiln runs with no environment variable; LibTorch gets its best settings (MACHINE-FACTS.md):
# OPENBLAS_CORETYPE=SkylakeX always, OMP_WAIT_POLICY=PASSIVE at 2 threads. Debian's LibTorch calls
# a pthread OpenBLAS that torch::set_num_threads does not limit, so OPENBLAS_NUM_THREADS holds each
# row to the number of threads its label says (without it the "1 thread" row uses both cores).
# The machine's speed drifts, so each configuration alternates kiln and LibTorch runs (REPEATS
# each, default 3) and keeps each side's best.
set -euo pipefail
cd "$(dirname "$0")/.."
repeats=${REPEATS:-3}
bash scripts/setup.sh --bench
cmake -S . -B build-bench -DCMAKE_BUILD_TYPE=Release -DKILN_BUILD_BENCH=ON -DKILN_BUILD_TESTS=OFF -DKILN_BUILD_EXAMPLES=OFF >/dev/null
cmake --build build-bench -j2 >/dev/null
kiln=./build-bench/bench/bench_mlp_kiln
torch=./build-bench/bench/bench_mlp_torch
[[ -x $torch ]] || { echo "LibTorch was not found; install libtorch-dev" >&2; exit 1; }

run_kiln() { env -u OPENBLAS_CORETYPE -u OMP_WAIT_POLICY -u OMP_NUM_THREADS -u OPENBLAS_NUM_THREADS "$kiln" "$@"; }
run_torch() {
  local threads=${!#}
  if [[ $threads == 1 ]]; then
    OPENBLAS_CORETYPE=SkylakeX OPENBLAS_NUM_THREADS=1 "$torch" "$@"
  else
    OPENBLAS_CORETYPE=SkylakeX OPENBLAS_NUM_THREADS="$threads" OMP_WAIT_POLICY=PASSIVE "$torch" "$@"
  fi
}
# best_of HIGHER_IS_BETTER CMD...: the best of $repeats runs for each side, alternating.
measure() {
  local better=$1; shift
  local k t best_k="" best_t=""
  for ((r = 0; r < repeats; ++r)); do
    k=$(run_kiln "$@"); t=$(run_torch "$@")
    best_k=$(awk -v a="$best_k" -v b="$k" -v hi="$better" 'BEGIN { print (a == "" || (hi ? b > a : b < a)) ? b : a }')
    best_t=$(awk -v a="$best_t" -v b="$t" -v hi="$better" 'BEGIN { print (a == "" || (hi ? b > a : b < a)) ? b : a }')
  done
  echo "$best_k $best_t"
}

printf "%-26s %6s %7s %14s %14s %7s\n" model batch threads "kiln ex/s" "LibTorch ex/s" ratio
for threads in 1 2; do
  for model in 784-10 784-500-10 784-1000-1000-1000-10; do
    for batch in 1 10 60 1000; do
      read -r k t < <(measure 1 mlp "$model" "$batch" "$threads")
      printf "%-26s %6s %7s %14s %14s %6.2fx\n" "$model" "$batch" "$threads" "$k" "$t" "$(awk -v a="$k" -v b="$t" 'BEGIN { print a / b }')"
    done
  done
done
printf "\n%-34s %12s %14s %7s\n" "tiny call y = 2x + 1 (10 floats)" "kiln us" "LibTorch us" ratio
for threads in 1 2; do
  read -r k t < <(measure 0 tiny "$threads")
  printf "%-34s %12s %14s %6.2fx\n" "threads $threads" "$k" "$t" "$(awk -v a="$k" -v b="$t" 'BEGIN { print b / a }')"
done

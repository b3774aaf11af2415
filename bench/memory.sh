#!/usr/bin/env bash
# The memory benchmark: kiln's plan for each training step (planned peak against naive and the
# lower bound), then the peak heap memory of the same steps in kiln and in LibTorch, measured the
# same way in one run (bench/heap_counter.cpp counts every allocation of the process). "fresh" is a
# new process: the libraries' one-time set-up (oneDNN's compiled kernels, about 0.4 MB for kiln)
# is counted; "warm" measures a second training loop after a first was dropped. One thread.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --bench
cmake -S . -B build-bench -DCMAKE_BUILD_TYPE=Release -DKILN_BUILD_BENCH=ON -DKILN_BUILD_TESTS=OFF -DKILN_BUILD_EXAMPLES=OFF >/dev/null
cmake --build build-bench -j2 >/dev/null
bin=./build-bench/bench
[[ -x $bin/bench_heap_torch ]] || { echo "LibTorch was not found; install libtorch-dev" >&2; exit 1; }

"$bin/bench_memory"
# OpenBLAS's core type forced only where the CPU has AVX-512: elsewhere the forced SkylakeX kernels
# die with SIGILL (bench/mlp.sh, MACHINE-FACTS.md).
coretype=(-u OPENBLAS_CORETYPE)
if grep -qw avx512f /proc/cpuinfo; then coretype=(OPENBLAS_CORETYPE=SkylakeX); fi
run_torch() { env "${coretype[@]}" OPENBLAS_NUM_THREADS=1 "$bin/bench_heap_torch" "$@"; }
printf "\n%-26s %6s %6s %14s %14s %8s\n" model batch start "kiln bytes" "LibTorch bytes" "kiln/LT"
for model in 784-10 784-500-10 784-1000-1000-1000-10; do
  for batch in 60 1000; do
    for start in fresh warm; do
      extra=(); [[ $start == warm ]] && extra=(warm)
      k=$("$bin/bench_heap_kiln" "$model" "$batch" "${extra[@]}")
      t=$(run_torch "$model" "$batch" "${extra[@]}")
      printf "%-26s %6s %6s %14s %14s %8.3f\n" "$model" "$batch" "$start" "$k" "$t" "$(awk -v a="$k" -v b="$t" 'BEGIN { print a / b }')"
    done
  done
done

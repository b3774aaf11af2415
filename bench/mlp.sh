#!/usr/bin/env bash
# Builds and runs the MLP benchmark for kiln and LibTorch and prints the table.
# kiln runs with no environment variable; LibTorch gets its best settings (MACHINE-FACTS.md):
# OPENBLAS_CORETYPE=SkylakeX where /proc/cpuinfo has avx512f (Debian's OpenBLAS 0.3.21 misdetects
# some AVX-512 CPUs; on a CPU without AVX-512 the forced kernels die with SIGILL, so there OpenBLAS
# detects the core itself), OMP_WAIT_POLICY=PASSIVE at 2 threads. Debian's LibTorch calls a pthread
# OpenBLAS that torch::set_num_threads does not limit, so OPENBLAS_NUM_THREADS holds each row to the
# number of threads its label says (without it the "1 thread" row uses both cores).
# Before the table it prints the CPU and the BLAS the peer calls, with the core type OpenBLAS chose,
# and stops if that BLAS is not OpenBLAS (the reference BLAS is some 20x slower: every ratio would
# be fake). Any run that fails or does not print one positive number stops the script with a
# message naming it; no ratio is printed from a failed run.
# The machine's speed drifts, so each configuration alternates kiln and LibTorch runs (REPEATS
# each, default 3) and keeps each side's best. MODELS, BATCHES and THREADS (space-separated lists,
# default all) choose a part of the table; THREADS also chooses the tiny-call rows.
set -euo pipefail
cd "$(dirname "$0")/.."
repeats=${REPEATS:-3}
read -ra models <<<"${MODELS:-784-10 784-500-10 784-1000-1000-1000-10}"
read -ra batches <<<"${BATCHES:-1 10 60 1000}"
read -ra thread_counts <<<"${THREADS:-1 2}"
kiln=./build-bench/bench/bench_mlp_kiln
torch=./build-bench/bench/bench_mlp_torch

bench_name=mlp.sh
torch_blas=$torch
# shellcheck source=bench/peer.sh
source bench/peer.sh
prepare_bench
check_peer

printf "%-26s %6s %7s %14s %14s %7s\n" model batch threads "kiln ex/s" "LibTorch ex/s" ratio
for threads in "${thread_counts[@]}"; do
  for model in "${models[@]}"; do
    for batch in "${batches[@]}"; do
      measure 1 mlp "$model" "$batch" "$threads"
      printf "%-26s %6s %7s %14s %14s %6.2fx\n" "$model" "$batch" "$threads" "$best_k" "$best_t" "$(awk -v a="$best_k" -v b="$best_t" 'BEGIN { print a / b }')"
    done
  done
done
printf "\n%-34s %12s %14s %7s\n" "tiny call y = 2x + 1 (10 floats)" "kiln us" "LibTorch us" ratio
for threads in "${thread_counts[@]}"; do
  measure 0 tiny "$threads"
  printf "%-34s %12s %14s %6.2fx\n" "threads $threads" "$best_k" "$best_t" "$(awk -v a="$best_k" -v b="$best_t" 'BEGIN { print b / a }')"
done

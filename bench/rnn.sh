#!/usr/bin/env bash
# Builds and runs the recurrent benchmarks and prints their tables: the Elman RNN of the
# DeepLearningBenchmarks suite (vocabulary 100, one-hot input, 20 steps, batch 1, softmax + NLL,
# BPTT, SGD) and an LSTM cell on the same task, kiln against LibTorch in time steps per second on
# 1 thread; then kiln's per-step loop overhead, compile times and planned memory.
# The peer runs with its best settings and its BLAS is checked first (bench/peer.sh); each
# configuration alternates kiln and LibTorch runs (REPEATS each, default 3) and keeps each side's
# best. CELLS and HIDDEN (space-separated lists) choose a part of the table.
set -euo pipefail
cd "$(dirname "$0")/.."
repeats=${REPEATS:-3}
read -ra cells <<<"${CELLS:-elman lstm}"
read -ra hidden_sizes <<<"${HIDDEN:-50 100 200 500}"
kiln=./build-bench/bench/bench_rnn_kiln
torch=./build-bench/bench/bench_rnn_torch
torch_blas=./build-bench/bench/bench_mlp_torch
bench_name=rnn.sh
# shellcheck source=bench/peer.sh
source bench/peer.sh
prepare_bench
check_peer

printf "%-6s %5s %16s %16s %7s\n" cell H "kiln steps/s" "LibTorch steps/s" ratio
for cell in "${cells[@]}"; do
  for hidden in "${hidden_sizes[@]}"; do
    measure 1 train "$cell" "$hidden" 1
    printf "%-6s %5s %16s %16s %6.2fx\n" "$cell" "$hidden" "$best_k" "$best_t" "$(awk -v a="$best_k" -v b="$best_t" 'BEGIN { print a / b }')"
  done
done
echo
run_kiln overhead
echo
run_kiln compile
echo
run_kiln memory

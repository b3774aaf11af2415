#!/usr/bin/env bash
# Builds and runs the second-order benchmark and prints its table: on the 784-500-10 MLP at batch
# 60 and 1000, 1 thread, the time of one gradient, one Gauss-Newton vector product and one
# Hessian-vector product, kiln against LibTorch (double backward), each product also as a
# multiple of its own side's gradient; then kiln's planned peak memory of each function.
# The peer runs with its best settings and its BLAS is checked first (bench/peer.sh); each row
# alternates kiln and LibTorch runs (REPEATS each, default 3) and keeps each side's best.
set -euo pipefail
cd "$(dirname "$0")/.."
repeats=${REPEATS:-3}
kiln=./build-bench/bench/bench_second_order_kiln
torch=./build-bench/bench/bench_second_order_torch
torch_blas=./build-bench/bench/bench_mlp_torch
bench_name=second_order.sh
# shellcheck source=bench/peer.sh
source bench/peer.sh
prepare_bench
check_peer

printf "%-6s %5s %10s %10s %9s %14s %14s\n" product batch "kiln ms" "torch ms" "speedup" "kiln / grad" "torch / grad"
for batch in 60 1000; do
  for product in grad gn hv; do
    measure 0 "$product" "$batch" 1
    if [[ $product == grad ]]; then grad_k=$best_k grad_t=$best_t; fi
    printf "%-6s %5s %10s %10s %8.2fx %13.2fx %13.2fx\n" "$product" "$batch" "$best_k" "$best_t" \
      "$(awk -v a="$best_t" -v b="$best_k" 'BEGIN { print a / b }')" \
      "$(awk -v a="$best_k" -v b="$grad_k" 'BEGIN { print a / b }')" "$(awk -v a="$best_t" -v b="$grad_t" 'BEGIN { print a / b }')"
  done
done
echo
for batch in 60 1000; do run_kiln memory "$batch"; done

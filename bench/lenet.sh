#!/usr/bin/env bash
# Builds and runs the LeNet benchmark (bench/lenet_common.hpp) and prints its table: the LeNet
# training step (two conv 5x5 + relu + max pool 2 layers of 20 and 50 filters, dense 500 + relu,
# dense 10, softmax cross-entropy, plain SGD) at batch 1, 60 and 256, and conv2d forward + backward
# alone at the second layer's shape (batch 60), each at 1 and 2 threads: milliseconds per step for
# kiln and LibTorch, LibTorch's time over kiln's, and at 2 threads kiln's 1-thread time over its
# 2-thread time.
# First both sides' results are compared, from the same weights and data: the loss of the first
# two training steps (the second shows the gradients and the update agree) and conv2d's sum and
# gradients; a difference over 1e-4 (relative) stops the script before any time is taken.
# The peer runs with its best settings and its BLAS is checked first (bench/peer.sh); each row
# alternates kiln and LibTorch runs (REPEATS each, default 3) and keeps each side's best. At 2
# threads LibTorch also runs with OpenMP's default (spinning) wait policy, and its faster policy
# counts (the last column says which). BATCHES and THREADS (space-separated lists) choose a part
# of the table.
set -euo pipefail
cd "$(dirname "$0")/.."
repeats=${REPEATS:-3}
read -ra batches <<<"${BATCHES:-1 60 256}"
read -ra thread_counts <<<"${THREADS:-1 2}"
conv_batch=60
kiln=./build-bench/bench/bench_lenet_kiln
torch=./build-bench/bench/bench_lenet_torch
torch_blas=./build-bench/bench/bench_mlp_torch
bench_name=lenet.sh
# shellcheck source=bench/peer.sh
source bench/peer.sh
prepare_bench
check_peer

# agree WHAT ARGS...: runs both sides' check on ARGS (1 thread) and stops unless every number
# they print agrees to 1e-4, relative to the number's size (at least 1).
agree() {
  local what=$1 k t status=0
  shift
  k=$(run_kiln "$@") || status=$?
  ((status == 0)) || fail "kiln check '$kiln $*'" "$status"
  peer_env 1
  t=$(env "${peer_env_args[@]}" "$torch" "$@") || status=$?
  ((status == 0)) || fail "LibTorch check '$(peer_env_text)$torch $*'" "$status"
  if ! awk -v k="$k" -v t="$t" 'BEGIN {
      n = split(k, a, " "); m = split(t, b, " "); if (n != m || n == 0) exit 1
      for (i = 1; i <= n; ++i) {
        if (a[i] !~ /^-?[0-9.]+(e[-+][0-9]+)?$/ || b[i] !~ /^-?[0-9.]+(e[-+][0-9]+)?$/) exit 1
        d = a[i] - b[i]; if (d < 0) d = -d
        s = b[i] < 0 ? -b[i] : b[i]; if (s < 1) s = 1
        if (d > 1e-4 * s) exit 1
      }
    }'; then
    echo "$bench_name: FAILED: kiln and LibTorch disagree on $what: kiln '$k', LibTorch '$t'; stopping" >&2
    exit 1
  fi
  echo "$what: kiln $k, LibTorch $t"
}
echo "Same weights and data on both sides; relu after each conv and the first dense layer."
for batch in "${batches[@]}"; do agree "loss of steps 1 and 2, batch $batch" check-step "$batch"; done
agree "conv2d: sum, |d/dinput|^2, |d/dfilters|^2, batch $conv_batch" check-conv "$conv_batch"
echo

printf "%-24s %5s %7s %10s %10s %9s %13s %13s\n" row batch threads "kiln ms" "torch ms" "speedup" "kiln 1t / 2t" "torch OpenMP"
# spinning_peer MODE BATCH THREADS: at 2 threads or more, LibTorch also runs $repeats times with
# OpenMP's default wait policy (its threads spin) instead of PASSIVE, and best_t keeps the faster;
# the policy that won goes into policy. Which is faster depends on the row and the run: a short
# step is much faster spinning (batch 1: 0.66 against 1.9 ms), at batch 60 and 256 either won.
spinning_peer() {
  local a r spin_args=()
  policy=passive
  (($3 > 1)) || { policy=-; return; }
  peer_env "$3"
  for a in "${peer_env_args[@]}"; do [[ $a == OMP_WAIT_POLICY=* ]] || spin_args+=("$a"); done
  for ((r = 0; r < repeats; ++r)); do
    run_number "LibTorch run '$torch $*' (OMP_WAIT_POLICY unset)" env "${spin_args[@]}" "$torch" "$@"
    if awk -v a="$best_t" -v b="$number" 'BEGIN { exit !(b < a) }'; then best_t=$number policy=spin; fi
  done
}
# row LABEL MODE BATCH: the row at each thread count.
row() {
  local label=$1 mode=$2 batch=$3 threads one_thread="" scaling
  for threads in "${thread_counts[@]}"; do
    measure 0 "$mode" "$batch" "$threads"
    spinning_peer "$mode" "$batch" "$threads"
    scaling=-
    if [[ $threads == 1 ]]; then one_thread=$best_k; fi
    if [[ $threads == 2 && -n $one_thread ]]; then scaling=$(awk -v a="$one_thread" -v b="$best_k" 'BEGIN { printf "%.2fx", a / b }'); fi
    printf "%-24s %5s %7s %10s %10s %8.2fx %13s %13s\n" "$label" "$batch" "$threads" "$best_k" "$best_t" \
      "$(awk -v a="$best_t" -v b="$best_k" 'BEGIN { print a / b }')" "$scaling" "$policy"
  done
}
for batch in "${batches[@]}"; do row "LeNet training step" step "$batch"; done
row "conv2d forward+backward" conv "$conv_batch"

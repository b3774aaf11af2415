#!/usr/bin/env bash
# Builds and runs the sparse benchmark and prints one table: a CSR 10,000 x 10,000 matrix at 0.1%,
# 1% and 10% stored entries times a dense 10,000 x 64 matrix (spmm) and times a dense vector
# (spmv), and the training step of a sparse logistic regression (10,000 examples x 10,000
# features, 1% stored; forward product, its gradient through the transposed product, updates).
# kiln and Eigen 3 (its row-major sparse matrix, compiled for this CPU) run in one program,
# LibTorch (the faster of its CSR and COO tensors per row; COO with autograd for the training
# step) in another, each REPEATS times (default 2, alternating) keeping each row's lowest median
# (bench/sparse_common.hpp). Times in microseconds; ratio = other / kiln (above 1: kiln is
# faster); GB/s: the bytes the product must read (values, indices, index pointers, the dense
# operand) and write, over kiln's time. THREADS (default "1 2") chooses the thread counts. A
# crashed run or checksums that differ stop the script with a nonzero status.
set -euo pipefail
cd "$(dirname "$0")/.."
read -ra thread_counts <<<"${THREADS:-1 2}"
repeats=${REPEATS:-2}
[[ $repeats =~ ^[1-9][0-9]*$ ]] || { echo "sparse.sh: REPEATS must be a positive integer, not '$repeats'" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

bash scripts/setup.sh --bench
build() {
  "$@" >"$work/build.log" 2>&1 || { tail -n 60 "$work/build.log" >&2; echo "sparse.sh: FAILED: $*" >&2; return 1; }
}
build cmake -S . -B build-bench -DKILN_BUILD_BENCH=ON -DCMAKE_BUILD_TYPE=Release -DKILN_BUILD_TESTS=OFF -DKILN_BUILD_EXAMPLES=OFF
build cmake --build build-bench -j2 --target bench_sparse_kiln
build cmake --build build-bench -j2 --target bench_sparse_torch ||
  { echo "sparse.sh: LibTorch's side did not build (is libtorch-dev installed?)" >&2; exit 1; }

echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), family $(grep -m1 'cpu family' /proc/cpuinfo | cut -d: -f2 | tr -d ' ')," \
  "model $(grep -m1 -P '^model\t' /proc/cpuinfo | cut -d: -f2 | tr -d ' '); avx2 $(grep -qw avx2 /proc/cpuinfo && echo yes || echo no)," \
  "avx512f $(grep -qw avx512f /proc/cpuinfo && echo yes || echo no)"
run() {
  local what=$1 out=$2 status=0
  shift 2
  "$@" >"$out" 2>"$out.err" || status=$?
  if ((status != 0)); then
    cat "$out" "$out.err" >&2
    echo "sparse.sh: FAILED: $what ended with status $status; no ratio is printed" >&2
    exit 1
  fi
}
printf "%-16s %3s %11s %11s %11s %-10s %9s %9s %7s\n" row thr "kiln us" "eigen us" "torch us" "(torch)" eigen/kiln torch/kiln "GB/s"
for threads in "${thread_counts[@]}"; do
  for ((r = 0; r < repeats; ++r)); do
    run "bench_sparse_kiln $threads" "$work/kiln.$threads.$r" env -u OMP_NUM_THREADS ./build-bench/bench/bench_sparse_kiln "$threads"
    run "bench_sparse_torch $threads" "$work/torch.$threads.$r" env -u OMP_NUM_THREADS ./build-bench/bench/bench_sparse_torch "$threads"
  done
  cat "$work"/kiln."$threads".* "$work"/torch."$threads".* | awk -v threads="$threads" '
    BEGIN {
      rows = "spmm_0.1% spmm_1% spmm_10% spmv_0.1% spmv_1% spmv_10% logreg_step"
      per_row["0.1%"] = 10; per_row["1%"] = 100; per_row["10%"] = 1000
    }
    {
      lib = $2; side = lib ~ /^torch/ ? "torch" : lib
      key = $1 SUBSEP side
      if (!(key in best) || $3 < best[key]) best[key] = $3
      if (side == "torch") torch_kind[$1] = substr(lib, 7)
      sum[key] = $4
    }
    END {
      n = split(rows, r, " ")
      for (i = 1; i <= n; ++i) {
        k = r[i]
        if (!((k SUBSEP "kiln") in best) || !((k SUBSEP "torch") in best)) { printf "sparse.sh: FAILED: no %s row\n", k > "/dev/stderr"; exit 1 }
        for (s = 1; s <= 2; ++s) {
          other = s == 1 ? "torch" : "eigen"
          if (!((k SUBSEP other) in sum)) continue
          a = sum[k SUBSEP "kiln"]; b = sum[k SUBSEP other]; d = a - b; d = d < 0 ? -d : d; m = b < 0 ? -b : b
          if (d > 1e-3 * (m > 1 ? m : 1)) { printf "sparse.sh: FAILED: row %s: kiln checksum %s, %s %s\n", k, a, other, b > "/dev/stderr"; exit 1 }
        }
        kt = best[k SUBSEP "kiln"]; tt = best[k SUBSEP "torch"]
        et = (k SUBSEP "eigen") in best ? best[k SUBSEP "eigen"] : 0
        gbs = "-"
        if (k ~ /^sp/) {
          split(k, parts, "_"); nnz = 10000 * per_row[parts[2]]; cols = k ~ /^spmm/ ? 64 : 1
          bytes = nnz * (4 + 8) + 10001 * 8 + 2 * 10000 * cols * 4
          gbs = sprintf("%.1f", bytes / (kt * 1e-6) / 1e9)
        }
        printf "%-16s %3s %11.1f %11s %11.1f %-10s %9s %8.2fx %7s\n", k, threads, kt, et ? sprintf("%.1f", et) : "-", tt, "(" torch_kind[k] ")",
               et ? sprintf("%.2fx", et / kt) : "-", tt / kt, gbs
      }
    }' || { echo "sparse.sh: FAILED (see above)" >&2; exit 1; }
done

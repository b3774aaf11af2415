#!/usr/bin/env bash
# Builds and runs the MLP benchmark for kiln and LibTorch in one run and prints the table.
# kiln runs with no environment variable; LibTorch gets its best settings (MACHINE-FACTS.md):
# OPENBLAS_CORETYPE=SkylakeX always, OMP_WAIT_POLICY=PASSIVE at 2 threads. Debian's LibTorch calls
# a pthread OpenBLAS that torch::set_num_threads does not limit, so OPENBLAS_NUM_THREADS holds each
# row to the number of threads its label says (without it the "1 thread" row uses both cores).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --bench
cmake -S . -B build-bench -DCMAKE_BUILD_TYPE=Release -DKILN_BUILD_BENCH=ON -DKILN_BUILD_TESTS=OFF -DKILN_BUILD_EXAMPLES=OFF >/dev/null
cmake --build build-bench -j2 >/dev/null
out=$(mktemp -d)
env -u OPENBLAS_CORETYPE -u OMP_WAIT_POLICY -u OMP_NUM_THREADS ./build-bench/bench/bench_mlp_kiln >"$out/kiln"
if [[ -x build-bench/bench/bench_mlp_torch ]]; then
  OPENBLAS_CORETYPE=SkylakeX OPENBLAS_NUM_THREADS=1 ./build-bench/bench/bench_mlp_torch 1 >"$out/torch"
  OPENBLAS_CORETYPE=SkylakeX OPENBLAS_NUM_THREADS=2 OMP_WAIT_POLICY=PASSIVE ./build-bench/bench/bench_mlp_torch 2 >>"$out/torch"
else
  : >"$out/torch"
fi
awk '
  FNR == NR { k[$1 " " $2 " " $3 " " $4] = $NF; keys[++n] = $1 " " $2 " " $3 " " $4; next }
  { t[$1 " " $2 " " $3 " " $4] = $NF }
  END {
    printf "%-26s %6s %7s %14s %14s %7s\n", "model", "batch", "threads", "kiln ex/s", "LibTorch ex/s", "ratio"
    for (i = 1; i <= n; ++i) {
      split(keys[i], f, " ")
      if (f[1] != "mlp") continue
      p = (keys[i] in t) ? t[keys[i]] : "-"
      r = (p != "-" && p > 0) ? sprintf("%.2fx", k[keys[i]] / p) : "-"
      printf "%-26s %6s %7s %14s %14s %7s\n", f[2], f[3], f[4], k[keys[i]], p, r
    }
    printf "\n%-34s %12s %14s %7s\n", "tiny call y = 2x + 1 (10 floats)", "kiln us", "LibTorch us", "ratio"
    for (i = 1; i <= n; ++i) {
      split(keys[i], f, " ")
      if (f[1] != "tiny") continue
      p = (keys[i] in t) ? t[keys[i]] : "-"
      r = (p != "-" && k[keys[i]] > 0) ? sprintf("%.2fx", p / k[keys[i]]) : "-"
      printf "%-34s %12s %14s %7s\n", "threads " f[2], k[keys[i]], p, r
    }
  }' <(awk '{ if ($1 == "tiny") print $1, $2, "-", "-", $3; else print }' "$out/kiln") \
     <(awk '{ if ($1 == "tiny") print $1, $2, "-", "-", $3; else print }' "$out/torch")
rm -rf "$out"

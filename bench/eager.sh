#!/usr/bin/env bash
# Builds and runs the eager benchmark, kiln eager Tensors against LibTorch eager (C++), and prints
# one table: c = a + b on 10 and 10^6 floats, tanh(a * b + 1) * exp(-a) - b on 10^6 floats (seven
# operations, each run on its own), and a 784-500-10 MLP evaluation (tanh, softmax) at batch 1 and
# 60, each kiln iteration in a DisposeScope (LibTorch: NoGradGuard, addmm as nn::Linear). Times are
# per evaluation of the row, the median of 7 repetitions each the mean over many iterations
# (bench/eager_common.hpp); each side runs REPEATS times (default 2, alternating) and keeps each
# row's lowest median. ratio = LibTorch time / kiln time (above 1: kiln is faster). For kiln
# also what a steady iteration allocates: operator new calls and blocks of kiln's slab of small
# objects (new/it), storages made by kiln's
# allocator (alloc/it) and of those the blocks taken from the system (sys/it), and the change of
# live storages and live tensors over the counted iterations (dStor, dTens). Last, kiln's 10^6
# iterations of a + b each in a DisposeScope, which must leave live storages and live tensors
# where they started. Both sides must compute the same checksums.
# The peer gets its best BLAS settings and its BLAS is checked first (bench/peer.sh). THREADS
# (default "1 2") chooses the thread counts. Any crashed or failed run, a leak, or differing
# results stop the script with a message and a nonzero status.
set -euo pipefail
cd "$(dirname "$0")/.."
read -ra thread_counts <<<"${THREADS:-1 2}"
repeats=${REPEATS:-2}
[[ $repeats =~ ^[1-9][0-9]*$ ]] || { echo "eager.sh: REPEATS must be a positive integer, not '$repeats'" >&2; exit 1; }
kiln=./build-bench/bench/bench_eager_kiln
torch=./build-bench/bench/bench_eager_torch
torch_blas=./build-bench/bench/bench_mlp_torch  # its "blas" mode reports the BLAS LibTorch calls
bench_name=eager.sh
# shellcheck source=bench/peer.sh
source bench/peer.sh

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

bash scripts/setup.sh --bench
# The build's output (compiler warnings included) is shown only when it fails.
build() {
  "$@" >"$work/build.log" 2>&1 || { tail -n 60 "$work/build.log" >&2; echo "$bench_name: FAILED: $*" >&2; return 1; }
}
build cmake -S . -B build-bench -DKILN_BUILD_BENCH=ON -DCMAKE_BUILD_TYPE=Release -DKILN_BUILD_TESTS=OFF -DKILN_BUILD_EXAMPLES=OFF
build cmake --build build-bench -j2 --target bench_eager_kiln
build cmake --build build-bench -j2 --target bench_eager_torch bench_mlp_torch ||
  { echo "$bench_name: LibTorch's side did not build (is libtorch-dev installed?)" >&2; exit 1; }

echo "CPU flags: avx2 $avx2, avx512f $avx512f, amx $(has_flag amx_tile)"
# Other processes on the 2 shared cores distort the times, the 2-thread rows most (a thread of a
# parallel region waiting for a core stalls the region).
# The share of CPU time other processes used over one second (idle and iowait count as free).
busy_percent() {
  local a b
  a=$(head -n1 /proc/stat)
  sleep 1
  b=$(head -n1 /proc/stat)
  awk -v a="$a" -v b="$b" 'BEGIN {
    n = split(a, x, " "); split(b, y, " ")
    for (i = 2; i <= n; ++i) { total += y[i] - x[i]; if (i == 5 || i == 6) idle += y[i] - x[i] }
    printf "%.0f", (total > 0 ? 100 * (1 - idle / total) : 0) }'
}
busy=$(busy_percent)
echo "CPU busy before the runs (other processes, 1 s): $busy%"
if ((busy >= 20)); then echo "WARNING: the machine is busy; the times are unreliable, the 2-thread rows most"; fi
# cpu_ticks VAR: sets VAR to the machine's busy and total CPU ticks so far and this script's
# children's CPU ticks (the benchmark runs), for others_percent. (times runs in this shell, not in
# a $(...) subshell, which would report its own children.)
cpu_ticks() {
  times >"$work/times"  # second line: "XmY.YYYs XmY.YYYs", the children's user and system time
  printf -v "$1" '%s' "$(awk -v hz="$(getconf CLK_TCK)" -v c="$(tail -n1 "$work/times")" '
    NR == 1 {
      for (i = 2; i <= NF; ++i) { total += $i; if (i != 5 && i != 6) busy += $i }
      split(c, t, /[ms ]+/)
      printf "%d %d %d\n", busy, total, (60 * t[1] + t[2] + 60 * t[3] + t[4]) * hz
    }' /proc/stat)"
}
# others_percent BEFORE AFTER: the share of the CPUs' time that other processes used between two
# cpu_ticks.
others_percent() {
  awk -v a="$1" -v b="$2" 'BEGIN {
    split(a, x, " "); split(b, y, " ")
    total = y[2] - x[2]; others = (y[1] - x[1]) - (y[3] - x[3])
    printf "%.0f", (total > 0 && others > 0 ? 100 * others / total : 0) }'
}
check_peer  # the CPU, LibTorch's BLAS and core type; stops if it is not OpenBLAS

# capture WHAT FILE CMD...: runs CMD with its output in FILE; a failed run stops the script.
capture() {
  local what=$1 file=$2 status=0
  shift 2
  "$@" >"$file" || status=$?
  ((status == 0)) || { cat "$file" >&2; fail "$what" "$status"; }
}

rows="add10 add1000000 expr1000000 mlp1 mlp60 scoped_add10"
ticks="" ticks_after=""
printf "%-38s %3s %10s %10s %9s %7s %8s %6s %6s %6s\n" row thr "kiln us" "torch us" torch/kiln "new/it" "alloc/it" "sys/it" "dStor" "dTens"
for threads in "${thread_counts[@]}"; do
  peer_env "$threads"
  cpu_ticks ticks
  for ((r = 0; r < repeats; ++r)); do
    capture "kiln run '$kiln $threads' (no environment variable)" "$work/kiln.$threads.$r" run_kiln "$threads"
    capture "LibTorch run '$(peer_env_text)$torch $threads'" "$work/torch.$threads.$r" run_torch "$threads"
  done
  awk -v threads="$threads" -v rows="$rows" -v name="$bench_name" '
    BEGIN {
      label["add10"] = "c = a + b, 10 f32"
      label["add1000000"] = "c = a + b, 10^6 f32"
      label["expr1000000"] = "tanh(a*b+1)*exp(-a)-b, 10^6 (7 ops)"
      label["mlp1"] = "MLP 784-500-10 eval, batch 1"
      label["mlp60"] = "MLP 784-500-10 eval, batch 60"
      label["scoped_add10"] = "c = a + b, 10 f32, DisposeScope, 10^6x"
    }
    FNR == 1 { kiln = FILENAME ~ /\/kiln\.[^\/]*$/ }
    $1 == "check" { if (check == "" || $2 != $3 || $4 != $5) check = $0; next }
    kiln {
      if (!($1 in kt) || $2 < kt[$1]) kt[$1] = $2
      ksum[$1] = $3; news[$1] = $4; allocs[$1] = $5; sys[$1] = $6; dstor[$1] = $7; dtens[$1] = $8
    }
    !kiln {
      if (!($1 in tt) || $2 < tt[$1]) tt[$1] = $2
      tsum[$1] = $3
    }
    END {
      n = split(rows, r, " ")
      for (i = 1; i <= n; ++i) {
        k = r[i]
        if (!(k in kt)) { printf "%s: FAILED: kiln printed no row %s\n", name, k > "/dev/stderr"; exit 1 }
        if (k != "scoped_add10" && !(k in tt)) { printf "%s: FAILED: LibTorch printed no row %s\n", name, k > "/dev/stderr"; exit 1 }
        if (k in tt) {
          d = ksum[k] - tsum[k]; d = d < 0 ? -d : d; m = tsum[k] < 0 ? -tsum[k] : tsum[k]
          if (d > 1e-4 * (m > 1 ? m : 1)) { printf "%s: FAILED: row %s: kiln checksum %s, LibTorch %s\n", name, k, ksum[k], tsum[k] > "/dev/stderr"; exit 1 }
          printf "%-38s %3s %10.4g %10.4g %8.2fx %7s %8s %6s %6s %6s\n", label[k], threads, kt[k], tt[k], tt[k] / kt[k], news[k], allocs[k], sys[k], dstor[k], dtens[k]
        } else {
          printf "%-38s %3s %10.4g %10s %9s %7s %8s %6s %6s %6s\n", label[k], threads, kt[k], "-", "-", news[k], allocs[k], sys[k], dstor[k], dtens[k]
        }
      }
      if (check == "") { printf "%s: FAILED: kiln printed no check line\n", name > "/dev/stderr"; exit 1 }
      split(check, c, " ")
      ok = c[2] == c[3] && c[4] == c[5]
      printf "    kiln after 10^6 scoped iterations: live storages %s -> %s, live tensors %s -> %s: %s\n", c[2], c[3], c[4], c[5], ok ? "OK" : "LEAK"
      if (!ok) exit 1
    }' "$work"/kiln."$threads".* "$work"/torch."$threads".* || { echo "$bench_name: FAILED (see above)" >&2; exit 1; }
  cpu_ticks ticks_after
  others=$(others_percent "$ticks" "$ticks_after")
  echo "    other processes used $others% of the CPUs during the $threads-thread runs$( ((others >= 10)) && echo ": UNRELIABLE")"
done

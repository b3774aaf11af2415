# Shared by bench/mlp.sh and bench/rnn.sh (sourced): runs kiln with no environment variable and
# LibTorch with its best settings, checks which BLAS the peer calls, stops on any failed run.
# The sourcing script sets bench_name, kiln and torch (the two programs), torch_blas (the LibTorch
# program that reports its BLAS) and repeats, then calls prepare_bench and check_peer.

# prepare_bench: checks REPEATS, installs what the benchmarks need, builds them, and stops when
# LibTorch's side was not built.
prepare_bench() {
  [[ $repeats =~ ^[1-9][0-9]*$ ]] || { echo "$bench_name: REPEATS must be a positive integer, not '$repeats'" >&2; exit 1; }
  bash scripts/setup.sh --bench
  cmake -S . -B build-bench -DCMAKE_BUILD_TYPE=Release -DKILN_BUILD_BENCH=ON -DKILN_BUILD_TESTS=OFF -DKILN_BUILD_EXAMPLES=OFF >/dev/null
  cmake --build build-bench -j2 >/dev/null
  [[ -x $torch ]] || { echo "LibTorch was not found; install libtorch-dev" >&2; exit 1; }
}

# The first value of FIELD ("model name", "cpu family", "model") in /proc/cpuinfo.
cpu_field() {
  awk -v k="$1" '{ key = $0; sub(/[ \t]*:.*/, "", key) } key == k { v = $0; sub(/^[^:]*:[ \t]*/, "", v); print v; exit }' /proc/cpuinfo
}
has_flag() { grep -qw -- "$1" /proc/cpuinfo && echo yes || echo no; }
avx512f=$(has_flag avx512f)
avx2=$(has_flag avx2)

run_kiln() { env -u OPENBLAS_CORETYPE -u OMP_WAIT_POLICY -u OMP_NUM_THREADS -u OPENBLAS_NUM_THREADS "$kiln" "$@"; }
# peer_env THREADS: sets peer_env_args to env(1)'s arguments for the LibTorch runs at THREADS.
peer_env() {
  peer_env_args=(-u OPENBLAS_CORETYPE -u OMP_WAIT_POLICY OPENBLAS_NUM_THREADS="$1")
  if [[ $avx512f == yes ]]; then peer_env_args+=(OPENBLAS_CORETYPE=SkylakeX); fi
  if [[ $1 != 1 ]]; then peer_env_args+=(OMP_WAIT_POLICY=PASSIVE); fi
}
# The variables of peer_env_args that are set, for messages.
peer_env_text() {
  local a
  for a in "${peer_env_args[@]}"; do if [[ $a == *=* ]]; then printf '%s ' "$a"; fi; done
}
run_torch() {
  peer_env "${!#}"
  env "${peer_env_args[@]}" "$torch" "$@"
}

# fail WHAT STATUS: stops the script, naming the run and how it ended.
fail() {
  local why="exit status $2"
  if (($2 > 128)); then why+=" (killed by signal SIG$(kill -l $(($2 - 128)) 2>/dev/null || echo "$(($2 - 128))"))"; fi
  echo "$bench_name: FAILED: $1 ended with $why; stopping, no ratio is printed for it" >&2
  exit 1
}
# run_number WHAT CMD...: runs CMD, which must exit 0 and print one positive number, and sets
# `number` to it; anything else stops the script (this function runs in the script's own shell,
# never inside $(...), so its exit ends the script).
run_number() {
  local what=$1 out status=0
  shift
  out=$("$@") || status=$?
  ((status == 0)) || fail "$what" "$status"
  if ! [[ $out =~ ^[0-9]+(\.[0-9]+)?$ ]] || ! awk -v x="$out" 'BEGIN { exit !(x > 0) }'; then
    echo "$bench_name: FAILED: $what printed '$out' instead of one positive number; stopping" >&2
    exit 1
  fi
  number=$out
}
# measure HIGHER_IS_BETTER ARGS...: the best of $repeats runs of each side on ARGS, alternating,
# into best_k and best_t.
measure() {
  local better=$1 r
  shift
  peer_env "${!#}"
  local kiln_what="kiln run '$kiln $*' (no environment variable)"
  local torch_what
  torch_what="LibTorch run '$(peer_env_text)$torch $*'"
  best_k="" best_t=""
  for ((r = 0; r < repeats; ++r)); do
    run_number "$kiln_what" run_kiln "$@"
    if [[ -z $best_k ]] || awk -v a="$best_k" -v b="$number" -v hi="$better" 'BEGIN { exit !(hi ? b > a : b < a) }'; then best_k=$number; fi
    run_number "$torch_what" run_torch "$@"
    if [[ -z $best_t ]] || awk -v a="$best_t" -v b="$number" -v hi="$better" 'BEGIN { exit !(hi ? b > a : b < a) }'; then best_t=$number; fi
  done
}

# check_peer: prints the CPU and the BLAS LibTorch calls with its core type; stops when it is not
# OpenBLAS (the reference BLAS is some 20x slower: every ratio would be fake).
check_peer() {
  echo "CPU: $(cpu_field "model name") (cpu family $(cpu_field "cpu family"), model $(cpu_field model)); avx512f: $avx512f, avx2: $avx2"
  peer_env 1
  echo "LibTorch environment (1 thread): $(peer_env_text)"
  status=0
  blas=$(env "${peer_env_args[@]}" "$torch_blas" blas) || status=$?
  [[ -n $blas ]] && echo "$blas"
  if ((status == 3)); then
    echo "$bench_name: FAILED: LibTorch does not call OpenBLAS; its numbers would be fake. Install libopenblas0-pthread" \
      "(bash scripts/setup.sh --bench) and select it: update-alternatives --config libblas.so.3-x86_64-linux-gnu" >&2
    exit 1
  fi
  ((status == 0)) || fail "LibTorch BLAS check '$(peer_env_text)$torch_blas blas'" "$status"
  core=$(sed -n 's/^LibTorch BLAS core type: //p' <<<"$blas")
  case "$avx512f/$avx2/$core" in
    yes/*/SkylakeX | yes/*/Cooperlake | yes/*/SapphireRapids) ;;
    no/yes/Haswell | no/yes/Zen | no/yes/SkylakeX | no/yes/Cooperlake | no/yes/SapphireRapids) ;;
    no/no/*) ;;
    *) echo "WARNING: OpenBLAS chose core type '$core', which does not use this CPU's vector ISA" \
      "(avx512f: $avx512f, avx2: $avx2); LibTorch's numbers are probably low" ;;
  esac
  echo
}

#!/usr/bin/env bash
# The test job: set up, build and run the whole suite with ctest (Release), then the same suite
# built in Debug with AddressSanitizer + UndefinedBehaviorSanitizer, where arenas are poisoned so
# that a wrong memory plan shows up as a wrong value (the fuzzers and the oracle sweep run there
# too). --release or --sanitize runs only one of the two.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
run_release=1
run_sanitize=1
case "${1:-}" in
  --release) run_sanitize=0 ;;
  --sanitize) run_release=0 ;;
  "") ;;
  *) echo "usage: scripts/test.sh [--release | --sanitize]" >&2; exit 2 ;;
esac
if ((run_release)); then
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DKILN_BUILD_TESTS=ON
  cmake --build build -j2
  ctest --test-dir build -j2 --output-on-failure --timeout 600
fi
if ((run_sanitize)); then
  cmake -S . -B build-sanitize -DCMAKE_BUILD_TYPE=Debug -DKILN_SANITIZE=ON -DKILN_BUILD_EXAMPLES=OFF -DKILN_BUILD_TESTS=ON
  cmake --build build-sanitize -j2
  ctest --test-dir build-sanitize -j2 --output-on-failure --timeout 900
fi

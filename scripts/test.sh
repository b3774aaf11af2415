#!/usr/bin/env bash
# The test job: set up, build, run the whole suite with ctest. --sanitize builds with
# AddressSanitizer + UndefinedBehaviorSanitizer in a separate build folder.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
build=build
options=(-DCMAKE_BUILD_TYPE=Release)
if [[ "${1:-}" == "--sanitize" ]]; then
  build=build-sanitize
  options=(-DCMAKE_BUILD_TYPE=Debug -DKILN_SANITIZE=ON -DKILN_BUILD_EXAMPLES=OFF)
fi
cmake -S . -B "$build" "${options[@]}" -DKILN_BUILD_TESTS=ON
cmake --build "$build" -j2
ctest --test-dir "$build" -j2 --output-on-failure --timeout 600

#!/usr/bin/env bash
# The long fuzzing run: the differential fuzzer and the aliasing fuzzer over many more seeds than
# the test suite's (SEEDS, default 20000), on the Release build. A failing seed is printed with its
# graph; KILN_FUZZ_SHOW=seed build/tests/graph_fuzz_test locates the rewrite at fault.
set -euo pipefail
cd "$(dirname "$0")/.."
seeds=${SEEDS:-20000}
bash scripts/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DKILN_BUILD_TESTS=ON >/dev/null
cmake --build build -j2 --target graph_fuzz_test aliasing_fuzz_test >/dev/null
KILN_FUZZ_SEEDS=$seeds ./build/tests/graph_fuzz_test
KILN_FUZZ_SEEDS=$seeds ./build/tests/aliasing_fuzz_test

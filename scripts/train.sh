#!/usr/bin/env bash
# The main job: set up, build, train the Fashion-MNIST MLP example.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DKILN_BUILD_TESTS=OFF
cmake --build build -j2 --target fashion_mnist_mlp
./build/examples/fashion_mnist_mlp

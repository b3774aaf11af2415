#!/usr/bin/env bash
# Installs the Debian packages kiln needs when they are missing. With --bench, also the LibTorch
# peer for the benchmarks and an OpenBLAS runtime for it: libtorch-dev alone may leave LibTorch on
# the reference BLAS (libblas3), some 20x slower, which would make every ratio fake.
# python3-numpy is for the tests only: NumPy itself reads and writes their .npy and .npz files.
# Runs apt-get as root, or through sudo when it is there.
set -euo pipefail
packages=(cmake g++ make libgtest-dev libbenchmark-dev zlib1g-dev libeigen3-dev libdnnl-dev libxbyak-dev libopenblas0-openmp dataset-fashion-mnist graphviz qemu-user python3-numpy)
if [[ "${1:-}" == "--bench" ]]; then
  packages+=(libtorch-dev libopenblas0-pthread)
fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=()
  [[ $(id -u) -ne 0 ]] && sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq "${missing[@]}"
fi

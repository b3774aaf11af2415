#pragma once
// Weights drawn uniformly from [-bound, bound], the same for kiln and LibTorch from one seed.
#include <cstdint>
#include <random>
#include <vector>

namespace bench {

inline std::vector<float> uniform_weights(int64_t rows, int64_t cols, uint32_t seed, float bound) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uni(-bound, bound);
  std::vector<float> w(static_cast<size_t>(rows * cols));
  for (float& v : w) v = uni(rng);
  return w;
}

}  // namespace bench

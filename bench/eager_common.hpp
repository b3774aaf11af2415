#pragma once
// The eager benchmark (bench/eager.sh), shared by kiln and LibTorch: the same inputs from the same
// seeds, the same timing (median of kRepeats repetitions, each the mean over enough iterations to
// last kRepeatSeconds) and the same checksum of each row's result, so eager.sh can check that both
// sides computed the same numbers. Each program prints one line per row:
//   ROW MICROSECONDS CHECKSUM [kiln only: NEWS ALLOCATIONS SYSTEM_ALLOCATIONS (per iteration)
//                              LIVE_STORAGES_DELTA LIVE_TENSORS_DELTA]
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "uniform_weights.hpp"

namespace bench {

constexpr int kRepeats = 7;
constexpr double kRepeatSeconds = 0.15;
constexpr int64_t kSmall = 10;
constexpr int64_t kLarge = 1000000;
constexpr int64_t kInputs = 784, kHidden = 500, kClasses = 10;
constexpr int64_t kMlpBatches[] = {1, 60};
constexpr int64_t kScopedIterations = 1000000;

// Elementwise operands in [-1, 1]: a from seed 1, b from seed 2.
inline std::vector<float> operand(int64_t n, uint32_t seed) { return uniform_weights(1, n, seed, 1.0f); }

// The MLP's weights (784x500, 500, 500x10, 10) and a batch of inputs in [-1, 1].
inline std::vector<float> mlp_w1() { return uniform_weights(kInputs, kHidden, 10, 0.05f); }
inline std::vector<float> mlp_b1() { return uniform_weights(1, kHidden, 11, 0.05f); }
inline std::vector<float> mlp_w2() { return uniform_weights(kHidden, kClasses, 12, 0.05f); }
inline std::vector<float> mlp_b2() { return uniform_weights(1, kClasses, 13, 0.05f); }
inline std::vector<float> mlp_x(int64_t batch) { return uniform_weights(batch, kInputs, 14, 1.0f); }

// A weighted sum of a row-major result (the weights tell a permutation or a wrong axis apart).
inline double checksum(const float* v, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(v[i]) * static_cast<double>(i % 7 + 1);
  return s;
}

// The median over kRepeats repetitions of the mean time of one step(), in microseconds.
template <class Step> double median_microseconds(Step step) {
  using clock = std::chrono::steady_clock;
  auto seconds_since = [](clock::time_point t) { return std::chrono::duration<double>(clock::now() - t).count(); };
  for (int i = 0; i < 3; ++i) step();
  int64_t n = 0;
  const auto calibrate = clock::now();
  double elapsed = 0;
  while (elapsed < 0.02) {
    step();
    ++n;
    elapsed = seconds_since(calibrate);
  }
  const int64_t iterations = std::max<int64_t>(1, static_cast<int64_t>(kRepeatSeconds * static_cast<double>(n) / elapsed));
  std::vector<double> means;
  for (int r = 0; r < kRepeats; ++r) {
    const auto start = clock::now();
    for (int64_t i = 0; i < iterations; ++i) step();
    means.push_back(1e6 * seconds_since(start) / static_cast<double>(iterations));
  }
  std::sort(means.begin(), means.end());
  return means[means.size() / 2];
}

}  // namespace bench

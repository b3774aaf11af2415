#pragma once
// The benchmark of the Theano paper (Bastien et al. 2012, section 5): training throughput of
// logistic regression 784-10, MLP 784-500-10 and MLP 784-1000-1000-1000-10; tanh hidden units,
// softmax + NLL averaged over the batch, plain SGD with learning rate 0.01, f32, 6000 random
// examples held in memory and cycled. Both peers take the same command line and print one number.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "uniform_weights.hpp"

namespace bench {

constexpr int64_t kExamples = 6000;
constexpr int64_t kInputs = 784;
constexpr int64_t kClasses = 10;
constexpr double kLearningRate = 0.01;

inline std::vector<std::vector<int64_t>> models() { return {{784, 10}, {784, 500, 10}, {784, 1000, 1000, 1000, 10}}; }
inline std::vector<int64_t> batch_sizes() { return {1, 10, 60, 1000}; }

inline std::string model_name(const std::vector<int64_t>& layers) {
  std::string s;
  for (size_t i = 0; i < layers.size(); ++i) s += (i ? "-" : "") + std::to_string(layers[i]);
  return s;
}

inline std::vector<float> random_inputs() {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> uni(0.f, 1.f);
  std::vector<float> x(kExamples * kInputs);
  for (float& v : x) v = uni(rng);
  return x;
}

inline std::vector<int64_t> random_labels() {
  std::mt19937 rng(2);
  std::vector<int64_t> y(kExamples);
  for (int64_t& v : y) v = static_cast<int64_t>(rng() % kClasses);
  return y;
}

inline std::vector<float> random_weights(int64_t rows, int64_t cols, uint32_t seed) {
  return uniform_weights(rows, cols, seed, 0.05f);
}

// Runs step(first_example) over consecutive batches until at least min_seconds have passed
// (after one warm-up step) and returns examples per second.
template <class Step> double throughput(int64_t batch, double min_seconds, Step step) {
  step(0);
  int64_t done = 0, next = batch;
  auto start = std::chrono::steady_clock::now();
  double elapsed = 0;
  while (elapsed < min_seconds || done < 2 * batch) {
    if (next + batch > kExamples) next = 0;
    step(next);
    next += batch;
    done += batch;
    elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  return static_cast<double>(done) / elapsed;
}

template <class Call> double microseconds_per_call(Call call) {
  for (int i = 0; i < 1000; ++i) call();
  int64_t n = 0;
  auto start = std::chrono::steady_clock::now();
  double elapsed = 0;
  while (elapsed < 0.3) {
    for (int i = 0; i < 1000; ++i) call();
    n += 1000;
    elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  return 1e6 * elapsed / static_cast<double>(n);
}

}  // namespace bench

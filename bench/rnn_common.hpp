#pragma once
// The recurrent-network benchmark of the DeepLearningBenchmarks suite: a language model over a
// vocabulary of 100 symbols, one-hot input (a row lookup of W_x), a tanh Elman layer (or an LSTM
// layer) of H units, sequences of 20 steps, batch 1, softmax + NLL summed over the steps,
// back-propagation through time and plain SGD (learning rate 0.01), f32. Both peers take the same
// command line and print one number: time steps per second.
#include <chrono>
#include <cstdint>
#include <random>
#include <vector>

#include "uniform_weights.hpp"

namespace bench::rnn {

constexpr int64_t kVocabulary = 100;
constexpr int64_t kSteps = 20;
constexpr int64_t kSequences = 64;  // distinct random sequences, cycled
constexpr double kLearningRate = 0.01;

// kSequences rows of kSteps + 1 symbols: the input is a row's first kSteps, the target its last.
inline std::vector<int64_t> random_text() {
  std::mt19937 rng(3);
  std::vector<int64_t> text(kSequences * (kSteps + 1));
  for (int64_t& s : text) s = static_cast<int64_t>(rng() % kVocabulary);
  return text;
}

inline std::vector<float> random_weights(int64_t rows, int64_t cols, uint32_t seed) {
  return uniform_weights(rows, cols, seed, 0.1f);
}

// Runs step(sequence) over the sequences in turn until at least min_seconds have passed (after
// two warm-up steps) and returns time steps per second.
template <class Step> double steps_per_second(double min_seconds, Step step) {
  step(0);
  step(1);
  int64_t done = 0;
  auto start = std::chrono::steady_clock::now();
  double elapsed = 0;
  while (elapsed < min_seconds || done < 10) {
    step(done % kSequences);
    ++done;
    elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  return static_cast<double>(done * kSteps) / elapsed;
}

}  // namespace bench::rnn

#pragma once
// The recurrent benchmark's training step built with kiln: the recurrence is a scan over the
// input symbols (a row lookup of W_x per step), the output layer one product over the stacked
// states after it, softmax + NLL summed over the steps, SGD on every parameter.
#include <kiln/kiln.hpp>

#include <string>

#include "rnn_common.hpp"

namespace bench::rnn {

struct KilnRnnStep {
  kiln::Var symbols, targets, loss;  // symbols: the kSteps inputs; targets: the symbol after each
  kiln::Updates updates;
};

inline kiln::Shared weights(int64_t rows, int64_t cols, uint32_t seed, const std::string& name) {
  return kiln::shared(kiln::Tensor::from(random_weights(rows, cols, seed), {rows, cols}), name);
}

// cell "elman" or "lstm", hidden units H.
inline KilnRnnStep kiln_rnn_step(const std::string& cell, int64_t hidden) {
  using namespace kiln;
  const int64_t gates = cell == "lstm" ? 4 : 1;
  KilnRnnStep step{vector("symbols", i64), vector("targets", i64), Var(), {}};
  Shared W_x = weights(kVocabulary, gates * hidden, 1, "W_x"), W_h = weights(hidden, gates * hidden, 2, "W_h");
  Shared b_h = shared(Tensor::zeros({gates * hidden}), "b_h");
  Shared W_y = weights(hidden, kVocabulary, 3, "W_y"), b_y = shared(Tensor::zeros({kVocabulary}), "b_y");
  const Var zeros = constant(Tensor::zeros({hidden}));
  Var states;
  if (cell == "lstm") {
    auto gate = [&](const Var& z, int64_t k) { return slice(z, 0, k * hidden, (k + 1) * hidden); };
    ScanResult r = scan(
        [&](const std::vector<Var>& a) {
          const Var z = W_x[VarIndex(a[0])] + dot(a[1], W_h) + b_h;
          const Var c = sigmoid(gate(z, 1)) * a[2] + sigmoid(gate(z, 0)) * tanh(gate(z, 3));
          return std::vector<Var>{sigmoid(gate(z, 2)) * tanh(c), c};
        },
        {.sequences = {step.symbols}, .outputs_info = {zeros, zeros}});
    states = r.outputs[0];
  } else {
    ScanResult r = scan([&](const std::vector<Var>& a) { return std::vector<Var>{tanh(W_x[VarIndex(a[0])] + dot(a[1], W_h) + b_h)}; },
                        {.sequences = {step.symbols}, .outputs_info = {zeros}});
    states = r.outputs[0];
  }
  step.loss = sum(categorical_crossentropy(softmax(dot(states, W_y) + b_y), step.targets));
  const std::vector<Shared> params{W_x, W_h, b_h, W_y, b_y};
  const std::vector<Var> grads = grad(step.loss, std::vector<Var>(params.begin(), params.end()));
  for (size_t i = 0; i < params.size(); ++i) step.updates.push_back({params[i], params[i] - kLearningRate * grads[i]});
  return step;
}

}  // namespace bench::rnn

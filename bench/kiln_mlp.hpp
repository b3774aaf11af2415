#pragma once
// The benchmark's training step built with kiln (tanh hidden layers, softmax + NLL averaged over
// the batch, plain SGD): used by the throughput benchmark and by the memory benchmark.
#include <kiln/kiln.hpp>

#include "mlp_common.hpp"

namespace bench {

struct KilnMlpStep {
  kiln::Var x, y, loss;
  kiln::Updates updates;
};

inline KilnMlpStep kiln_mlp_step(const std::vector<int64_t>& layers) {
  using namespace kiln;
  KilnMlpStep step{matrix("x"), vector("y", i64), Var(), {}};
  std::vector<Shared> params;
  Var h = step.x;
  for (size_t l = 0; l + 1 < layers.size(); ++l) {
    params.push_back(shared(Tensor::from(random_weights(layers[l], layers[l + 1], static_cast<uint32_t>(10 + l)),
                                         {layers[l], layers[l + 1]}), "W"));
    params.push_back(shared(Tensor::zeros({layers[l + 1]}), "b"));
    Var a = dot(h, params[params.size() - 2]) + params.back();
    h = l + 2 < layers.size() ? tanh(a) : a;
  }
  step.loss = mean(categorical_crossentropy(softmax(h), step.y));
  std::vector<Var> grads = grad(step.loss, std::vector<Var>(params.begin(), params.end()));
  for (size_t i = 0; i < params.size(); ++i) step.updates.push_back({params[i], params[i] - kLearningRate * grads[i]});
  return step;
}

}  // namespace bench

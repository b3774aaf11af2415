#pragma once
// The benchmark's training step written with LibTorch, the peer: addmm + tanh layers, log_softmax
// + NLL averaged over the batch, torch::optim::SGD.
#include <torch/torch.h>

#include "mlp_common.hpp"

namespace bench {

class TorchMlpStep {
 public:
  explicit TorchMlpStep(const std::vector<int64_t>& layers) : sgd_(make_params(layers), torch::optim::SGDOptions(kLearningRate)) {}

  torch::Tensor operator()(const torch::Tensor& x, const torch::Tensor& y) {
    torch::Tensor h = x;
    for (size_t l = 0; 2 * l < params_.size(); ++l) {
      h = torch::addmm(params_[2 * l + 1], h, params_[2 * l]);
      if (2 * l + 2 < params_.size()) h = torch::tanh(h);
    }
    auto loss = torch::nll_loss(torch::log_softmax(h, 1), y);
    sgd_.zero_grad();
    loss.backward();
    sgd_.step();
    return loss;
  }

 private:
  std::vector<torch::Tensor> make_params(const std::vector<int64_t>& layers) {
    for (size_t l = 0; l + 1 < layers.size(); ++l) {
      auto w = random_weights(layers[l], layers[l + 1], static_cast<uint32_t>(10 + l));
      params_.push_back(torch::from_blob(w.data(), {layers[l], layers[l + 1]}, torch::kFloat32).clone().requires_grad_(true));
      params_.push_back(torch::zeros({layers[l + 1]}, torch::kFloat32).requires_grad_(true));
    }
    return params_;
  }
  std::vector<torch::Tensor> params_;
  torch::optim::SGD sgd_;
};

}  // namespace bench

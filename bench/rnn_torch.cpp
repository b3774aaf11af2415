// LibTorch's side of the recurrent benchmark, written as its users write it: a loop of addmm and
// tanh (an LSTM: the gates from one addmm, chunked), the output layer on the stacked states,
// log_softmax + NLL summed over the steps, torch::autograd::grad and an SGD update.
#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "rnn_common.hpp"

using namespace bench::rnn;

namespace {

torch::Tensor weights(int64_t rows, int64_t cols, uint32_t seed) {
  auto w = random_weights(rows, cols, seed);
  return torch::from_blob(w.data(), {rows, cols}, torch::kFloat32).clone().requires_grad_(true);
}

double train(const std::string& cell, int64_t hidden) {
  const int64_t gates = cell == "lstm" ? 4 : 1;
  std::vector<torch::Tensor> params{weights(kVocabulary, gates * hidden, 1), weights(hidden, gates * hidden, 2),
                                    torch::zeros({1, gates * hidden}).requires_grad_(true), weights(hidden, kVocabulary, 3),
                                    torch::zeros({kVocabulary}).requires_grad_(true)};
  const torch::Tensor &W_x = params[0], &W_h = params[1], &b_h = params[2], &W_y = params[3], &b_y = params[4];
  auto text_values = random_text();
  const torch::Tensor text = torch::from_blob(text_values.data(), {kSequences, kSteps + 1}, torch::kInt64).clone();
  return steps_per_second(1.0, [&](int64_t s) {
    const torch::Tensor symbols = text[s].narrow(0, 0, kSteps), targets = text[s].narrow(0, 1, kSteps);
    const torch::Tensor inputs = W_x.index_select(0, symbols);  // the one-hot products: row lookups
    torch::Tensor h = torch::zeros({1, hidden}), c = torch::zeros({1, hidden});
    std::vector<torch::Tensor> states;
    for (int64_t t = 0; t < kSteps; ++t) {
      const torch::Tensor z = torch::addmm(b_h + inputs.narrow(0, t, 1), h, W_h);
      if (cell == "lstm") {
        const auto g = z.chunk(4, 1);
        c = torch::sigmoid(g[1]) * c + torch::sigmoid(g[0]) * torch::tanh(g[3]);
        h = torch::sigmoid(g[2]) * torch::tanh(c);
      } else {
        h = torch::tanh(z);
      }
      states.push_back(h);
    }
    const torch::Tensor logits = torch::addmm(b_y, torch::cat(states), W_y);
    const torch::Tensor loss = torch::nll_loss(torch::log_softmax(logits, 1), targets, {}, at::Reduction::Sum);
    const std::vector<torch::Tensor> grads = torch::autograd::grad({loss}, params);
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < params.size(); ++i) params[i].sub_(grads[i], kLearningRate);
  });
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "train" && (argc == 4 || argc == 5)) {
    const int threads = argc == 5 ? std::atoi(argv[4]) : 1;
    torch::set_num_threads(threads);
    std::printf("%.0f\n", train(argv[2], std::atoll(argv[3])));
    return 0;
  }
  std::fprintf(stderr, "usage: %s train elman|lstm H [threads]\n", argv[0]);
  return 2;
}

// The same training loop written with LibTorch (C++), the peer.
#include <torch/torch.h>

#include <cstdlib>

#include "mlp_common.hpp"

namespace {

double train_throughput(const std::vector<int64_t>& layers, int64_t batch, const torch::Tensor& data,
                        const torch::Tensor& labels) {
  std::vector<torch::Tensor> params;
  for (size_t l = 0; l + 1 < layers.size(); ++l) {
    auto w = bench::random_weights(layers[l], layers[l + 1], 10 + l);
    params.push_back(torch::from_blob(w.data(), {layers[l], layers[l + 1]}, torch::kFloat32).clone().requires_grad_(true));
    params.push_back(torch::zeros({layers[l + 1]}, torch::kFloat32).requires_grad_(true));
  }
  torch::optim::SGD sgd(params, torch::optim::SGDOptions(bench::kLearningRate));
  return bench::throughput(batch, 0.5, [&](int64_t first) {
    auto x = data.narrow(0, first, batch);
    auto y = labels.narrow(0, first, batch);
    torch::Tensor h = x;
    for (size_t l = 0; 2 * l < params.size(); ++l) {
      h = torch::addmm(params[2 * l + 1], h, params[2 * l]);
      if (2 * l + 2 < params.size()) h = torch::tanh(h);
    }
    auto loss = torch::nll_loss(torch::log_softmax(h, 1), y);
    sgd.zero_grad();
    loss.backward();
    sgd.step();
  });
}

}  // namespace

// The same command line as bench_mlp_kiln.
int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "mlp" && argc == 5) {
    torch::set_num_threads(std::atoi(argv[4]));
    auto xs = bench::random_inputs();
    auto ys = bench::random_labels();
    auto data = torch::from_blob(xs.data(), {bench::kExamples, bench::kInputs}, torch::kFloat32).clone();
    auto labels = torch::from_blob(ys.data(), {bench::kExamples}, torch::kInt64).clone();
    for (const auto& layers : bench::models())
      if (bench::model_name(layers) == argv[2])
        std::printf("%.0f\n", train_throughput(layers, std::atoll(argv[3]), data, labels));
    return 0;
  }
  if (mode == "tiny" && argc == 3) {
    torch::set_num_threads(std::atoi(argv[2]));
    torch::NoGradGuard no_grad;
    auto v = torch::ones({10}, torch::kFloat32);
    std::printf("%.3f\n", bench::microseconds_per_call([&] { auto y = 2.0 * v + 1.0; }));
    return 0;
  }
  std::fprintf(stderr, "usage: %s mlp MODEL BATCH THREADS | tiny THREADS\n", argv[0]);
  return 2;
}

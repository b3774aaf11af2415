// LibTorch's side of the LeNet benchmark (lenet_common.hpp), written as its users write it: a
// torch::nn::Module of Conv2d and Linear layers, torch::relu and torch::max_pool2d, cross_entropy,
// loss.backward() and torch::optim::SGD; conv2d alone with torch::autograd::grad.
//   lenet_torch step|conv BATCH THREADS | check-step|check-conv BATCH
#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "lenet_common.hpp"

namespace {

struct LeNetImpl : torch::nn::Module {
  LeNetImpl()
      : conv1(register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 20, 5)))),
        conv2(register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(20, 50, 5)))),
        fc1(register_module("fc1", torch::nn::Linear(800, 500))),
        fc2(register_module("fc2", torch::nn::Linear(500, 10))) {
    // The benchmark's weights (LibTorch's own initialisation law, drawn from fixed seeds).
    torch::NoGradGuard no_grad;
    auto named = named_parameters();
    for (bench::LenetParam& p : bench::lenet_params()) named[p.name].copy_(torch::from_blob(p.values.data(), p.shape, torch::kFloat32));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = torch::max_pool2d(torch::relu(conv1->forward(x)), 2);
    x = torch::max_pool2d(torch::relu(conv2->forward(x)), 2);
    x = torch::relu(fc1->forward(x.flatten(1)));
    return fc2->forward(x);
  }
  torch::nn::Conv2d conv1, conv2;
  torch::nn::Linear fc1, fc2;
};
TORCH_MODULE(LeNet);

struct Step {
  LeNet net;
  torch::optim::SGD sgd{net->parameters(), torch::optim::SGDOptions(bench::kLenetLearningRate)};
  torch::Tensor operator()(const torch::Tensor& x, const torch::Tensor& y) {
    sgd.zero_grad();
    torch::Tensor loss = torch::nn::functional::cross_entropy(net->forward(x), y);
    loss.backward();
    sgd.step();
    return loss;
  }
};

// sum(conv2d(x, w)) and its gradients in x and w.
std::vector<torch::Tensor> conv_forward_backward(const torch::Tensor& x, const torch::Tensor& w) {
  const torch::Tensor s = torch::conv2d(x, w).sum();
  std::vector<torch::Tensor> g = torch::autograd::grad({s}, {x, w});
  return {s, g[0], g[1]};
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  const bool timed = (mode == "step" || mode == "conv") && argc == 4;
  const bool check = (mode == "check-step" || mode == "check-conv") && argc == 3;
  if (!timed && !check) {
    std::fprintf(stderr, "usage: %s step|conv BATCH THREADS | check-step|check-conv BATCH\n", argv[0]);
    return 2;
  }
  const int64_t batch = std::atoll(argv[2]);
  torch::set_num_threads(timed ? std::atoi(argv[3]) : 1);
  if (mode == "step" || mode == "check-step") {
    std::vector<float> images = bench::lenet_images(batch);
    std::vector<int64_t> labels = bench::lenet_labels(batch);
    const torch::Tensor x = torch::from_blob(images.data(), {batch, 1, bench::kImage, bench::kImage}, torch::kFloat32).clone();
    const torch::Tensor y = torch::from_blob(labels.data(), {batch}, torch::kInt64).clone();
    Step step;
    if (check) {
      const double first = step(x, y).item<double>();
      std::printf("%.6f %.6f\n", first, step(x, y).item<double>());
    } else {
      std::printf("%.4f\n", bench::milliseconds_per_call([&] { step(x, y); }));
    }
    return 0;
  }
  std::vector<float> input = bench::conv_input(batch), filters = bench::conv_filters();
  const torch::Tensor x = torch::from_blob(input.data(), {batch, bench::kConvChannels, bench::kConvSize, bench::kConvSize}, torch::kFloat32)
                              .clone()
                              .requires_grad_(true);
  const torch::Tensor w = torch::from_blob(filters.data(), {bench::kConvFilters, bench::kConvChannels, bench::kConvKernel, bench::kConvKernel},
                                           torch::kFloat32)
                              .clone()
                              .requires_grad_(true);
  if (check) {
    const std::vector<torch::Tensor> r = conv_forward_backward(x, w);
    std::printf("%.6e %.6e %.6e\n", r[0].item<double>(), r[1].square().sum().item<double>(), r[2].square().sum().item<double>());
  } else {
    std::printf("%.4f\n", bench::milliseconds_per_call([&] { conv_forward_backward(x, w); }));
  }
  return 0;
}

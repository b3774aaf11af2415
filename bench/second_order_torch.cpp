// LibTorch's side of the second-order benchmark (second_order_common.hpp), written as its users
// would: double backward with torch::autograd::grad(create_graph = true); J v by the
// double-backward trick (the gradient in u of J^T u).
//   second_order_torch grad|gn|hv BATCH THREADS   milliseconds per product
#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "second_order_common.hpp"

namespace {

struct Products {
  std::vector<torch::Tensor> params, directions;

  explicit Products(const std::vector<int64_t>& layers) {
    for (size_t l = 0; l + 1 < layers.size(); ++l) {
      const auto seed = static_cast<uint32_t>(10 + l);
      auto w = bench::random_weights(layers[l], layers[l + 1], seed);
      auto vw = bench::direction(layers[l], layers[l + 1], seed + 100);
      auto vb = bench::direction(1, layers[l + 1], seed + 200);
      params.push_back(torch::from_blob(w.data(), {layers[l], layers[l + 1]}, torch::kFloat32).clone().requires_grad_(true));
      params.push_back(torch::zeros({layers[l + 1]}, torch::kFloat32).requires_grad_(true));
      directions.push_back(torch::from_blob(vw.data(), {layers[l], layers[l + 1]}, torch::kFloat32).clone());
      directions.push_back(torch::from_blob(vb.data(), {layers[l + 1]}, torch::kFloat32).clone());
    }
  }
  torch::Tensor logits(const torch::Tensor& x) const {
    torch::Tensor h = x;
    for (size_t l = 0; 2 * l < params.size(); ++l) {
      h = torch::addmm(params[2 * l + 1], h, params[2 * l]);
      if (2 * l + 2 < params.size()) h = torch::tanh(h);
    }
    return h;
  }
  std::vector<torch::Tensor> operator()(const std::string& product, const torch::Tensor& x, const torch::Tensor& y) const {
    const torch::Tensor f = logits(x);
    if (product == "gn") {
      const torch::Tensor u = torch::zeros_like(f).requires_grad_(true);
      const auto jtu = torch::autograd::grad({f}, params, {u}, true, true);
      const torch::Tensor jv = torch::autograd::grad(jtu, {u}, directions, true)[0];
      const torch::Tensor p = torch::softmax(f, 1).detach();
      const torch::Tensor hjv = (p * jv - p * (p * jv).sum(1, true)) / static_cast<double>(x.size(0));
      return torch::autograd::grad({f}, params, {hjv});
    }
    const torch::Tensor loss = torch::nll_loss(torch::log_softmax(f, 1), y);
    if (product == "grad") return torch::autograd::grad({loss}, params);
    const auto g = torch::autograd::grad({loss}, params, {}, true, true);
    return torch::autograd::grad(g, params, directions);
  }
};

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (!((mode == "grad" || mode == "gn" || mode == "hv") && argc == 4)) {
    std::fprintf(stderr, "usage: %s grad|gn|hv BATCH THREADS\n", argv[0]);
    return 2;
  }
  const int64_t batch = std::atoll(argv[2]);
  torch::set_num_threads(std::atoi(argv[3]));
  const Products products(bench::second_order_layers());
  std::vector<float> xs = bench::random_inputs();
  std::vector<int64_t> ys = bench::random_labels();
  const torch::Tensor x = torch::from_blob(xs.data(), {batch, bench::kInputs}, torch::kFloat32).clone();
  const torch::Tensor y = torch::from_blob(ys.data(), {batch}, torch::kInt64).clone();
  std::printf("%.4f\n", bench::milliseconds_per_call([&] { products(mode, x, y); }));
  return 0;
}

// The eager benchmark, LibTorch's side (the peer; bench/eager.sh): the same rows written with
// LibTorch's C++ API under NoGradGuard, temporaries freed as each loop body ends. The MLP uses
// torch::addmm, as torch::nn::Linear does. "bench_eager_torch THREADS" prints one line per row
// (bench/eager_common.hpp).
#include <torch/torch.h>

#include <cstdlib>
#include <string>

#include "eager_common.hpp"

namespace {

torch::Tensor from(std::vector<float> v, std::vector<int64_t> shape) {
  return torch::from_blob(v.data(), shape, torch::kFloat32).clone();
}

double checksum(const torch::Tensor& t) {
  const torch::Tensor c = t.contiguous();
  return bench::checksum(c.data_ptr<float>(), c.numel());
}

void print_row(const std::string& row, double microseconds, double sum) {
  std::printf("%s %.4g %.9g\n", row.c_str(), microseconds, sum);
  std::fflush(stdout);
}

torch::Tensor vector_of(int64_t n, uint32_t seed) { return from(bench::operand(n, seed), {n}); }

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 || std::atoi(argv[1]) < 1) {
    std::fprintf(stderr, "usage: %s THREADS\n", argv[0]);
    return 2;
  }
  torch::set_num_threads(std::atoi(argv[1]));
  torch::NoGradGuard no_grad;

  for (int64_t n : {bench::kSmall, bench::kLarge}) {
    const torch::Tensor a = vector_of(n, 1), b = vector_of(n, 2);
    print_row("add" + std::to_string(n), bench::median_microseconds([&] { torch::Tensor c = a + b; }), checksum(a + b));
  }
  {
    const torch::Tensor a = vector_of(bench::kLarge, 1), b = vector_of(bench::kLarge, 2);
    auto expression = [&] { return torch::tanh(a * b + 1.0) * torch::exp(-a) - b; };
    print_row("expr" + std::to_string(bench::kLarge), bench::median_microseconds([&] { torch::Tensor c = expression(); }),
              checksum(expression()));
  }
  const torch::Tensor w1 = from(bench::mlp_w1(), {bench::kInputs, bench::kHidden});
  const torch::Tensor b1 = from(bench::mlp_b1(), {bench::kHidden});
  const torch::Tensor w2 = from(bench::mlp_w2(), {bench::kHidden, bench::kClasses});
  const torch::Tensor b2 = from(bench::mlp_b2(), {bench::kClasses});
  for (int64_t batch : bench::kMlpBatches) {
    const torch::Tensor x = from(bench::mlp_x(batch), {batch, bench::kInputs});
    auto predict = [&] { return torch::softmax(torch::addmm(b2, torch::tanh(torch::addmm(b1, x, w1)), w2), 1); };
    print_row("mlp" + std::to_string(batch), bench::median_microseconds([&] { torch::Tensor p = predict(); }),
              checksum(predict()));
  }
  return 0;
}

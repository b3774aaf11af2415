// The same training loop written with LibTorch (C++), the peer.
#include <torch/torch.h>

#include <cstdlib>

#include "torch_mlp.hpp"

namespace {

double train_throughput(const std::vector<int64_t>& layers, int64_t batch, const torch::Tensor& data,
                        const torch::Tensor& labels) {
  bench::TorchMlpStep step(layers);
  return bench::throughput(batch, 0.5, [&](int64_t first) { step(data.narrow(0, first, batch), labels.narrow(0, first, batch)); });
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

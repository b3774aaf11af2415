// Peak heap memory of LibTorch's training step: what a steady training loop holds beyond the
// weights and the data (activations, autograd graph, gradients), counted by heap_counter.cpp.
#include <torch/torch.h>

#include <cstdlib>
#include <string>

#include "heap_counter.hpp"
#include "torch_mlp.hpp"

int main(int argc, char** argv) {
  // "warm": a first training loop runs (and is dropped) before the measured one, so that what the
  // library sets up once per process (compiled kernels, thread state) is not counted.
  const bool warm = argc == 4 && std::string(argv[3]) == "warm";
  if (argc != 3 && !warm) {
    std::fprintf(stderr, "usage: %s MODEL BATCH [warm]\n", argv[0]);
    return 2;
  }
  torch::set_num_threads(1);
  const int64_t batch = std::atoll(argv[2]);
  auto xs = bench::random_inputs();
  auto ys = bench::random_labels();
  auto data = torch::from_blob(xs.data(), {bench::kExamples, bench::kInputs}, torch::kFloat32).clone();
  auto labels = torch::from_blob(ys.data(), {bench::kExamples}, torch::kInt64).clone();
  for (const auto& layers : bench::models()) {
    if (bench::model_name(layers) != argv[1]) continue;
    auto loop = [&] {
      bench::TorchMlpStep step(layers);
      return bench::steady_heap_peak(
          [&](int i) { step(data.narrow(0, i * batch, batch), labels.narrow(0, i * batch, batch)); });
    };
    if (warm) loop();
    const int64_t peak = loop();
    std::printf("%lld\n", static_cast<long long>(peak));
  }
}

// Peak heap memory of kiln's training step: what a steady training loop holds beyond the weights
// and the data (plans, arena, outputs, caches, oneDNN's compiled kernels), counted by
// heap_counter.cpp. bench/memory.sh runs it beside heap_torch.cpp.
#include <kiln/kiln.hpp>

#include <cstdlib>
#include <string>

#include "heap_counter.hpp"
#include "kiln_mlp.hpp"

using namespace kiln;

int main(int argc, char** argv) {
  // "warm": a first training loop runs (and is dropped) before the measured one, so that what the
  // library sets up once per process (compiled kernels, thread state) is not counted.
  const bool warm = argc == 4 && std::string(argv[3]) == "warm";
  if (argc != 3 && !warm) {
    std::fprintf(stderr, "usage: %s MODEL BATCH [warm]\n", argv[0]);
    return 2;
  }
  set_num_threads(1);
  const int64_t batch = std::atoll(argv[2]);
  const Tensor data = Tensor::from(bench::random_inputs(), {bench::kExamples, bench::kInputs});
  const Tensor labels = Tensor::from(bench::random_labels(), {bench::kExamples});
  for (const auto& layers : bench::models()) {
    if (bench::model_name(layers) != argv[1]) continue;
    auto loop = [&] {
      const bench::KilnMlpStep step = bench::kiln_mlp_step(layers);
      Function train = function({step.x, step.y}, {step.loss}, {.updates = step.updates});
      return bench::steady_heap_peak([&](int i) {
        train(data.view({batch, bench::kInputs}, {bench::kInputs, 1}, i * batch * bench::kInputs), labels.view({batch}, {1}, i * batch));
      });
    };
    if (warm) {
      loop();
      release_cached_memory();  // the freed arena blocks kiln keeps for reuse: memory, not set-up
    }
    const int64_t peak = loop();
    std::printf("%lld\n", static_cast<long long>(peak));
  }
}

#include <kiln/kiln.hpp>

#include <cstdlib>

#include "kiln_mlp.hpp"

using namespace kiln;

namespace {

double train_throughput(const std::vector<int64_t>& layers, int64_t batch, const Tensor& data, const Tensor& labels) {
  const bench::KilnMlpStep step = bench::kiln_mlp_step(layers);
  // The steady loop a user writes for speed: kept buffers and Function::call, which allocate
  // nothing per step (tests/steady_call_test.cpp).
  Function train = function({step.x, step.y}, {}, {.updates = step.updates, .keep_buffers = true});
  std::vector<Tensor> args(2), outputs;
  return bench::throughput(batch, 0.5, [&](int64_t first) {
    args[0] = data.view({batch, bench::kInputs}, {bench::kInputs, 1}, first * bench::kInputs);
    args[1] = labels.view({batch}, {1}, first);
    train.call(args, outputs);
  });
}

}  // namespace

// Arguments: "mlp MODEL BATCH THREADS" runs one training configuration, "tiny THREADS" the
// per-call timing; bench/mlp.sh alternates these with LibTorch's so both see the same machine.
int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "mlp" && argc == 5) {
    const Tensor data = Tensor::from(bench::random_inputs(), {bench::kExamples, bench::kInputs});
    const Tensor labels = Tensor::from(bench::random_labels(), {bench::kExamples});
    set_num_threads(std::atoi(argv[4]));
    for (const auto& layers : bench::models())
      if (bench::model_name(layers) == argv[2]) {
        std::printf("%.0f\n", train_throughput(layers, std::atoll(argv[3]), data, labels));
        return 0;
      }
    std::fprintf(stderr, "%s: unknown model %s\n", argv[0], argv[2]);
    return 2;
  }
  if (mode == "tiny" && argc == 3) {
    set_num_threads(std::atoi(argv[2]));
    Var x = vector("x");
    Function tiny = function({x}, {2.0 * x + 1.0});
    Tensor v = Tensor::ones({10});
    std::printf("%.3f\n", bench::microseconds_per_call([&] { tiny(v); }));
    return 0;
  }
  std::fprintf(stderr, "usage: %s mlp MODEL BATCH THREADS | tiny THREADS\n", argv[0]);
  return 2;
}

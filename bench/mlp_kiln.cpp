#include <kiln/kiln.hpp>

#include <cstdlib>

#include "mlp_common.hpp"

using namespace kiln;

namespace {

double train_throughput(const std::vector<int64_t>& layers, int64_t batch, const Tensor& data, const Tensor& labels) {
  Var x = matrix("x"), y = vector("y", i64);
  std::vector<Shared> params;
  Var h = x;
  for (size_t l = 0; l + 1 < layers.size(); ++l) {
    Shared W = shared(Tensor::from(bench::random_weights(layers[l], layers[l + 1], 10 + l), {layers[l], layers[l + 1]}));
    Shared b = shared(Tensor::zeros({layers[l + 1]}));
    params.push_back(W);
    params.push_back(b);
    Var a = dot(h, W) + b;
    h = l + 2 < layers.size() ? tanh(a) : a;
  }
  Var cost = mean(categorical_crossentropy(softmax(h), y));
  std::vector<Var> grads = grad(cost, std::vector<Var>(params.begin(), params.end()));
  Updates updates;
  for (size_t i = 0; i < params.size(); ++i) updates.push_back({params[i], params[i] - bench::kLearningRate * grads[i]});
  Function train = function({x, y}, {}, {.updates = updates});
  return bench::throughput(batch, 0.5, [&](int64_t first) {
    train(data.view({batch, bench::kInputs}, {bench::kInputs, 1}, first * bench::kInputs),
          labels.view({batch}, {1}, first));
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
      if (bench::model_name(layers) == argv[2])
        std::printf("%.0f\n", train_throughput(layers, std::atoll(argv[3]), data, labels));
    return 0;
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

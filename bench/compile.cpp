// Per-node cost of compiling, planning and calling, by graph size: the training step (forward,
// backward, SGD updates) of an MLP of L layers of width 16, compiled in fast_run, for L from 125 to
// 4000 (about 10 nodes per layer). Prints one row per size: if a stage's cost per node stays flat
// as the graph grows, that stage scales linearly. Optional argument: the largest L.
#include <kiln/kiln.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>

using namespace kiln;

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

struct Row {
  int64_t nodes = 0;
  double grad_s = 0, compile_s = 0, first_call_s = 0, steady_call_s = 0;
};

Row measure(int layers, int width) {
  Var x = matrix("x"), y = vector("y", i64);
  std::vector<Shared> params;
  Var h = x;
  for (int l = 0; l < layers; ++l) {
    Shared W = shared(Tensor::full({width, width}, 0.01), "W"), b = shared(Tensor::zeros({width}), "b");
    params.push_back(W);
    params.push_back(b);
    h = tanh(dot(h, W) + b);
  }
  Var loss = mean(categorical_crossentropy(softmax(h), y));
  Row row;
  auto start = std::chrono::steady_clock::now();
  std::vector<Var> grads = grad(loss, std::vector<Var>(params.begin(), params.end()));
  row.grad_s = seconds_since(start);
  Updates updates;
  for (size_t i = 0; i < params.size(); ++i) updates.push_back({params[i], params[i] - 0.01 * grads[i]});
  start = std::chrono::steady_clock::now();
  Function step = function({x, y}, {Out(loss, {.borrow = true})}, {.updates = updates, .keep_buffers = true});
  row.compile_s = seconds_since(start);
  row.nodes = step.compile_report().nodes_after;
  const std::vector<Tensor> args{Tensor::ones({4, width}), Tensor::from(std::vector<int64_t>{0, 1, 2, 3})};
  std::vector<Tensor> outputs;
  start = std::chrono::steady_clock::now();
  step.call(args, outputs);  // plans the signature, then runs
  const double first = seconds_since(start);
  std::vector<double> calls;
  for (int i = 0; i < 7; ++i) {
    start = std::chrono::steady_clock::now();
    step.call(args, outputs);
    calls.push_back(seconds_since(start));
  }
  std::sort(calls.begin(), calls.end());
  row.steady_call_s = calls[calls.size() / 2];
  row.first_call_s = first - row.steady_call_s;  // the planning the first call adds
  return row;
}

}  // namespace

int main(int argc, char** argv) {
  const int largest = argc > 1 ? std::atoi(argv[1]) : 4000, width = 16;
  set_num_threads(1);
  std::printf("MLP training step, width %d, fast_run, 1 thread: cost per node after rewriting\n", width);
  std::printf("%7s %8s %12s %16s %18s %17s\n", "layers", "nodes", "grad us/node", "compile us/node",
              "planning us/node", "steady ns/node");
  for (int layers = 125; layers <= largest; layers *= 2) {
    const Row r = measure(layers, width);
    const double n = static_cast<double>(r.nodes);
    std::printf("%7d %8lld %12.2f %16.2f %18.2f %17.1f\n", layers, static_cast<long long>(r.nodes), r.grad_s / n * 1e6,
                r.compile_s / n * 1e6, r.first_call_s / n * 1e6, r.steady_call_s / n * 1e9);
    std::fflush(stdout);
  }
}

// Per-node cost of compiling, planning and calling, by graph size: the training step (forward,
// backward, SGD updates) of an MLP of L layers of width 16, compiled in fast_run, for L from 125 to
// 4000 (about 10 nodes per layer), then the compile cost of a gradient through a chain of ifelse
// links, 100 to L/5 links. Prints one row per size: if a stage's cost per node stays flat as the
// graph grows, that stage scales linearly. Optional argument: the largest L.
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
    // Weights of 1/width keep every activation and gradient a normal float at any depth. With 0.01
    // (before stop 31) the activations shrank sixfold per layer and were subnormal past about 50
    // layers: the deep rows then timed the CPU's slow arithmetic on subnormals, not kiln.
    Shared W = shared(Tensor::full({width, width}, 1.0 / width), "W"), b = shared(Tensor::zeros({width}), "b");
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

// The gradient of a chain of links, each two ifelses on one condition, both branches read by
// what follows: its program nests the gradient's blocks one within the next. Compile time alone.
Row measure_ifelse_chain(int links) {
  Var x = scalar("x", f64), y = x;
  for (int k = 0; k < links; ++k) {
    Var c = x > static_cast<double>(k % 7) * 0.1 - 0.3;
    y = ifelse(c, sqrt(y * y + 1.0) * 0.999, y * 0.5) + ifelse(c, x * 0.0, cos(y) * 0.1);
  }
  Row row;
  auto start = std::chrono::steady_clock::now();
  const Var g = grad(y, x);
  row.grad_s = seconds_since(start);
  start = std::chrono::steady_clock::now();
  Function f = function({x}, {g});
  row.compile_s = seconds_since(start);
  row.nodes = f.compile_report().nodes_after;
  return row;
}

}  // namespace

int main(int argc, char** argv) {
  const int largest = argc > 1 ? std::atoi(argv[1]) : 4000, width = 16;
  set_num_threads(1);
  std::printf("MLP training step, width %d, fast_run, 1 thread: cost per node after rewriting\n", width);
  std::printf("%7s %8s %12s %16s %18s %17s\n", "layers", "nodes", "grad us/node", "compile us/node",
              "planning us/node", "steady ns/node");
  auto print = [&](const char* label, int layers) {
    const Row r = measure(layers, width);
    const double n = static_cast<double>(r.nodes);
    std::printf("%7d %8lld %12.2f %16.2f %18.2f %17.1f%s\n", layers, static_cast<long long>(r.nodes), r.grad_s / n * 1e6,
                r.compile_s / n * 1e6, r.first_call_s / n * 1e6, r.steady_call_s / n * 1e9, label);
    std::fflush(stdout);
  };
  // The process's first step also pays what a process pays once: the matrix kernel for each new
  // product shape chosen by measuring it, the thread pool's start. Shown apart from the rows.
  print("   (first in the process)", 125);
  for (int layers = 125; layers <= largest; layers *= 2) print("", layers);
  std::printf("\nGradient of a chain of ifelse links (nested branch blocks), fast_run: compile cost per node\n");
  std::printf("%7s %8s %12s %16s\n", "links", "nodes", "grad us/node", "compile us/node");
  for (int links = 100; links <= largest / 5; links *= 2) {
    const Row r = measure_ifelse_chain(links);
    const double n = static_cast<double>(r.nodes);
    std::printf("%7d %8lld %12.2f %16.2f\n", links, static_cast<long long>(r.nodes), r.grad_s / n * 1e6,
                r.compile_s / n * 1e6);
    std::fflush(stdout);
  }
}

// kiln's side of the recurrent benchmarks (bench/rnn.sh runs them beside LibTorch's):
//   rnn_kiln train elman|lstm H [threads]   time steps per second of the training step (kiln_rnn.hpp)
//   rnn_kiln overhead             nanoseconds per step of a scan whose body is one scalar addition
//   rnn_kiln compile              seconds to compile scans of 1 000-node bodies, and a loop's
//                                 compile time at 10 and 100 000 steps
//   rnn_kiln memory               the planned memory of a 64-step training step and of a
//                                 100 000-step loop whose last value alone is used
#include <kiln/kiln.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "kiln_rnn.hpp"

using namespace kiln;
using namespace bench::rnn;

namespace {

double train(const std::string& cell, int64_t hidden) {
  const KilnRnnStep step = kiln_rnn_step(cell, hidden);
  Function f = function({step.symbols, step.targets}, {}, {.updates = step.updates, .keep_buffers = true});
  const Tensor text = Tensor::from(random_text(), {kSequences, kSteps + 1});
  std::vector<Tensor> args(2), outputs;
  return steps_per_second(1.0, [&](int64_t s) {
    args[0] = text.view({kSteps}, {1}, s * (kSteps + 1));
    args[1] = text.view({kSteps}, {1}, s * (kSteps + 1) + 1);
    f.call(args, outputs);
  });
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// A running sum of scalars over n steps: the loop's own cost per step.
void overhead() {
  Var x = vector("x", f64), s0 = scalar("s0", f64);
  ScanResult r = scan([](const std::vector<Var>& a) { return std::vector<Var>{a[0] + a[1]}; }, {.sequences = {x}, .outputs_info = {s0}});
  Function f = function({x, s0}, {Out(r.outputs[0], {.borrow = true})}, {.keep_buffers = true});
  for (int64_t n : {1000, 100000}) {
    const Tensor xs = Tensor::ones({n}, f64);
    std::vector<Tensor> args{xs, Tensor::scalar(0.0)}, outputs;
    f.call(args, outputs);
    int64_t calls = 0;
    const auto start = std::chrono::steady_clock::now();
    while (seconds_since(start) < 0.5) {
      f.call(args, outputs);
      ++calls;
    }
    std::printf("running sum, %6lld steps: %6.1f ns per step\n", static_cast<long long>(n), 1e9 * seconds_since(start) / static_cast<double>(calls * n));
  }
}

// A body of about `nodes` nodes: a chain of elementwise operations and products on a state.
Var deep_body(const Var& h, const Var& x, const Var& W, int64_t nodes) {
  Var v = h;
  for (int64_t i = 0; i < nodes / 4; ++i) v = tanh(dot(v, W) * 0.5 + x);
  return v;
}

void compile() {
  for (int64_t nodes : {1000}) {
    Var X = matrix("X"), h0 = vector("h0"), W = matrix("W");
    auto start = std::chrono::steady_clock::now();
    ScanResult r = scan([&](const std::vector<Var>& a) { return std::vector<Var>{deep_body(a[1], a[0], W, nodes)}; },
                        {.sequences = {X}, .outputs_info = {h0}});
    const Var cost = sum(r.outputs[0]);
    const std::vector<Var> g = grad(cost, {W, h0});
    const double build = seconds_since(start);
    start = std::chrono::steady_clock::now();
    Function forward = function({X, h0, W}, {cost});
    forward(Tensor::ones({5, 8}), Tensor::zeros({8}), Tensor::full({8, 8}, 0.01f));
    const double forward_seconds = seconds_since(start);
    start = std::chrono::steady_clock::now();
    Function with_grad = function({X, h0, W}, {cost, g[0], g[1]});
    with_grad(Tensor::ones({5, 8}), Tensor::zeros({8}), Tensor::full({8, 8}, 0.01f));
    std::printf("%lld-node body: building the graph and its gradient %.3f s; compile + first call: forward %.3f s, with gradient %.3f s\n",
                static_cast<long long>(nodes), build, forward_seconds, seconds_since(start));
  }
  for (int64_t steps : {10, 100000}) {
    Var h0 = vector("h0"), W = matrix("W");
    ScanResult r = scan([&](const std::vector<Var>& a) { return std::vector<Var>{tanh(dot(a[0], W))}; },
                        {.outputs_info = {h0}, .n_steps = constant(Tensor::scalar(steps))});
    const Var cost = sum(r.outputs[0]);
    const auto start = std::chrono::steady_clock::now();
    Function f = function({h0, W}, {cost, grad(cost, W)});
    std::printf("loop of %6lld steps with its gradient: compile %.4f s\n", static_cast<long long>(steps), seconds_since(start));
  }
}

void report(const std::string& name, const Function& f, const std::vector<Shape>& shapes) {
  const MemoryReport r = f.memory_report(shapes);
  std::printf("%-44s planned %10lld  naive %10lld  planned/naive %.3f  lower bound %10lld  results %10lld\n", name.c_str(),
              static_cast<long long>(r.planned_peak_bytes), static_cast<long long>(r.naive_bytes),
              static_cast<double>(r.planned_peak_bytes) / static_cast<double>(r.naive_bytes), static_cast<long long>(r.lower_bound_bytes),
              static_cast<long long>(r.result_bytes));
}

void memory() {
  for (int64_t hidden : {100, 500}) {
    const KilnRnnStep step = kiln_rnn_step("elman", hidden);
    Function f = function({step.symbols, step.targets}, {step.loss}, {.updates = step.updates});
    report("Elman H=" + std::to_string(hidden) + ", 64-step training step", f, {{64}, {64}});
  }
  for (int64_t steps : {1000, 100000}) {
    Var h0 = vector("h0"), W = matrix("W");
    ScanResult r = scan([&](const std::vector<Var>& a) { return std::vector<Var>{tanh(dot(a[0], W))}; },
                        {.outputs_info = {h0}, .n_steps = constant(Tensor::scalar(steps))});
    Function f = function({h0, W}, {r.outputs[0][VarIndex(-1)]});
    report("last state of " + std::to_string(steps) + " steps, H=100", f, {{100}, {100, 100}});
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "train" && (argc == 4 || argc == 5)) {
    const int threads = argc == 5 ? std::atoi(argv[4]) : 1;
    set_num_threads(threads);
    std::printf("%.0f\n", train(argv[2], std::atoll(argv[3])));
    return 0;
  }
  if (mode == "overhead") return overhead(), 0;
  if (mode == "compile") return compile(), 0;
  if (mode == "memory") return memory(), 0;
  std::fprintf(stderr, "usage: %s train elman|lstm H [threads] | overhead | compile | memory\n", argv[0]);
  return 2;
}

// One optimizer step on a parameter of 4M floats, the gradient given as an input: a function whose
// only work is the rule's updates (Adam: both moments and the parameter, written over the shared
// variables' own buffers), in milliseconds per call on 1 and 2 threads. Usage:
// bench_optimizer_step [adam|rmsprop|momentum|sgd].
#include <kiln/kiln.hpp>

#include <cstdio>
#include <cstring>

#include "timing.hpp"

using namespace kiln;

int main(int argc, char** argv) {
  const char* rule = argc > 1 ? argv[1] : "adam";
  const int64_t n = int64_t{1} << 22;
  Shared p = shared(Tensor::full({n}, 0.5f), "p");
  Var g = vector("g");
  Updates updates;
  if (std::strcmp(rule, "adam") == 0) updates = adam(Gradients(std::vector<Var>{g}), {p});
  else if (std::strcmp(rule, "rmsprop") == 0) updates = rmsprop(Gradients(std::vector<Var>{g}), {p});
  else if (std::strcmp(rule, "momentum") == 0) updates = momentum(Gradients(std::vector<Var>{g}), {p});
  else if (std::strcmp(rule, "sgd") == 0) updates = sgd(Gradients(std::vector<Var>{g}), {p});
  else return std::fprintf(stderr, "unknown rule %s\n", rule), 2;
  Function step = function({g}, {}, {.updates = updates});
  const Tensor gradient = Tensor::full({n}, 1e-3f);
  std::printf("%s step over %lld floats, gradient given\n%-8s %10s\n", rule, static_cast<long long>(n), "threads", "ms/call");
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    std::printf("%-8d %10.3f\n", threads, bench::milliseconds_per_call([&] { step({gradient}); }));
  }
}

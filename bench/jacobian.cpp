// The Jacobian of a 784-50-N softmax MLP's output (for one example, or the mean over a batch of
// examples), with respect to one weight matrix: the scan over the output's elements against the
// vectorized form (docs/differentiation.md).
//   bench_jacobian N W1|W2 scan|vectorized [EXAMPLES]   milliseconds per call of the compiled jacobian
#include <kiln/kiln.hpp>

#include <cstdio>
#include <algorithm>
#include <cstdlib>
#include <string>

#include "timing.hpp"

using namespace kiln;

int main(int argc, char** argv) {
  if (argc != 4 && argc != 5) {
    std::fprintf(stderr, "usage: bench_jacobian N W1|W2 scan|vectorized [EXAMPLES]\n");
    return 2;
  }
  const int64_t n = std::atoll(argv[1]), hidden = 50, in = 784, examples = argc == 5 ? std::atoll(argv[4]) : 0;
  const std::string wrt = argv[2], form = argv[3];
  auto weights = [](int64_t rows, int64_t cols, double scale) {
    std::vector<float> w(rows * cols);
    for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(scale * ((i * 7919 % 1000) / 500.0 - 1.0));
    return Tensor::from(w, {rows, cols});
  };
  Shared W1 = shared(weights(in, hidden, 0.05), "W1"), b1 = shared(Tensor::zeros({hidden}), "b1");
  Shared W2 = shared(weights(hidden, n, 0.2), "W2"), b2 = shared(Tensor::zeros({n}), "b2");
  Var x = examples ? matrix("x") : vector("x");
  const Var probabilities = softmax(dot(tanh(dot(x, W1) + b1), W2) + b2);
  const Var y = examples ? mean(probabilities, {0}) : probabilities;
  const Var J = jacobian(y, wrt == "W1" ? Var(W1) : Var(W2), {.vectorize = form == "vectorized"});
  Function f = function({x}, {J});
  if (std::getenv("BENCH_GRAPH")) std::printf("%s\n", f.graph_text().c_str());
  const Tensor example = examples ? weights(examples, in, 1.0) : weights(1, in, 1.0).reshape({in});
  const double ms = bench::milliseconds_per_call([&] { f(example); });
  std::printf("jacobian of y[%lld] in %s (%s, %lld examples): %.3f ms, shape", static_cast<long long>(n), wrt.c_str(), form.c_str(),
              static_cast<long long>(std::max<int64_t>(examples, 1)), ms);
  const Tensor result = f(example)[0];
  for (int64_t d : result.shape()) std::printf(" %lld", static_cast<long long>(d));
  std::printf("\n");
}

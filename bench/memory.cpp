// The memory plan of training steps: planned peak against naive (a buffer per value) and against
// the lower bound of the schedule (the most bytes live at one time, in place and views applied).
#include <kiln/kiln.hpp>

#include "kiln_mlp.hpp"

#include <cstdio>
#include <string>
#include <vector>

using namespace kiln;

namespace {

void report(const std::string& name, const Function& f, const std::vector<Shape>& shapes) {
  MemoryReport r = f.memory_report(shapes);
  std::printf("%-34s %12lld %12lld %12lld %8.3f %8.3f %12lld %zu\n", name.c_str(), static_cast<long long>(r.planned_peak_bytes),
              static_cast<long long>(r.naive_bytes), static_cast<long long>(r.lower_bound_bytes),
              static_cast<double>(r.planned_peak_bytes) / static_cast<double>(r.naive_bytes),
              static_cast<double>(r.planned_peak_bytes) / static_cast<double>(r.lower_bound_bytes),
              static_cast<long long>(r.persistent_bytes), r.unplanned.size());
}

Function mlp_step(const std::vector<int64_t>& layers) {
  const bench::KilnMlpStep step = bench::kiln_mlp_step(layers);
  return function({step.x, step.y}, {step.loss}, {.updates = step.updates});
}

}  // namespace

int main() {
  std::printf("%-34s %12s %12s %12s %8s %8s %12s %s\n", "graph", "planned", "naive", "lower bound", "p/naive", "p/lower",
              "persistent", "unplanned");
  for (const std::vector<int64_t>& layers : std::vector<std::vector<int64_t>>{{784, 10}, {784, 500, 10}, {784, 1000, 1000, 1000, 10}}) {
    Function step = mlp_step(layers);
    std::string name;
    for (size_t i = 0; i < layers.size(); ++i) name += (i ? "-" : "") + std::to_string(layers[i]);
    for (int64_t batch : {60, 1000}) report(name + " step, batch " + std::to_string(batch), step, {{batch, 784}, {batch}});
  }
  Var x = matrix("x");
  Var h = x;
  for (int i = 0; i < 100; ++i) h = tanh(dot(h, shared(Tensor::full({256, 256}, 0.01))) + 1.0);
  Var cost = sum(h * h);
  Function chain = function({x}, {cost, grad(cost, x)});
  report("100-layer chain 256 wide, batch 60", chain, {{60, 256}});
}

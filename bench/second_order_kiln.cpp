// kiln's side of the second-order benchmark (second_order_common.hpp): the products built with
// Rop and Lop, compiled like any graph.
//   second_order_kiln grad|gn|hv BATCH THREADS   milliseconds per product
//   second_order_kiln memory BATCH               planned peak of each function
#include <kiln/kiln.hpp>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "second_order_common.hpp"

using namespace kiln;

namespace {

struct Products {
  Var x = matrix("x"), y = vector("y", i64);
  std::vector<Shared> params, directions;
  Var loss, logits;

  explicit Products(const std::vector<int64_t>& layers) {
    Var h = x;
    for (size_t l = 0; l + 1 < layers.size(); ++l) {
      const auto seed = static_cast<uint32_t>(10 + l);
      params.push_back(shared(Tensor::from(bench::random_weights(layers[l], layers[l + 1], seed), {layers[l], layers[l + 1]}), "W"));
      params.push_back(shared(Tensor::zeros({layers[l + 1]}), "b"));
      directions.push_back(shared(Tensor::from(bench::direction(layers[l], layers[l + 1], seed + 100), {layers[l], layers[l + 1]}), "vW"));
      directions.push_back(shared(Tensor::from(bench::direction(1, layers[l + 1], seed + 200), {layers[l + 1]}), "vb"));
      const Var a = dot(h, params[params.size() - 2]) + params.back();
      h = l + 2 < layers.size() ? tanh(a) : a;
    }
    logits = h;
    loss = mean(categorical_crossentropy(softmax(logits), y));
  }
  std::vector<Var> wrt() const { return std::vector<Var>(params.begin(), params.end()); }
  std::vector<Var> v() const { return std::vector<Var>(directions.begin(), directions.end()); }

  std::vector<Var> outputs(const std::string& product) const {
    if (product == "grad") return grad(loss, wrt());
    if (product == "hv") return Rop(grad(loss, wrt()), wrt(), v());  // Pearlmutter: R{grad}
    // Gauss-Newton in two passes: J v forward, H_L (J v) in the logits, J^T back.
    const Var jv = Rop({logits}, wrt(), v())[0];
    const Var p = softmax(logits);
    const Var batch = cast(shape_of(logits)[0], f32);
    const Var hjv = (p * jv - p * sum(p * jv, {1}, true)) / batch;
    return Lop({logits}, wrt(), {hjv});
  }

  Function compile(const std::string& product) const {
    std::vector<Out> outs;
    for (const Var& o : outputs(product)) outs.push_back(Out(o, {.borrow = true}));
    return function({x, y}, outs, {.keep_buffers = true, .allow_unused_inputs = true});  // G v does not read the labels
  }
};

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  const Products products(bench::second_order_layers());
  if (mode == "memory" && argc == 3) {
    const int64_t batch = std::atoll(argv[2]);
    for (const char* product : {"grad", "gn", "hv"}) {
      const MemoryReport r = products.compile(product).memory_report({{batch, bench::kInputs}, {batch}});
      std::printf("%-5s batch %5lld: planned peak %10lld bytes\n", product, static_cast<long long>(batch), static_cast<long long>(r.planned_peak_bytes));
    }
    return 0;
  }
  if ((mode == "grad" || mode == "gn" || mode == "hv") && argc == 4) {
    const int64_t batch = std::atoll(argv[2]);
    set_num_threads(std::atoi(argv[3]));
    const Function f = products.compile(mode);
    const std::vector<float> xs = bench::random_inputs();
    const std::vector<int64_t> ys = bench::random_labels();
    const std::vector<Tensor> args{Tensor::from(std::vector<float>(xs.begin(), xs.begin() + batch * bench::kInputs), {batch, bench::kInputs}),
                                   Tensor::from(std::vector<int64_t>(ys.begin(), ys.begin() + batch), {batch})};
    std::vector<Tensor> out;
    std::printf("%.4f\n", bench::milliseconds_per_call([&] { f.call(args, out); }));
    return 0;
  }
  std::fprintf(stderr, "usage: %s grad|gn|hv BATCH THREADS | memory BATCH\n", argv[0]);
  return 2;
}

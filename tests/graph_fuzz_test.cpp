// The differential fuzzer: random graphs over the public ops (shared variables, updates, givens
// and Lop included), compiled in every mode, on 1 to 3 threads, with kept buffers and borrowed
// inputs and outputs or without, each called twice: every output and every shared value must
// equal a plain, single-threaded, copying run. Seeds are fixed; KILN_FUZZ_SEEDS runs more
// (bench/fuzz.sh); KILN_FUZZ_SHOW=seed checks one seed and prints what locates a failure.
#include <cstdlib>
#include <typeinfo>
#include <iostream>
#include <set>
#include <sstream>

#include "random_graphs.hpp"
#include "rewrite/engine.hpp"

using namespace kiln;
using namespace kiln::test;

namespace {

int seeds(int default_count) {
  const char* v = std::getenv("KILN_FUZZ_SEEDS");
  return v ? std::atoi(v) : default_count;
}

struct Config {
  Mode mode = Mode("plain", {});
  int threads = 1;
  bool keep_buffers = false, borrow_inputs = false, borrow_outputs = false;
  std::string str() const {
    return mode.name() + ", " + std::to_string(threads) + " threads" + (keep_buffers ? ", keep_buffers" : "") +
           (borrow_inputs ? ", borrowed inputs" : "") + (borrow_outputs ? ", borrowed outputs" : "");
  }
};

Config random_config(std::mt19937& rng) {
  const Mode modes[] = {Mode("plain", {}), Mode::fast_compile(), Mode::fast_run(), Mode::debug()};
  return {modes[rng() % 4], 1 + static_cast<int>(rng() % 3), rng() % 2 == 0, rng() % 2 == 0, rng() % 2 == 0};
}

// Whether v is computed through an f32 value anywhere: then modes may round differently in f32.
bool through_f32(const Var& v) {
  std::vector<const Variable*> stack{v.get()};
  std::set<const Variable*> seen;
  while (!stack.empty()) {
    const Variable* x = stack.back();
    stack.pop_back();
    if (!seen.insert(x).second) continue;
    if (x->type.dtype == f32) return true;
    if (x->owner)
      for (const Var& in : x->owner->inputs) stack.push_back(in.get());
  }
  return false;
}

// Equal within rounding: relative to the largest magnitude of the expected tensor; NaN where NaN.
std::optional<std::string> difference(const Tensor& got, const Tensor& want, bool single = false) {
  if (got.shape() != want.shape()) return "shape " + shape_str(got.shape()) + " instead of " + shape_str(want.shape());
  if (got.dtype() != want.dtype()) return std::string("dtype ") + dtype_name(got.dtype()) + " instead of " + dtype_name(want.dtype());
  const auto g = got.to_vector<double>(), w = want.to_vector<double>();
  double scale = 1;
  for (double x : w)
    if (std::isfinite(x)) scale = std::max(scale, std::fabs(x));
  const double tol = (single || got.dtype() == f32 ? 1e-4 : 1e-9) * scale;
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(w[i]) != std::isnan(g[i]) || (!std::isnan(w[i]) && std::fabs(g[i] - w[i]) > tol && g[i] != w[i]))
    {
      std::ostringstream m;
      m.precision(17);
      m << "element " << i << " is " << g[i] << " instead of " << w[i] << " (tolerance " << tol << ")";
      return m.str();
    }
  }
  return std::nullopt;
}

struct Case {
  int64_t rows = 4, cols = 5;
  std::vector<Var> inputs;
  std::vector<Var> outputs;
  Updates updates;
  Givens givens;
  std::vector<Shared> shared_vars;
  std::vector<Tensor> shared_start;
  std::vector<Tensor> args;
  std::string text;
};

Case random_case(uint32_t seed) {
  Case c;
  std::mt19937 shapes(seed + 99);
  const int64_t row_choices[] = {4, 4, 3, 1, 2, 0}, col_choices[] = {5, 5, 3, 1, 6};
  c.rows = row_choices[shapes() % 6];
  c.cols = col_choices[shapes() % 5];
  const int64_t kRows = c.rows, kCols = c.cols;
  Var a = matrix("A", f64), b = matrix("B", f64), v = vector("v", f64), s = scalar("s", f64), e = matrix("E", f64);
  Var h = matrix("H", f32);  // an f32 input: its arithmetic promotes
  Shared w = shared(random_tensor({kRows, kCols}, f64, -1, 1, seed + 3), "W");
  Shared u = shared(random_tensor({kCols}, f64, -1, 1, seed + 4), "u");
  RandomGraph g(seed, {{a, {kRows, kCols}}, {b, {kRows, kCols}}, {v, {kCols}}, {s, {}}, {w, {kRows, kCols}}, {u, {kCols}},
                       {h * 1.0, {kRows, kCols}}});
  const int steps = 10 + static_cast<int>(g.below(20));
  for (int i = 0; i < steps; ++i) g.step();
  // The first output reads many values (each summed), the others are values of the pool as they are.
  const auto& pool = g.pool();
  Var total = sum(pool.back().var);
  for (int i = 0; i < 5; ++i) total = total + sum(g.pick().var) * 0.25;
  c.outputs.push_back(total);
  const int n_out = static_cast<int>(g.below(3));
  for (int i = 0; i < n_out; ++i) c.outputs.push_back(g.pick().var);
  switch (g.below(5)) {  // outputs the alias rules care about
    case 0: c.outputs.push_back(a); break;
    case 1: c.outputs.push_back(transpose(b)); break;
    case 2: c.outputs.push_back(w); break;
    case 3: c.outputs.push_back(constant(Tensor::from({1.5, -2.5}, {2}))); break;
    default: break;
  }
  c.inputs = {a, b, v, s, h};
  if (g.coin()) {  // Lop of the first output with respect to A
    const Value first = g.pool().back();
    if (first.shape == Shape{kRows, kCols} && first.var.dtype() == f64) {
      c.outputs.push_back(Lop({first.var}, {a}, {e}, {.disconnected_inputs = DisconnectedInputs::zero})[0]);
      c.inputs.push_back(e);
    }
  }
  if (g.coin()) c.updates.push_back({w, cast(g.of_shape({kRows, kCols}).var * 0.5, f64)});
  if (g.coin()) c.updates.push_back({u, cast(g.of_shape({kCols}).var * 0.5 + u * 0.5, f64)});
  if (g.coin() && g.coin()) {  // v stands for a graph of A
    c.givens.push_back({v, sum(a, {0}) * 0.1});
    c.inputs.erase(c.inputs.begin() + 2);
  }
  c.shared_vars = {w, u};
  c.shared_start = {w.get_value(), u.get_value()};
  // Arguments: contiguous, a transposed view, or a row view of a larger tensor.
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    const Var& x = c.inputs[i];
    Shape shape;
    for (int64_t d = 0; d < x.ndim(); ++d) shape.push_back(x.ndim() == 1 ? kCols : d == 0 ? kRows : kCols);
    Tensor value = random_tensor(shape, x.dtype(), -1.5, 1.5, seed * 10 + i);
    if (x.ndim() == 2 && shapes() % 3 == 0) {
      Tensor stored = random_tensor({kCols, kRows}, x.dtype(), -1.5, 1.5, seed * 10 + i);
      value = stored.view({kRows, kCols}, {1, kRows}, 0);
    } else if (x.ndim() == 2 && shapes() % 3 == 0) {
      Tensor wide = random_tensor({kRows, kCols + 2}, x.dtype(), -1.5, 1.5, seed * 10 + i);
      value = wide.view({kRows, kCols}, {kCols + 2, 1}, 1);
    }
    c.args.push_back(value);
  }
  c.text = g.text(c.outputs);
  return c;
}

// Runs the case twice under a configuration: per call, the outputs (copied at once) and then the
// shared values. Shared variables start from the same values; inputs are fresh copies when lent.
std::vector<std::vector<Tensor>> run(const Case& c, const Config& config) {
  ThreadsForScope threads(config.threads);
  for (size_t i = 0; i < c.shared_vars.size(); ++i) {
    Shared s = c.shared_vars[i];
    s.set_value(c.shared_start[i]);
  }
  std::vector<In> ins;
  for (const Var& x : c.inputs) ins.push_back(In(x, {.borrow = config.borrow_inputs}));
  std::vector<Out> outs;
  for (const Var& y : c.outputs) outs.push_back(Out(y, {.borrow = config.borrow_outputs}));
  Function f = function(ins, outs, {.updates = c.updates, .givens = c.givens, .mode = config.mode,
                                    .keep_buffers = config.keep_buffers, .allow_unused_inputs = true});
  std::vector<std::vector<Tensor>> calls;
  for (int call = 0; call < 2; ++call) {
    std::vector<Tensor> args;
    for (const Tensor& a : c.args) args.push_back(config.borrow_inputs ? a.clone() : a);
    std::vector<Tensor> seen;
    for (const Tensor& o : f(args)) seen.push_back(o.clone());
    for (const Shared& s : c.shared_vars) seen.push_back(s.get_value());
    calls.push_back(std::move(seen));
  }
  return calls;
}

// KILN_FUZZ_SHOW=seed: that seed's graph and its first output with every rewrite group, and every
// single rewrite, applied alone: where a mode disagrees, the rewrite at fault shows.
void show(const Case& c) {
  std::cout << c.text;
  std::vector<Mode> modes{Mode("plain", {}), Mode::fast_compile(), Mode::fast_run(), Mode::debug()};
  for (const char* group : {"merge", "constant_folding", "canonicalize", "stabilize", "specialize", "fusion"}) {
    modes.push_back(Mode(std::string("only ") + group, {group}));
    const RewriteGroup& whole = rewrite_group(group);
    for (const auto& g : whole.globals) {
      register_rewrite_group({std::string("one ") + g.name, {g}, {}});
      modes.push_back(Mode(std::string("one ") + g.name, {std::string("one ") + g.name}));
    }
    for (const auto& l : whole.locals) {
      register_rewrite_group({std::string("one ") + l.name, {}, {l}});
      modes.push_back(Mode(std::string("one ") + l.name, {std::string("one ") + l.name}));
    }
  }
  for (const Mode& mode : modes) {
    Config config;
    config.mode = mode;
    try {
      std::cout << mode.name() << ": " << run(c, config)[0][0].to_vector<double>()[0] << "\n";
    } catch (const std::exception& e) {
      std::cout << mode.name() << ": " << e.what() << "\n";
    }
  }
}

}  // namespace

TEST(GraphFuzz, EveryModeThreadCountAndMemoryOptionAgreesWithAPlainRun) {
  const char* one = std::getenv("KILN_FUZZ_SHOW");
  const int n = one ? 1 : seeds(150);
  std::vector<uint32_t> seed_list;
  for (uint32_t seed = one ? static_cast<uint32_t>(std::atoi(one)) : 0, end = seed + static_cast<uint32_t>(n); seed < end; ++seed)
    seed_list.push_back(seed);
  // Seeds longer runs found failing, kept for good: debug mode judged an f64 value computed from
  // f32 values at f64's precision (1638, 3 threads), and blamed fusion for a function that fails
  // on its values anyway, a minimum over no elements (2617); a guard block ran before an input of its work (4019).
  if (!one)
    for (uint32_t seed : {1638u, 2617u, 4019u})
      if (seed >= static_cast<uint32_t>(n)) seed_list.push_back(seed);
  int graphs = 0, runs = 0, failing = 0;
  for (const uint32_t seed : seed_list) {
    const Case c = random_case(seed);
    if (one) show(c);
    std::vector<Tensor> inputs_before;
    for (const Tensor& a : c.args) inputs_before.push_back(a.clone());
    std::vector<std::vector<Tensor>> want;
    std::string plain_error;  // a graph may fail on its values (an empty axis): then every run must
    try {
      want = run(c, Config{});
    } catch (const Error& e) {
      plain_error = typeid(e).name();
      ++failing;
    }
    ++graphs;
    std::vector<bool> single;  // per output, then per shared value: computed through f32
    for (const Var& o : c.outputs) single.push_back(through_f32(o));
    bool updates_through_f32 = false;  // then the second call reads values rounded in f32
    for (size_t i = 0; i < c.shared_vars.size(); ++i) {
      bool via_f32 = false;
      for (const auto& [var, value] : c.updates)
        if (var.same(c.shared_vars[i])) via_f32 = through_f32(value);
      single.push_back(via_f32);
      updates_through_f32 = updates_through_f32 || via_f32;
    }
    std::mt19937 rng(seed * 7919u + 1);
    for (int k = 0; k < 5; ++k) {
      const Config config = random_config(rng);
      SCOPED_TRACE("seed " + std::to_string(seed) + ", " + config.str() + "\n" + c.text);
      std::vector<std::vector<Tensor>> got;
      try {
        got = run(c, config);
      } catch (const Error& e) {
        if (plain_error != typeid(e).name())
          ADD_FAILURE() << "the run failed (" << (plain_error.empty() ? "the plain run did not" : "the plain run raised " + plain_error)
                        << "): " << e.what();
        ++runs;
        continue;
      }
      ++runs;
      if (!plain_error.empty()) {
        ADD_FAILURE() << "the plain run raised " << plain_error << ", this one did not";
        continue;
      }
      for (size_t call = 0; call < 2; ++call)
        for (size_t i = 0; i < want[call].size(); ++i)
          if (auto d = difference(got[call][i], want[call][i], single[i] || (call == 1 && updates_through_f32)))
            ADD_FAILURE() << "call " << call << ", " << (i < c.outputs.size() ? "output " : "shared value ")
                          << (i < c.outputs.size() ? i : i - c.outputs.size()) << ": " << *d;
      for (size_t i = 0; i < c.args.size(); ++i)
        if (auto d = difference(c.args[i], inputs_before[i])) ADD_FAILURE() << "input " << i << " was modified: " << *d;
    }
  }
  std::cout << "graph fuzz: " << graphs << " graphs (" << failing << " of them raise an error in every mode), " << runs
            << " configurations, each called twice\n";
  EXPECT_EQ(graphs, static_cast<int>(seed_list.size()));
}

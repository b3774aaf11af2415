// The rewrites of loops (src/rewrite/scan.cpp), each tested by what it changes: the loops left,
// what their bodies compute, the memory planned; and by the values, equal to the graph as built.
#include <cmath>

#include "test_util.hpp"

using namespace kiln;
using namespace kiln::test;

namespace {

// fast_run without the scan group: the loops as built, the other rewrites applied.
Mode without_scan_rewrites() {
  const Mode fast = Mode::fast_run();
  std::vector<std::string> groups;
  for (const std::string& g : fast.groups())
    if (g != "scan") groups.push_back(g);
  return Mode("no_scan_rewrites", groups);
}

Function compile(const std::vector<Var>& inputs, const std::vector<Var>& outputs, Mode mode = Mode::fast_run()) {
  return function(std::vector<In>(inputs.begin(), inputs.end()), std::vector<Out>(outputs.begin(), outputs.end()), {.mode = mode});
}

int64_t fired(const Function& f, const std::string& rewrite) {
  for (const RewriteStat& s : f.compile_report().rewrites)
    if (s.name == rewrite) return s.fired;
  return 0;
}

// The inner graphs the compiled function's loops run (graph_text's "Inner graphs" section).
std::string inner_graphs(const Function& f) {
  const std::string text = f.graph_text();
  const size_t at = text.find("Inner graphs:");
  return at == std::string::npos ? "" : text.substr(at);
}

// The loops of the compiled function: one entry per loop in the "Inner graphs" section.
int loops(const Function& f) {
  std::istringstream lines(inner_graphs(f));
  int n = 0;
  for (std::string line; std::getline(lines, line);) n += line.rfind("scan{", 0) == 0;
  return n;
}

// The number of outputs of each loop of the compiled function, in the order graph_text lists them.
std::vector<int> loop_outputs(const Function& f) {
  std::istringstream lines(inner_graphs(f));
  std::vector<int> counts;
  for (std::string line; std::getline(lines, line);)
    if (line.rfind("scan{", 0) == 0) {
      const size_t end = line.find(" outputs}");
      const size_t start = line.rfind(' ', end - 1) + 1;
      counts.push_back(std::stoi(line.substr(start, end - start)));
    }
  return counts;
}

int occurrences(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// The Elman recurrence of the benchmark: a row of W_x per input symbol, tanh(x W_x + h W_h + b).
struct Elman {
  Var symbols = vector("symbols", i64), h0 = vector("h0", f64), W_x = matrix("W_x", f64), W_h = matrix("W_h", f64),
      b = vector("b", f64);
  ScanResult run() const {
    return scan([&](const std::vector<Var>& a) { return std::vector<Var>{tanh(W_x[VarIndex(a[0])] + dot(a[1], W_h) + b)}; },
                {.sequences = {symbols}, .outputs_info = {h0}});
  }
  std::vector<Var> inputs() const { return {symbols, h0, W_x, W_h, b}; }
  std::vector<Tensor> values() const {
    return {Tensor::from(std::vector<int64_t>{3, 0, 2, 2, 1}, {5}), random_tensor({4}, f64, -1, 1, 1), random_tensor({4, 4}, f64, -1, 1, 2),
            random_tensor({4, 4}, f64, -1, 1, 3), random_tensor({4}, f64, -1, 1, 4)};
  }
};

}  // namespace

TEST(ScanSaveMemory, TheLastStateAloneKeepsARingOfRows) {
  auto last_state = [](int64_t steps) {
    Var h0 = vector("h0"), W = matrix("W");
    ScanResult r = scan([&](const std::vector<Var>& a) { return std::vector<Var>{tanh(dot(a[0], W))}; },
                        {.outputs_info = {h0}, .n_steps = constant(Tensor::scalar(steps))});
    return function({h0, W}, {r.outputs[0][VarIndex(-1)]});
  };
  const Function short_loop = last_state(10), long_loop = last_state(100000);
  EXPECT_GE(fired(long_loop, "scan_save_memory"), 1);
  const std::vector<Shape> shapes{{16}, {16, 16}};
  EXPECT_EQ(long_loop.memory_report(shapes).planned_peak_bytes, short_loop.memory_report(shapes).planned_peak_bytes);
  EXPECT_LT(long_loop.memory_report(shapes).planned_peak_bytes, 100000 * 16 * 4);  // the stacked states would not fit
}

TEST(ScanSaveMemory, ValuesAndErrorsAreThoseOfTheWholeLoop) {
  Var h0 = vector("h0", f64), n = scalar("n", i64), W = matrix("W", f64);
  ScanResult r = scan([&](const std::vector<Var>& a) { return std::vector<Var>{tanh(dot(a[0], W) + 0.5)}; },
                      {.outputs_info = {h0}, .n_steps = n});
  const Var last = r.outputs[0][VarIndex(-1)], before_last = r.outputs[0][VarIndex(-2)];
  const std::vector<Tensor> values{random_tensor({3}, f64, -1, 1, 5), Tensor::scalar(int64_t{7}), random_tensor({3, 3}, f64, -1, 1, 6)};
  Function f = compare_with_plain({h0, n, W}, {last, before_last}, values);
  EXPECT_GE(fired(f, "scan_save_memory"), 1);
  // Reading more rows from the end than there were steps fails as without the ring.
  EXPECT_THROW(f({values[0], Tensor::scalar(int64_t{1}), values[2]}), ShapeError);
  EXPECT_THROW(f({values[0], Tensor::scalar(int64_t{0}), values[2]}), ShapeError);
}

// A loop ending on until() read at its last rows keeps a ring too: a large bound on the steps
// (the while-loop idiom) costs no memory, and the values and errors are those of the whole loop,
// with taps reaching two steps back (lead rows) and none.
TEST(ScanSaveMemory, ALoopEndingOnUntilReadAtItsLastRowsKeepsARing) {
  Var s = scalar("s", f64), n = scalar("n", i64), pair = vector("pair", f64);
  ScanResult doubling = scan(
      [](const std::vector<Var>& a) {
        const Var v = a[0] * 2.0;
        return std::vector<Var>{v, until(v > 100.0)};
      },
      {.outputs_info = {s}, .n_steps = n});
  ScanResult fibonacci = scan(
      [](const std::vector<Var>& a) {
        const Var v = a[0] + a[1];
        return std::vector<Var>{v, until(v > 20.0)};
      },
      {.outputs_info = {Taps{pair, {-2, -1}}}, .n_steps = n});
  const std::vector<Var> reads{doubling.outputs[0][VarIndex(-1)], doubling.outputs[0][VarIndex(-2)], fibonacci.outputs[0][VarIndex(-1)]};
  const Tensor pair_value = Tensor::from({1.0, 1.0}, {2});
  Function f = compare_with_plain({s, n, pair}, reads, {Tensor::scalar(1.0), Tensor::scalar(int64_t{50}), pair_value});
  EXPECT_EQ(fired(f, "scan_save_memory"), 2);
  for (int64_t bound : {int64_t{2}, int64_t{3}, int64_t{50}, int64_t{1} << 40}) {
    const auto out = f(Tensor::scalar(1.0), Tensor::scalar(bound), pair_value);
    const double last = bound < 7 ? std::pow(2.0, static_cast<double>(bound)) : 128.0;
    EXPECT_DOUBLE_EQ(out[0].item<double>(), last) << bound;
    EXPECT_DOUBLE_EQ(out[1].item<double>(), last / 2) << bound;
    EXPECT_DOUBLE_EQ(out[2].item<double>(), bound == 2 ? 3.0 : bound == 3 ? 5.0 : 21.0) << bound;
  }
  // A bound of 2^40 steps holds a few rows: before, a row per step of the bound.
  reset_peak_bytes();
  f(Tensor::scalar(1.0), Tensor::scalar(int64_t{1} << 40), pair_value);
  EXPECT_LT(allocator_stats().peak_bytes, int64_t{1} << 20);
  // Reading more rows from the end than there were steps fails as without the ring.
  EXPECT_THROW(f(Tensor::scalar(1.0), Tensor::scalar(int64_t{1}), pair_value), ShapeError);
  // Every row read keeps every row.
  Function all = function({s, n}, {doubling.outputs[0]});
  EXPECT_EQ(fired(all, "scan_save_memory"), 0);
  expect_values(all(Tensor::scalar(1.0), Tensor::scalar(int64_t{50}))[0], {2, 4, 8, 16, 32, 64, 128});
}

TEST(ScanSaveMemory, DebugModeChecksTheRowsRead) {
  // The rewrite keeps the rows the graph reads, not the stacked output: Mode::debug() compares those.
  Var x = vector("x", f64);
  Tensor at = Tensor::from(std::vector<double>{0.5, -1.0, 2.0});
  ScanResult r = scan([](const std::vector<Var>& a) { return std::vector<Var>{a[0] * 2.0}; },
                      {.outputs_info = {Taps(x)}, .n_steps = Var(int64_t{3})});
  Function last = function({x}, {r.outputs[0][VarIndex(-1)]}, {.mode = Mode::debug()});
  EXPECT_GE(fired(last, "scan_save_memory"), 1);
  expect_values(last(at)[0], {4, -8, 16});
  Function jac = function({x}, {jacobian(x * x, x)}, {.mode = Mode::debug()});
  expect_values(jac(at)[0], {1, 0, 0, 0, -2, 0, 0, 0, 4});
}

TEST(ScanSaveMemory, ReduceAfterNoStepIsTheInitialValue) {
  Var xs = vector("xs", f64), s0 = scalar("s0", f64);
  ScanResult r = reduce([](const std::vector<Var>& a) { return std::vector<Var>{a[0] + 0.5 * a[1]}; }, {xs}, {s0});
  Function f = function({xs, s0}, {r.outputs[0]});
  EXPECT_GE(fired(f, "scan_save_memory"), 1);
  expect_values(f({Tensor::zeros({0}, f64), Tensor::scalar(4.0)})[0], {4});
  expect_values(f({Tensor::from(std::vector<double>{1, 2, 3}), Tensor::scalar(4.0)})[0], {4.75});  // 1 + 2, 2 + 1.5, 3 + 1.75

  // A plain sum over the steps needs no loop at all: it is summed after (push out accumulation).
  ScanResult total = reduce([](const std::vector<Var>& a) { return std::vector<Var>{a[0] + a[1]}; }, {xs}, {s0});
  Function g = function({xs, s0}, {total.outputs[0]});
  EXPECT_EQ(loops(g), 0);
  expect_values(g({Tensor::zeros({0}, f64), Tensor::scalar(4.0)})[0], {4});
  expect_values(g({Tensor::from(std::vector<double>{1, 2, 3}), Tensor::scalar(4.0)})[0], {10});
}

TEST(ScanPushOut, InvariantsRunOnceBeforeTheLoop) {
  Var h0 = vector("h0", f64), W = matrix("W", f64), n = scalar("n", i64);
  ScanResult r = scan([&](const std::vector<Var>& a) { return std::vector<Var>{tanh(dot(a[0], exp(transpose(a[1])) * 0.5))}; },
                      {.outputs_info = {h0}, .non_sequences = {W}, .n_steps = n});
  Function f = compare_with_plain({h0, W, n}, r.outputs[0], {random_tensor({3}, f64, -1, 1, 7), random_tensor({3, 3}, f64, -1, 1, 8), Tensor::scalar(int64_t{4})});
  EXPECT_GE(fired(f, "scan_push_out_invariants"), 1);
  const std::string body = inner_graphs(f);
  EXPECT_EQ(occurrences(body, "exp"), 0) << body;
  EXPECT_EQ(occurrences(body, "dimshuffle{1,0}"), 0) << body;
  EXPECT_EQ(occurrences(body, "dot"), 1) << body;
}

TEST(ScanPushOut, SequenceWorkBecomesOneBatchedComputation) {
  const Elman e;
  Function f = compare_with_plain(e.inputs(), e.run().outputs[0], e.values());
  EXPECT_GE(fired(f, "scan_push_out_sequence_work"), 1);
  const std::string body = inner_graphs(f);
  EXPECT_EQ(occurrences(body, "take"), 0) << body;  // the rows of W_x looked up for every step at once
  EXPECT_GE(count_op(f, "take"), 1);

  // x_t . W for every t: one matrix product before the loop
  Var X = matrix("X", f64), h0 = vector("h0", f64), W = matrix("W", f64), U = matrix("U", f64);
  ScanResult r = scan([&](const std::vector<Var>& a) { return std::vector<Var>{tanh(dot(a[0], W) * 2.0 + dot(a[1], U))}; },
                      {.sequences = {X}, .outputs_info = {h0}});
  Function g = compare_with_plain({X, h0, W, U}, r.outputs[0],
                                  {random_tensor({6, 3}, f64, -1, 1, 9), random_tensor({4}, f64, -1, 1, 10), random_tensor({3, 4}, f64, -1, 1, 11),
                                   random_tensor({4, 4}, f64, -1, 1, 12)});
  const std::string loop = inner_graphs(g);
  EXPECT_EQ(occurrences(loop, "dot"), 1) << loop;  // h . U alone is left in the body
}

// Work only a branch of an ifelse reads runs in the steps that take it: moved out of the loop it
// would run for every step, and here fail, as the products' shapes do not align while the branch
// is never taken.
TEST(ScanPushOut, WorkOnlyABranchReadsStaysInTheLoop) {
  Var X = matrix("X", f64), h0 = vector("h0", f64), A = matrix("A", f64), v = vector("v", f64);
  ScanResult r = scan(
      [&](const std::vector<Var>& a) {
        const Var x = a[0], h = a[1];
        const Var taken = sum(x) > 100.0;
        return std::vector<Var>{ifelse(taken, dot(x, a[2]) + dot(a[3], a[2]), h * sum(x))};
      },
      {.sequences = {X}, .outputs_info = {h0}, .non_sequences = {A, v}});
  const Tensor Xv = Tensor::from({0.5, 1.0, -1.0, 0.25, 2.0, 0.5}, {3, 2}), h0v = Tensor::from({1.5, -2.0}, {2}),
               Av = Tensor::zeros({3, 3}, f64), vv = Tensor::from({1.0, 2.0}, {2});
  Function f = compare_with_plain({X, h0, A, v}, r.outputs[0], {Xv, h0v, Av, vv});
  const std::vector<double> h = f(Xv, h0v, Av, vv)[0].to_vector<double>();
  const std::vector<double> expected{1.5 * 1.5, -2.0 * 1.5, 1.5 * 1.5 * -0.75, -2.0 * 1.5 * -0.75,
                                     1.5 * 1.5 * -0.75 * 2.5, -2.0 * 1.5 * -0.75 * 2.5};
  ASSERT_EQ(h.size(), expected.size());
  for (size_t i = 0; i < h.size(); ++i) EXPECT_DOUBLE_EQ(h[i], expected[i]) << i;
  const std::string body = inner_graphs(f);
  EXPECT_EQ(occurrences(body, "dot"), 2) << body;
  // Taken, the branch fails with the product's error.
  const Tensor big = Tensor::from({50.0, 60.0, 0.0, 0.0, 0.0, 0.0}, {3, 2});
  EXPECT_THROW(f(big, h0v, Av, vv), ShapeError);
}

TEST(ScanPushOut, AccumulatedGradientsAreSummedAfterTheLoop) {
  const Elman e;
  const Var loss = sum(e.run().outputs[0] * e.run().outputs[0]);
  const std::vector<Var> grads = grad(loss, {e.W_x, e.W_h, e.b, e.h0});
  std::vector<Var> outputs{loss};
  outputs.insert(outputs.end(), grads.begin(), grads.end());
  Function f = compare_with_plain(e.inputs(), outputs, e.values(), 1e-12);
  EXPECT_GE(fired(f, "scan_push_out_accumulation"), 1);  // W_x (rows), W_h (outer products), b (a sum) at once
  const std::string body = inner_graphs(f);
  EXPECT_EQ(occurrences(body, "inc_take"), 0) << body;
  EXPECT_EQ(occurrences(body, "dimshuffle{0,x}"), 0) << body;
  // The loops no longer carry a gradient of W_x and W_h from step to step.
  Function as_built = compile(e.inputs(), outputs, without_scan_rewrites());
  const std::vector<Shape> shapes{{5}, {64}, {64, 64}, {64, 64}, {64}};
  EXPECT_LT(f.memory_report(shapes).planned_peak_bytes, as_built.memory_report(shapes).planned_peak_bytes);
}

TEST(ScanPushOut, GradientTermsSummedToTheirShapesAreOneStackedValue) {
  // The gradients of W_x (rows), W_h (outer products) and b (a sum) accumulate the same term,
  // each summed down to its own shape per step: the loop hands out that term once, and each
  // accumulation sums it down after the loop (nothing to sum here: the planner hands it on).
  const Elman e;
  const Var loss = sum(e.run().outputs[0] * e.run().outputs[0]);
  const std::vector<Var> grads = grad(loss, {e.W_x, e.W_h, e.b});
  std::vector<Var> outputs{loss};
  outputs.insert(outputs.end(), grads.begin(), grads.end());
  Function f = compare_with_plain(e.inputs(), outputs, e.values(), 1e-12);
  std::vector<int> counts = loop_outputs(f);
  std::sort(counts.begin(), counts.end());
  EXPECT_EQ(counts, (std::vector<int>{1, 2})) << inner_graphs(f);  // the states; their gradient and the one term
  // And where a step's term is broadcast (a bias of one element), the sum down happens after the loop.
  Var x = matrix("x", f64), h0 = vector("h0", f64), W = matrix("W", f64), c = vector("c", f64);
  ScanResult r = scan([&](const std::vector<Var>& a) { return std::vector<Var>{tanh(dot(a[0], W) + dot(a[1], W) + c)}; },
                      {.sequences = {x}, .outputs_info = {h0}});
  const Var cost = sum(r.outputs[0]);
  const std::vector<Var> g = grad(cost, {W, c});
  compare_with_plain({x, h0, W, c}, {cost, g[0], g[1]},
                     {random_tensor({5, 3}, f64, -1, 1, 21), random_tensor({3}, f64, -1, 1, 22), random_tensor({3, 3}, f64, -1, 1, 23),
                      random_tensor({1}, f64, -1, 1, 24)},
                     1e-12);
}

TEST(ScanPushOut, ElementwiseSequenceWorkThatFeedsTheRecurrenceStaysInTheBody) {
  // exp(x_t) is read only by the recurrence: inside it fuses with the step's other elementwise
  // work; moved out it would hold one row per step.
  Var x = matrix("x", f64), h0 = vector("h0", f64);
  ScanResult r = scan([&](const std::vector<Var>& a) { return std::vector<Var>{a[1] * 0.5 + exp(a[0])}; },
                      {.sequences = {x}, .outputs_info = {h0}});
  Function f = compare_with_plain({x, h0}, r.outputs[0], {random_tensor({6, 4}, f64, -1, 1, 25), random_tensor({4}, f64, -1, 1, 26)});
  EXPECT_EQ(fired(f, "scan_push_out_sequence_work"), 0);
  EXPECT_EQ(occurrences(inner_graphs(f), "exp"), 1) << inner_graphs(f);
}

TEST(ScanMerge, LoopsOverTheSameStepsRunAsOne) {
  Var x = vector("x", f64), n = scalar("n", i64), s0 = scalar("s0", f64);
  // Two recurrences over the same sequence, two over the same n_steps.
  ScanResult products = scan([](const std::vector<Var>& a) { return std::vector<Var>{a[1] * a[0] + 1.0}; }, {.sequences = {x}, .outputs_info = {s0}});
  ScanResult differences = scan([](const std::vector<Var>& a) { return std::vector<Var>{a[1] - 2.0 * a[0]}; }, {.sequences = {x}, .outputs_info = {s0}});
  ScanResult up = scan([](const std::vector<Var>& a) { return std::vector<Var>{a[0] * 1.5}; }, {.outputs_info = {s0}, .n_steps = n});
  ScanResult down = scan([](const std::vector<Var>& a) { return std::vector<Var>{a[0] * 0.5}; }, {.outputs_info = {s0}, .n_steps = n});
  const std::vector<Var> outputs{products.outputs[0], differences.outputs[0], up.outputs[0], down.outputs[0]};
  Function f = compare_with_plain({x, n, s0}, outputs, {Tensor::from(std::vector<double>{0.5, 1, 2}), Tensor::scalar(int64_t{3}), Tensor::scalar(1.0)});
  EXPECT_GE(fired(f, "scan_merge"), 2);
  EXPECT_EQ(loops(f), 2) << inner_graphs(f);
  EXPECT_EQ(loops(compile({x, n, s0}, outputs, without_scan_rewrites())), 4);
}

TEST(ScanPushOut, AMapWhoseWorkIsAllPushedOutLeavesNoLoop) {
  Var x = vector("x", f64);
  ScanResult sines = map([](const std::vector<Var>& a) { return std::vector<Var>{sin(a[0]) * 2.0}; }, {x});
  Function f = compare_with_plain({x}, sines.outputs[0], {Tensor::from(std::vector<double>{0.5, 1, 2})});
  EXPECT_EQ(loops(f), 0) << f.graph_text();
}

TEST(ScanMerge, StatesBothLoopsComputeAreKeptOnce) {
  // The second loop computes the first one's state again beside a value of its own (as a loop of
  // tangents does): merged, the loop keeps one copy of the state.
  Var x = vector("x", f64), s0 = scalar("s0", f64);
  ScanResult first = scan([](const std::vector<Var>& a) { return std::vector<Var>{a[1] * a[0] + 1.0}; }, {.sequences = {x}, .outputs_info = {s0}});
  ScanResult second = scan(
      [](const std::vector<Var>& a) {
        const Var s = a[1] * a[0] + 1.0;
        return std::vector<Var>{s, a[2] + s * s};
      },
      {.sequences = {x}, .outputs_info = {s0, s0}});
  Function f = compare_with_plain({x, s0}, {first.outputs[0], second.outputs[0], second.outputs[1]},
                                  {Tensor::from(std::vector<double>{0.5, 1, 2}), Tensor::scalar(0.25)});
  EXPECT_EQ(loop_outputs(f), (std::vector<int>{2})) << inner_graphs(f);
}

TEST(ScanMerge, ALoopThatReadsAnotherStaysApart) {
  Var x = vector("x", f64), s0 = scalar("s0", f64);
  ScanResult first = scan([](const std::vector<Var>& a) { return std::vector<Var>{a[1] * a[0] + 1.0}; }, {.sequences = {x}, .outputs_info = {s0}});
  ScanResult second = scan([](const std::vector<Var>& a) { return std::vector<Var>{a[2] - a[0] * a[1]}; },
                           {.sequences = {x, first.outputs[0]}, .outputs_info = {s0}});
  Function f = compare_with_plain({x, s0}, second.outputs[0], {Tensor::from(std::vector<double>{0.5, 1, 2}), Tensor::scalar(1.0)});
  EXPECT_EQ(loops(f), 2);
}

TEST(ScanRemoveUnused, OutputsAndInputsNoOneReadsAreDropped) {
  Var x = vector("x", f64), y = vector("y", f64), s0 = scalar("s0", f64), c = scalar("c", f64);
  ScanResult r = scan(
      [](const std::vector<Var>& a) { return std::vector<Var>{a[0] + a[2], a[1] * a[3]}; },
      {.sequences = {x, y}, .outputs_info = {s0, std::nullopt}, .non_sequences = {c}});
  Function f = compare_with_plain({x, y, s0, c}, r.outputs[0],
                                  {Tensor::from(std::vector<double>{1, 2, 3}), Tensor::from(std::vector<double>{4, 5, 6, 7}), Tensor::scalar(1.0),
                                   Tensor::scalar(2.0)});
  EXPECT_GE(fired(f, "scan_remove_unused"), 1);
  EXPECT_EQ(occurrences(inner_graphs(f), "scan{1 sequences, 1 outputs}"), 1) << inner_graphs(f);
  // y, though no longer read, still decides how many steps run: three, as x allows
  EXPECT_EQ(f({Tensor::from(std::vector<double>{1, 2, 3}), Tensor::from(std::vector<double>{4, 5}), Tensor::scalar(1.0), Tensor::scalar(2.0)})[0].shape(),
            Shape{2});
}

TEST(ScanInline, ALoopOfOneStepIsItsBody) {
  Var X = matrix("X", f64), h0 = vector("h0", f64), W = matrix("W", f64);
  ScanResult r = scan([&](const std::vector<Var>& a) { return std::vector<Var>{tanh(a[0] + dot(a[1], W)), a[1] * 2.0}; },
                      {.sequences = {X}, .outputs_info = {h0, std::nullopt}, .n_steps = constant(Tensor::scalar(int64_t{1}))});
  Function f = compare_with_plain({X, h0, W}, {r.outputs[0], r.outputs[1]},
                                  {random_tensor({2, 3}, f64, -1, 1, 13), random_tensor({3}, f64, -1, 1, 14), random_tensor({3, 3}, f64, -1, 1, 15)});
  EXPECT_GE(fired(f, "scan_inline_single_step"), 1);
  EXPECT_EQ(loops(f), 0);
}

TEST(ScanRewrites, TheRewrittenTrainingStepLearnsAsBuilt) {
  const Elman e;
  const Var loss = sum(e.run().outputs[0]);
  const std::vector<Var> grads = grad(loss, {e.W_x, e.W_h, e.b});
  std::vector<Var> outputs{loss};
  outputs.insert(outputs.end(), grads.begin(), grads.end());
  Function rewritten = compile(e.inputs(), outputs);
  Function as_built = compile(e.inputs(), outputs, without_scan_rewrites());
  const auto a = rewritten(e.values()), b = as_built(e.values());
  for (size_t i = 0; i < a.size(); ++i) expect_values(a[i], b[i].to_vector<double>(), 1e-12);
}

// Sequence work pushed out where one pushed value feeds another that the body also reads: each
// keeps its own new sequence (rebuild once replaced the later one again, and the rewrites of a
// ten-layer body never settled).
TEST(ScanPushOut, NestedSequenceWorkInADeepBodySettles) {
  Var X = matrix("X", f64), h0 = vector("h0", f64), W = matrix("W", f64);
  ScanResult r = scan(
      [&](const std::vector<Var>& a) {
        Var v = a[1];
        for (int layer = 0; layer < 10; ++layer) v = tanh(dot(v, W) * 0.5 + a[0]);
        return std::vector<Var>{v};
      },
      {.sequences = {X}, .outputs_info = {h0}});
  const Var cost = sum(r.outputs[0]);
  const std::vector<Var> g = grad(cost, {W, h0});
  Function f = compare_with_plain({X, h0, W}, {cost, g[0], g[1]},
                                  {random_tensor({4, 3}, f64, -1, 1, 16), random_tensor({3}, f64, -1, 1, 17), random_tensor({3, 3}, f64, -1, 1, 18)},
                                  1e-10);
  EXPECT_GE(fired(f, "scan_push_out_sequence_work"), 1);
}

TEST(ScanPushOut, NoStepOverRowsStoredReversedIsEmpty) {
  // Found by the loop fuzzer: the rows a pushed-out computation reads (row_range) of a sequence
  // stored reversed (go_backwards, or a backward loop's states) got an offset before the storage
  // when the loop ran no step: "the offset is negative" instead of an empty result.
  Var X = matrix("X", f64), W = matrix("W", f64);
  const Var r = scan([](const std::vector<Var>& a) { return std::vector<Var>{dot(a[0], a[2]) + a[1]}; },
                     {.sequences = {SeqTaps{X, {0, 2}}}, .outputs_info = {std::nullopt}, .non_sequences = {W}, .go_backwards = true})
                    .outputs[0];
  Var H0 = matrix("H0", f64), n = scalar("n", i64);
  const Var s = scan([](const std::vector<Var>& a) { return std::vector<Var>{dot(a[0] + a[1], a[2])}; },
                     {.outputs_info = {Taps{H0, {-3, -1}}}, .non_sequences = {W}, .n_steps = n})
                    .outputs[0];
  for (Mode mode : {Mode::fast_run(), without_scan_rewrites()}) {
    EXPECT_EQ(compile({X, W}, {r}, mode)(Tensor::ones({2, 2}, f64), Tensor::ones({2, 2}, f64))[0].shape(), (Shape{0, 2}));
    expect_values(compile({H0, n, W}, {grad(sum(s), W)}, mode)(Tensor::zeros({3, 2}, f64), Tensor::scalar(int64_t{0}),
                                                               Tensor::zeros({2, 2}, f64))[0],
                  {0, 0, 0, 0});
  }
}

TEST(ScanRewrites, NoRewriteMakesALoopFailOrSucceedWhereTheBuiltOneDoesNot) {
  // Found by the loop fuzzer, each in fast_run only: invariant work that may reject values (an
  // index out of range) was moved before a loop that runs no step; a loop needed only by the
  // branch not taken was merged into the one taken, so its work ran; a sequence nobody reads was
  // dropped with the check that n_steps does not pass its rows.
  Var h0 = scalar("h0", f64), W = vector("W", f64), i = scalar("i", i64), x = vector("x", f64);
  const Var invariant_lookup = scan([](const std::vector<Var>& a) { return std::vector<Var>{a[1] + a[0] * a[2][VarIndex(a[3])]}; },
                                    {.sequences = {x}, .outputs_info = {h0}, .non_sequences = {W, i}})
                                   .outputs[0];
  Var idx = vector("idx", i64), c = scalar("c", f64);
  const Var taken = scan([](const std::vector<Var>& a) { return std::vector<Var>{a[1] * cast(a[0], f64) + 1.0}; },
                         {.sequences = {idx}, .outputs_info = {h0}})
                        .outputs[0];
  const Var not_taken = scan([](const std::vector<Var>& a) { return std::vector<Var>{a[1] + a[2][VarIndex(a[0])]}; },
                             {.sequences = {idx}, .outputs_info = {h0}, .non_sequences = {W}})
                            .outputs[0];
  Var y = vector("y", f64), n = scalar("n", i64);
  const Var unused_sequence = scan([](const std::vector<Var>& a) { return std::vector<Var>{a[2] * 2.0, a[1] * 2.0}; },
                                   {.sequences = {x, y}, .outputs_info = {h0, std::nullopt}, .n_steps = n})
                                  .outputs[0];
  for (Mode mode : {Mode::fast_run(), without_scan_rewrites()}) {
    EXPECT_EQ(compile({x, h0, W, i}, {invariant_lookup}, mode)(Tensor::zeros({0}, f64), Tensor::scalar(1.0),
                                                              Tensor::from(std::vector<double>{1, 2}), Tensor::scalar(int64_t{5}))[0]
                  .numel(),
              0);
    Function branch = compile({idx, W, c, h0}, {ifelse(c > 0.0, taken, not_taken)}, mode);
    EXPECT_EQ(fired(branch, "scan_merge"), 0);
    expect_values(branch(Tensor::from(std::vector<int64_t>{0, 5}), Tensor::from(std::vector<double>{1, 2}), Tensor::scalar(1.0),
                         Tensor::scalar(0.5))[0],
                  {1, 6});
    Function f = compile({x, y, h0, n}, {unused_sequence}, mode);
    const std::vector<Tensor> values{Tensor::from(std::vector<double>{1}), Tensor::from(std::vector<double>{1, 2, 3}), Tensor::scalar(1.0)};
    expect_error<ShapeError>([&] { f(values[0], values[1], values[2], Tensor::scalar(int64_t{3})); }, {"n_steps is 3", "only 1 steps"});
    expect_values(f(values[0], values[1], values[2], Tensor::scalar(int64_t{1}))[0], {2});
  }
}

TEST(ScanRewrites, NStepsIsCheckedAgainstEveryTapOfASequence) {
  // Found by the loop fuzzer: a body that reads one of a sequence's taps, inlined (one step) or
  // pushed out, read only that tap's rows: n_steps beyond the other tap's rows passed in fast_run.
  Var x = vector("x", f64);
  for (const std::vector<int>& taps : {std::vector<int>{2, 0}, std::vector<int>{-2, 0}})
    for (int64_t n : {1, 2}) {
      const Var y = scan([&](const std::vector<Var>& a) { return std::vector<Var>{a[1] * 10.0}; },
                         {.sequences = {SeqTaps{x, taps}}, .n_steps = Var(n)})
                        .outputs[0];
      std::vector<double> rows{1, 2, 3};
      rows.resize(static_cast<size_t>(n) + 1);
      for (Mode mode : {Mode::fast_run(), without_scan_rewrites()})
        expect_error<ShapeError>([&] { compile({x}, {y}, mode)(Tensor::from(rows)); }, {"n_steps is " + std::to_string(n)});
    }
}

// The memory planner: random graphs run with and without a plan must agree exactly; the plan's
// report; keep_buffers' steady state.
#include <random>

#include "test_util.hpp"

using namespace kiln;
using namespace kiln::test;

namespace {

// Without planning: the collecting runtime (what Mode::debug's op checks run on).
Mode unplanned(std::vector<std::string> groups = {}) {
  return Mode("unplanned", std::move(groups), DebugChecks{.rewrites = false, .ops = true});
}

// A random graph over two m x n matrices: elementwise ops, matrix products, views (transposes,
// reshapes, slices), values read by several later ops (also directly and through a view by one
// op), several outputs.
std::vector<Var> random_graph(std::mt19937& rng, const Var& a, const Var& b, int64_t m, int64_t n) {
  std::vector<Var> pool{a, b};
  auto pick = [&]() { return pool[rng() % pool.size()]; };
  const int steps = 8 + static_cast<int>(rng() % 12);
  for (int i = 0; i < steps; ++i) {
    Var x = pick(), y = pick(), z;
    switch (rng() % 10) {
      case 0: z = x + y; break;
      case 1: z = x * y; break;
      case 2: z = x - y * 0.5; break;
      case 3: z = tanh(x); break;
      case 4: z = exp(-abs(x)); break;
      case 5: z = transpose(transpose(x)) + 1.0; break;
      case 6: z = reshape(reshape(x, {m * n}) * 2.0, {m, n}); break;
      case 7: z = dot(dot(x, transpose(y)), x) * 0.1; break;          // m x m, then back to m x n
      case 8: z = concatenate({slice(x, 0, 0, 1), slice(y, 0, 1, m)}); break;  // row views, a copy
      case 9: {  // one buffer read directly and through a view by the same op
        Var s = tanh(dot(x, transpose(y)));
        z = dot(s + transpose(s), x) * 0.1;
        break;
      }
    }
    pool.push_back(z);
  }
  return {pool.back(), pool[pool.size() / 2], sum(pool[2 + rng() % (pool.size() - 2)], {1})};
}

}  // namespace

TEST(Planner, RandomGraphsAgreeWithAndWithoutPlanning) {
  const int64_t m = 5, n = 7;
  for (uint32_t seed = 0; seed < 500; ++seed) {
    std::mt19937 rng(seed);
    Var a = matrix("a", f64), b = matrix("b", f64);
    std::vector<Var> outs = random_graph(rng, a, b, m, n);
    std::vector<Out> o(outs.begin(), outs.end());
    Tensor av = random_tensor({m, n}, f64, -1, 1, seed + 1), bv = random_tensor({m, n}, f64, -1, 1, seed + 1000);
    auto want = function({a, b}, o, {.mode = unplanned(), .allow_unused_inputs = true})({av, bv});
    for (Mode mode : {Mode("plain", {}), Mode::fast_run()}) {
      for (int variant = 0; variant < 3; ++variant) {
        const bool keep = variant == 1, lend = variant == 2;  // lend: the inputs are workspace too
        Function f = function({In(a, {.borrow = lend}), In(b, {.borrow = lend})}, o,
                              {.mode = mode, .keep_buffers = keep, .allow_unused_inputs = true});
        for (int call = 0; call < 2; ++call) {  // the second call reuses a kept arena
          auto got = lend ? f({av.clone(), bv.clone()}) : f({av, bv});
          for (size_t i = 0; i < got.size(); ++i) {
            SCOPED_TRACE("seed " + std::to_string(seed) + ", mode " + mode.name() + ", output " + std::to_string(i));
            expect_values(got[i], want[i].to_vector<double>(), 1e-12);
          }
        }
      }
    }
  }
}

TEST(Planner, RandomUpdatesAgreeWithAndWithoutPlanning) {
  // The same random graphs, now updating two shared variables (which the plan may overwrite in
  // place) over three steps: the variables and outputs must match a run without a plan.
  const int64_t m = 5, n = 7;
  for (uint32_t seed = 0; seed < 200; ++seed) {
    std::vector<std::vector<double>> values;  // per mode: outputs of the last step, then a and b
    for (int planned = 0; planned < 2; ++planned) {
      std::mt19937 rng(seed);
      Shared a = shared(random_tensor({m, n}, f64, -1, 1, seed + 1), "a");
      Shared b = shared(random_tensor({m, n}, f64, -1, 1, seed + 1000), "b");
      Var x = matrix("x", f64);
      std::vector<Var> outs = random_graph(rng, a, x, m, n);
      std::vector<Var> pool = random_graph(rng, b, a, m, n);
      Updates updates{{a, outs[0] * 0.5}, {b, pool[rng() % 2] * 0.5}};
      Function step = function({x}, {outs[1], outs[2]},
                               {.updates = updates, .mode = planned ? Mode::fast_run() : unplanned(), .allow_unused_inputs = true});
      std::vector<Tensor> last;
      for (int i = 0; i < 3; ++i) last = step(random_tensor({m, n}, f64, -1, 1, seed + 7 * static_cast<uint64_t>(i)));
      values.push_back({});
      for (const Tensor& t : {last[0], last[1], a.get_value(), b.get_value()})
        for (double v : t.to_vector<double>()) values.back().push_back(v);
    }
    SCOPED_TRACE("seed " + std::to_string(seed));
    ASSERT_EQ(values[0].size(), values[1].size());
    for (size_t i = 0; i < values[0].size(); ++i)
      ASSERT_NEAR(values[1][i], values[0][i], 1e-9 * std::max(1.0, std::fabs(values[0][i]))) << "value " << i;
  }
}

TEST(Planner, InPlaceNeverOverwritesAValueReadLater) {
  // The trap of the MXNet document: B feeds both C = sigmoid(B) and F; C may not overwrite B.
  Var a = vector("a", f64);
  Var B = a * 2.0;
  Var C = sigmoid(B);
  Var F = B + 1.0;
  Function f = function({a}, {C * F}, {.mode = Mode("plain", {})});
  Tensor av = Tensor::from({0.5, -1.0}, {2});
  auto want = function({a}, {C * F}, {.mode = unplanned()})(av);
  expect_values(f(av)[0], want[0].to_vector<double>(), 1e-15);
  // Nor a value a view still reads: y views x's buffer and is read after exp(x) runs.
  Var x = matrix("x", f64);
  Var t = x * 1.5;
  Var y = transpose(t);
  Var z = exp(t);
  Function g = function({x}, {z + transpose(y)}, {.mode = Mode("plain", {})});
  Tensor xv = random_tensor({3, 3});
  expect_values(g(xv)[0], function({x}, {z + transpose(y)}, {.mode = unplanned()})(xv)[0].to_vector<double>(), 1e-15);
}

TEST(Planner, ReportsPlannedNaiveAndLowerBound) {
  Var x = matrix("x", f32);
  Var y = x;
  for (int i = 0; i < 20; ++i) y = tanh(y * 1.01);  // a deep chain: in place all along
  Function f = function({x}, {y}, {.mode = Mode("plain", {})});
  MemoryReport r = f.memory_report({{100, 100}});
  const int64_t block = 40000;  // 100 x 100 f32, already 64-byte aligned
  EXPECT_EQ(r.naive_bytes, 40 * block);
  // Every step overwrites the one before, down to the result: the whole chain runs in the result's
  // own buffer, which is also the lower bound.
  EXPECT_EQ(r.planned_peak_bytes, block);
  EXPECT_EQ(r.lower_bound_bytes, block);
  EXPECT_LE(r.planned_peak_bytes, r.lower_bound_bytes * 105 / 100);
  EXPECT_TRUE(r.unplanned.empty());
}

TEST(Planner, DataDependentShapesAreAllocatedWhenTheyRunAndReported) {
  Var x = vector("x", f64), n = scalar("n", i64);
  Var y = reshape(x * 2.0, stack({n, Var(-1)}));  // the target shape is a value
  Function f = function({x, n}, {exp(y)}, {.mode = Mode("plain", {})});
  EXPECT_EQ(f(random_tensor({6}), Tensor::scalar<int64_t>(2))[0].shape(), (Shape{2, 3}));
  MemoryReport r = f.memory_report({{6}, {}});
  EXPECT_FALSE(r.unplanned.empty());
}

TEST(Planner, ValuesComputedWhilePlanningAreHandedOutAsCopies) {
  // shape_of(x) is computed once per signature and serves every call: the caller gets a copy it
  // may overwrite without changing what later calls return.
  Var x = matrix("x", f64);
  Function f = function({x}, {shape_of(x)});
  Tensor first = f(Tensor::zeros({2, 3}, f64))[0];
  first.data<int64_t>()[0] = 99;
  expect_values(f(Tensor::zeros({2, 3}, f64))[0], {2, 3});
}

TEST(Planner, ChoosesTheScheduleWithTheLowestPeak) {
  // A training step of three layers. Depth-first from the results reaches each layer's update
  // only after the whole backward pass, keeping every activation alive until then; the order that
  // frees memory first applies each update as soon as its gradient exists.
  Var x = matrix("x", f64), y = vector("y", i64);
  std::vector<Shared> ws;
  Var h = x;
  for (uint64_t l = 0; l < 3; ++l) {
    ws.push_back(shared(random_tensor({32, 32}, f64, -0.3, 0.3, l + 1), "w"));
    h = tanh(dot(h, ws.back()));
  }
  Var loss = mean(categorical_crossentropy(softmax(h), y));
  Updates updates;
  for (const Shared& w : ws) updates.push_back({w, w - 0.1 * grad(loss, w)});
  Function step = function({x, y}, {loss}, {.updates = updates, .mode = Mode::debug()});
  const MemoryReport r = step.memory_report({{256, 32}, {256}});
  ASSERT_EQ(r.schedules.size(), 2u);
  EXPECT_EQ(r.schedules[0].first, "depth-first");
  EXPECT_EQ(r.schedule, "frees-first");
  EXPECT_LT(r.schedules[1].second, r.schedules[0].second);
  EXPECT_EQ(r.planned_peak_bytes, r.schedules[1].second);
  // Mode::debug() checks the chosen order's results against a run without a plan.
  std::vector<int64_t> labels(256);
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int64_t>(i % 32);
  for (int i = 0; i < 2; ++i) step({random_tensor({256, 32}), Tensor::from(labels, {256})});
}

TEST(Planner, KeepBuffersAllocatesOnlyWhatLeavesTheCall) {
  Var x = matrix("x", f32);
  Shared w = shared(Tensor::full({64, 64}, 0.01), "w");
  Var h = tanh(dot(x, w)) * 2.0 + 1.0;
  Var loss = mean(h * h);
  Function step = function({x}, {loss}, {.updates = {{w, w - 0.1 * grad(loss, w)}}, .keep_buffers = true});
  Tensor xv = Tensor::ones({32, 64});
  step(xv);
  step(xv);
  const int64_t before = allocator_stats().n_allocations;
  for (int i = 0; i < 10; ++i) step(xv);
  // Per call: the loss leaves the call; the new value of w is computed into w's own buffer, and
  // everything else lives in the kept arena.
  EXPECT_EQ(allocator_stats().n_allocations - before, 10 * 1);
  Function fresh = function({x}, {loss}, {.updates = {{w, w - 0.1 * grad(loss, w)}}});
  fresh(xv);
  const int64_t before_fresh = allocator_stats().n_allocations;
  fresh(xv);
  EXPECT_EQ(allocator_stats().n_allocations - before_fresh, 2);  // and the arena, released after the call
}

namespace {

const std::byte* buffer_of(const Shared& s) { return s.get_value({.borrow = true, .return_internal_type = true}).raw_data(); }

// One step of least squares, w <- w - 0.1 * grad: the new w may be computed into w's buffer.
struct LeastSquaresStep {
  Var x = matrix("x", f64);
  Shared w = shared(random_tensor({8, 3}, f64, -1, 1, 3), "w");
  Function step = [this] {
    Var loss = sum(sqr(dot(x, w) - 1.0));
    return function({x}, {loss}, {.updates = {{w, w - 0.1 * grad(loss, w)}}});
  }();
};

}  // namespace

TEST(Planner, ASharedVariableIsUpdatedInItsOwnBuffer) {
  LeastSquaresStep in_place, reference;
  const Tensor xv = random_tensor({5, 8}, f64, -0.5, 0.5, 11);
  const std::byte* before = buffer_of(in_place.w);
  // A borrowed handle on reference.w's buffer, taken before each step, keeps every step of it
  // from writing there.
  Tensor held;
  for (int i = 0; i < 3; ++i) {
    in_place.step(xv);
    held = reference.w.get_value({.borrow = true});
    reference.step(xv);
  }
  EXPECT_EQ(buffer_of(in_place.w), before);
  EXPECT_NE(buffer_of(reference.w), held.raw_data());
  expect_values(in_place.w.get_value(), reference.w.get_value().to_vector<double>(), 1e-15);
  // The plan counts no bytes for the new value of w (it lives where the old one did): the only
  // value the call hands back in a buffer of its own is the loss (64 bytes).
  EXPECT_EQ(in_place.step.memory_report().result_bytes, 64);
}

TEST(Planner, AHandleOnASharedBufferIsNeverOverwritten) {
  LeastSquaresStep s;
  const Tensor old = s.w.get_value({.borrow = true});
  const std::vector<double> old_values = old.to_vector<double>();
  s.step(random_tensor({5, 8}));
  EXPECT_EQ(old.to_vector<double>(), old_values);
  EXPECT_NE(s.w.get_value().to_vector<double>(), old_values);
}

TEST(Planner, ASharedVariableHeldAsAStridedViewIsUpdatedCorrectly) {
  // w borrows a transposed view: its buffer cannot take a contiguous result, so the new value
  // gets a buffer of its own and the values are what an unplanned run gives.
  Tensor base = random_tensor({4, 3}, f64, -1, 1, 5);
  const std::vector<double> start = base.to_vector<double>();
  Shared w = shared(base.view({3, 4}, {1, 3}, 0), "w", {.borrow = true});
  base = Tensor();
  Function step = function({}, {}, {.updates = {{w, w * 2.0 + 1.0}}});
  step();
  std::vector<double> want(12);
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 4; ++j) want[static_cast<size_t>(i * 4 + j)] = start[static_cast<size_t>(j * 3 + i)] * 2 + 1;
  expect_values(w.get_value(), want, 1e-15);
}

TEST(Planner, AFailedCallLeavesSharedVariablesAsTheyWere) {
  // The update is computed before take, which rejects an index only when it runs: w's buffer may
  // not be overwritten until nothing can fail any more.
  Shared w = shared(Tensor::from({1.0, 2.0, 3.0}, {3}), "w");
  Var i = vector("i", i64);
  Var doubled = w * 2.0;
  Function f = function({i}, {take(doubled, i)}, {.updates = {{w, doubled}}});
  expect_error<ShapeError>([&] { f(Tensor::from<int64_t>({0, 7}, {2})); }, {"out of bounds"});
  expect_values(w.get_value(), {1, 2, 3});
  expect_values(f(Tensor::from<int64_t>({2}, {1}))[0], {6});
  expect_values(w.get_value(), {2, 4, 6});
}

TEST(Planner, AnUpdateThatChecksItsIndicesFirstIsWrittenInPlace) {
  // inc_take checks every index before it writes a row: as the last op that may fail it still
  // writes w's new value into w's own buffer, and a bad index leaves w as it was.
  Shared w = shared(Tensor::from({1.0, 2.0, 3.0}, {3}), "w");
  Var i = vector("i", i64), v = vector("v", f64);
  Function f = function({i, v}, {}, {.updates = {{w, inc_subtensor(take(w, i), v)}}});
  EXPECT_EQ(f.memory_report({{2}, {2}}).result_bytes, 0);
  expect_error<ShapeError>([&] { f(Tensor::from<int64_t>({0, 7}, {2}), Tensor::from({10.0, 20.0}, {2})); }, {"out of bounds"});
  expect_values(w.get_value(), {1, 2, 3});
  f(Tensor::from<int64_t>({2, 2}, {2}), Tensor::from({10.0, 20.0}, {2}));
  expect_values(w.get_value(), {1, 2, 33});
}

TEST(Runtime, ProfileCountsCallsTimeAndBytesPerOp) {
  Var x = matrix("x", f32), w = matrix("w", f32);
  Function f = function({x, w}, {tanh(dot(x, w))}, {.mode = Mode("plain", {}), .profile = true});
  for (int i = 0; i < 3; ++i) f(Tensor::ones({4, 8}), Tensor::ones({8, 2}));
  Profile p = f.profile();
  EXPECT_EQ(p.calls, 3);
  ASSERT_EQ(p.ops.size(), 2u);
  for (const OpProfile& op : p.ops) {
    EXPECT_EQ(op.calls, 3) << op.op;
    EXPECT_EQ(op.bytes, 3 * 4 * 2 * 4) << op.op;  // three calls writing a 4 x 2 f32 result each
    EXPECT_GT(op.seconds, 0.0);
  }
  EXPECT_NE(p.str().find("dot: 3 runs"), std::string::npos) << p.str();
  Function g = function({x, w}, {dot(x, w)});
  expect_error<Error>([&] { g.profile(); }, {"without profiling", ".profile = true"});
}

TEST(Planner, BorrowedOutputsInAKeptArenaAllocateNothing) {
  Var x = matrix("x", f32);
  Var y = tanh(x * 2.0) + 1.0;
  Function f = function({x}, {Out(y, {.borrow = true})}, {.keep_buffers = true});
  Tensor xv = Tensor::ones({64, 64});
  Tensor first = f(xv)[0];
  f(xv);
  const int64_t before = allocator_stats().n_allocations;
  for (int i = 0; i < 10; ++i) f(xv);
  EXPECT_EQ(allocator_stats().n_allocations - before, 0);  // "with Out(borrow) it performs none at all"
  Tensor again = f(xv)[0];
  EXPECT_TRUE(again.shares_memory(first));  // the same buffer, overwritten by each call, as borrow allows
  expect_values(again, std::vector<double>(64 * 64, std::tanh(2.0) + 1.0), 1e-6);
  // Without borrow the output is fresh each call.
  Function g = function({x}, {y}, {.keep_buffers = true});
  Tensor a = g(xv)[0], b = g(xv)[0];
  EXPECT_FALSE(a.shares_memory(b));
}

// Issue 9, item 15: a function whose planned temporaries were all empty never allocated its arena,
// and kernels wrote through a null pointer (SIGSEGV).
TEST(Planner, FunctionsWhoseTemporariesAreEmptyRun) {
  Var x = vector("x");
  const Tensor xv = Tensor::from({1.f, 2.f, 3.f}, {3});
  for (Mode mode : {Mode::fast_run(), plain_mode()}) {
    Var s = slice(x, 0, 0, 1, 1);
    expect_values(function({x}, {inc_subtensor(s, -s)}, {.mode = mode})(xv)[0], {0, 2, 3});
    Function empty = function({x}, {Out(slice(x, 0, 0, 0, 1) + 1.0, {.borrow = true})}, {.mode = mode, .keep_buffers = true});
    EXPECT_EQ(empty(xv)[0].shape(), (Shape{0}));
    EXPECT_EQ(empty(xv)[0].shape(), (Shape{0}));
    Var c = scalar("c");
    EXPECT_EQ(function({c}, {grad(c * ifelse(c, c, c), c)}, {.mode = mode})(Tensor::scalar(1.f))[0].item<float>(), 2.f);
  }
}

TEST(Planner, ASumToShapeWithNothingToSumHandsItsInputOnAndAnOutputStillOwnsItsMemory) {
  // d/dx sum((x + b) * c) is c summed to x's shape: nothing to sum, so the planner hands c on
  // (Op::forwards_input) instead of copying it. Handed back as an output it is still a value of
  // its own, never the caller's c.
  Var x = matrix("x", f64), b = vector("b", f64), c = matrix("c", f64);
  Var g = grad(sum((x + b) * c), x);
  for (bool keep : {false, true}) {
    Function f = function({x, b, c}, {g}, {.keep_buffers = keep});
    const Tensor cv = random_tensor({3, 4}, f64, -1, 1, 5);
    for (int call = 0; call < 2; ++call) {
      const Tensor got = f(Tensor::zeros({3, 4}, f64), Tensor::zeros({4}, f64), cv)[0];
      expect_values(got, cv.to_vector<double>(), 0);
      EXPECT_FALSE(got.shares_memory(cv));
    }
  }
}

TEST(Planner, AWarmKeptArenaReusesItsTensorsAndStillComputesEachCall) {
  // With keep_buffers, a call that repeats the last one's plan in the same arena uses the kept
  // tensors as they are and does not rerun views of arena values: each call's values must still be
  // its own, also after the caller disposed a borrowed output and after a call that failed.
  Var x = matrix("x", f64), i = vector("i", i64);
  Var h = tanh(x) * 2.0;
  Var viewed = transpose(h) + 1.0;            // a view of an arena value, read by a kernel
  Var picked = take(transpose(h), i, 0);      // fails on an index out of range
  Function f = function({x, i}, {Out(viewed, {.borrow = true}), picked}, {.keep_buffers = true});
  auto expect_call = [&](const Tensor& xv) {
    const auto out = f(xv, Tensor::from(std::vector<int64_t>{0}));
    const auto v = xv.to_vector<double>();
    std::vector<double> want_viewed, want_picked;
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t r = 0; r < 2; ++r) want_viewed.push_back(std::tanh(v[r * 3 + c]) * 2.0 + 1.0);
    for (int64_t r = 0; r < 2; ++r) want_picked.push_back(std::tanh(v[r * 3]) * 2.0);
    expect_values(out[0], want_viewed, 1e-12);
    expect_values(out[1], want_picked, 1e-12);
    return out;
  };
  expect_call(random_tensor({2, 3}, f64, -1, 1, 1));
  expect_call(random_tensor({2, 3}, f64, -1, 1, 2));
  auto out = expect_call(random_tensor({2, 3}, f64, -1, 1, 3));
  out[0].dispose();  // the borrowed output is the kept tensor itself
  expect_call(random_tensor({2, 3}, f64, -1, 1, 4));
  EXPECT_THROW(f(random_tensor({2, 3}, f64, -1, 1, 5), Tensor::from(std::vector<int64_t>{7})), ShapeError);
  expect_call(random_tensor({2, 3}, f64, -1, 1, 6));
  expect_call(random_tensor({2, 3}, f64, -1, 1, 7));
}

#include <cmath>

#include "test_util.hpp"

using namespace kiln;
using namespace kiln::test;

TEST(IfElse, OnlyTheTakenBranchRuns) {
  Var c = scalar("c", f64), x = matrix("x", f64), y = matrix("y", f64);
  // The else branch would raise: x (2 x 3) and y (2 x 3) cannot be multiplied.
  Var z = ifelse(c, x * 2.0, dot(x, y) + 1.0);
  Function f = function({c, x, y}, {z}, {.profile = true});
  Tensor xv = random_tensor({2, 3}), yv = random_tensor({2, 3}, f64, -1, 1, 2);
  auto out = f(Tensor::scalar(1.0), xv, yv);
  std::vector<double> doubled;
  for (double v : xv.to_vector<double>()) doubled.push_back(2 * v);
  expect_values(out[0], doubled);
  for (const OpProfile& op : f.profile().ops)
    if (op.op == "dot" || op.op == "gemm") EXPECT_EQ(op.calls, 0) << op.op;  // the else branch never ran
  expect_error<ShapeError>([&] { f(Tensor::scalar(0.0), xv, yv); }, {"not aligned", "ifelse_test.cpp"});
}

TEST(IfElse, BranchesOfDifferentShapes) {
  Var c = scalar("c", i64), v = vector("v", f64);
  Var z = ifelse(c, v * 3.0, concatenate({v, v}));
  Function f = function({c, v}, {sum(z), z});
  Tensor vv = Tensor::from({1.0, 2.0}, {2});
  auto a = f(Tensor::scalar<int64_t>(1), vv);
  auto b = f(Tensor::scalar<int64_t>(0), vv);
  EXPECT_EQ(a[1].shape(), (Shape{2}));
  EXPECT_EQ(b[1].shape(), (Shape{4}));
  expect_values(a[0], {9});
  expect_values(b[0], {6});
}

TEST(IfElse, Nested) {
  Var a = scalar("a", f64), b = scalar("b", f64), x = vector("x", f64);
  Var z = ifelse(a, ifelse(b, exp(x), -x), sqrt(x));
  Function f = function({a, b, x}, {z});
  Tensor xv = Tensor::from({1.0, 4.0}, {2});
  expect_values(f(Tensor::scalar(1.0), Tensor::scalar(1.0), xv)[0], {std::exp(1.0), std::exp(4.0)});
  expect_values(f(Tensor::scalar(1.0), Tensor::scalar(0.0), xv)[0], {-1, -4});
  expect_values(f(Tensor::scalar(0.0), Tensor::scalar(1.0), xv)[0], {1, 2});
}

TEST(IfElse, SharedWorkRunsOnceWhicheverBranch) {
  Var c = scalar("c", f64), x = vector("x", f64);
  Var common = exp(x);
  Var z = ifelse(c, common * 2.0, common + 1.0);
  Function f = function({c, x}, {z, common});
  auto out = f(Tensor::scalar(0.0), Tensor::from({0.0}, {1}));
  expect_values(out[0], {2});
  expect_values(out[1], {1});
}

TEST(IfElse, SeveralValues) {
  Var c = scalar("c", f64), x = vector("x", f64);
  auto zs = ifelse(c, {x + 1.0, x * 2.0}, {x - 1.0, x * 3.0});
  Function f = function({c, x}, {zs[0], zs[1]});
  auto out = f(Tensor::scalar(0.0), Tensor::from({2.0}, {1}));
  expect_values(out[0], {1});
  expect_values(out[1], {6});
}

TEST(IfElse, Gradients) {
  for (double sign : {1.0, -1.0}) {
    verify_grad([&](std::vector<Var> v) {
      return ifelse(sum(v[0]) * sign > 0.0, exp(v[0]) * v[1], v[0] - v[1] * 2.0);
    }, {random_tensor({3}, f64, 0.1, 1), random_tensor({3}, f64, -1, 1, 2)});
  }
}

// Found by a new-user trial: the branch not taken got a zero cotangent, and zero times its
// derivative is NaN where that derivative is infinite or undefined (sqrt, log at x <= 0), so the
// guard idiom ifelse(x > 0, sqrt(x), 0) had a NaN gradient exactly where it guards.
TEST(IfElse, TheBranchNotTakenAddsNothingToTheGradientEvenWhereItsDerivativeIsInfinite) {
  Var x = scalar("x", f64), w = scalar("w", f64);
  Var guarded = ifelse(x > 0.0, sqrt(x) * w, x * 0.0);
  Var logged = ifelse(x > 0.0, log(x), x * w);
  Var inner = exp(x);  // read by both branches: differentiated outside them
  Var shared_work = ifelse(x > 0.0, log(x) + inner, inner * 2.0);
  Var nested = ifelse(x > -0.5, ifelse(x > 0.0, sqrt(x), x * 3.0), x * 1.0);
  Function f = function({x, w}, {grad(guarded, {x, w})[0], grad(guarded, {x, w})[1], grad(logged, x), grad(logged, w),
                                 grad(shared_work, x), grad(nested, x)});
  for (double v : {-2.0, -1.0, -0.25, 0.0, 4.0}) {
    SCOPED_TRACE(v);
    const std::vector<Tensor> g = f(Tensor::scalar<double>(v), Tensor::scalar<double>(3.0));
    const double nested_grad = v > 0 ? 0.5 / std::sqrt(v) : v > -0.5 ? 3.0 : 1.0;
    const std::vector<double> want{v > 0 ? 1.5 / std::sqrt(v) : 0.0, v > 0 ? std::sqrt(v) : 0.0, v > 0 ? 1 / v : 3.0,
                                   v > 0 ? 0.0 : v, v > 0 ? 1 / v + std::exp(v) : 2 * std::exp(v), nested_grad};
    for (size_t k = 0; k < want.size(); ++k) expect_values(g[k], {want[k]}, 1e-12);
  }
  // A value inside a branch asked for, and a second derivative (the first gradient's ifelse and the
  // forward one read the same sqrt: both are branches on the same condition).
  Var h = sqrt(x);
  Var y = ifelse(x > 0.0, h * h * h * w, x);
  Function asked = function({x, w}, {grad(y, h), grad(grad(y, x), x)});
  for (double v : {-1.0, 2.0}) {
    const std::vector<Tensor> g = asked(Tensor::scalar<double>(v), Tensor::scalar<double>(3.0));
    expect_values(g[0], {v > 0 ? 3 * v * 3.0 : 0.0}, 1e-12);
    expect_values(g[1], {v > 0 ? 3.0 * 0.75 / std::sqrt(v) : 0.0}, 1e-9);
  }
  for (double sign : {1.0, -1.0})
    verify_grad([&](std::vector<Var> u) { return ifelse(sum(u[0]) * sign > 0.0, sqrt(u[0]) * u[1], log(u[1] * u[1] + 1.0)); },
                {random_tensor({3}, f64, 0.1, 1), random_tensor({3}, f64, -1, 1, 2)});
}

// Found by this stop's review: with branches of different shapes, the gradient work of the branch
// not taken has the other branch's shapes, and must not run; fast_run's fusion had put it in one
// pass with a value the other branch reads (an extra output), which ran it and failed.
TEST(IfElse, GradientsOfBranchesOfDifferentShapesInEveryMode) {
  Var x = vector("x", f64), w = scalar("w", f64);
  Var y = sum(ifelse(sum(x) > 0.0, slice(x, 0, 0, 2) * w, x * x));
  const std::vector<Var> g = grad(y, {x, w});
  for (const Mode& mode : {Mode::fast_run(), Mode::fast_compile()}) {
    SCOPED_TRACE(mode.name());
    Function f = function({x, w}, {g[0], g[1]}, {.mode = mode});
    std::vector<Tensor> taken = f(Tensor::from(std::vector<double>{0.5, 1.2, 0.3, 0.9, 1.1}), Tensor::scalar<double>(1.3));
    expect_values(taken[0], {1.3, 1.3, 0, 0, 0}, 1e-12);
    expect_values(taken[1], {1.7}, 1e-12);
    std::vector<Tensor> other = f(Tensor::from(std::vector<double>{-0.5, -1.2, 0.3, -0.9, 0.1}), Tensor::scalar<double>(1.3));
    expect_values(other[0], {-1.0, -2.4, 0.6, -1.8, 0.2}, 1e-12);
    expect_values(other[1], {0.0}, 1e-12);
  }
}

TEST(IfElse, DebugModeAndErrors) {
  Var c = scalar("c", f64), x = vector("x", f64);
  Var z = ifelse(c, exp(x), log(x));
  Function f = function({c, x}, {z}, {.mode = Mode::debug()});
  expect_values(f(Tensor::scalar(1.0), Tensor::from({0.0}, {1}))[0], {1});
  expect_error<TypeError>([&] { ifelse(x, x, x); }, {"condition must be a scalar"});
  expect_error<TypeError>([&] { ifelse(c, x, matrix("m", f64)); }, {"branch values 0 differ"});
  Function g = function({c, x}, {z});
  expect_error<TypeError>([&] { g(Tensor::from({1.0, 0.0}, {2}), Tensor::from({1.0}, {1})); }, {"input 0", "'c'", "0 dimensions"});
}

// Issue 9, item 10: constant folding ran the untaken branch: fast_run failed to compile a graph
// that plain runs, because a constant take in the other branch was out of range.
TEST(IfElse, FoldingNeverTurnsABranchsRunTimeErrorIntoACompileError) {
  Var c = scalar("c", b8), x = vector("x");
  Var out_of_range = take(constant(Tensor::from({1.f, 2.f, 3.f}, {3})), constant(Tensor::from(std::vector<int64_t>{5})));
  for (Mode mode : {Mode::fast_run(), Mode::fast_compile(), plain_mode()}) {
    Function f = function({c, x}, {ifelse(c, x * 2.0, out_of_range)}, {.mode = mode});
    expect_values(f(Tensor::scalar(true), Tensor::from({1.f, 2.f, 3.f}, {3}))[0], {2, 4, 6});
    expect_error<ShapeError>([&] { f(Tensor::scalar(false), Tensor::from({1.f, 2.f, 3.f}, {3})); },
                             {"index 5 is out of bounds", "ifelse_test.cpp"});
  }
}

// Issue 9, item 14: docs/ops.md said the branches must agree in dtype while the code promoted
// them; both now say what NumPy does (as where): the result has the promoted dtype.
TEST(IfElse, BranchDtypesArePromotedAndRanksMustAgree) {
  Var c = scalar("c", b8), a = vector("a", f32), b = vector("b", f64), n = vector("n", i32);
  Var z = ifelse(c, a, b);
  EXPECT_EQ(z.dtype(), f64);
  EXPECT_EQ(ifelse(c, a, n).dtype(), f64);
  EXPECT_EQ(ifelse(c, n, n * 2).dtype(), i32);
  auto o = function({c, a, b}, {z})(Tensor::scalar(true), Tensor::from({1.5f}, {1}), Tensor::from({2.5}, {1}));
  expect_values(o[0], {1.5});
  expect_error<TypeError>([&] { ifelse(c, a, matrix("m")); }, {"ifelse", "f32[?]", "f32[?,?]"});
}

namespace {

// The calls of the profiled ops whose names contain one of `names`; fails unless there is one.
int64_t calls_of_ops_named(const Function& f, const std::vector<std::string>& names) {
  int64_t calls = 0, ops = 0;
  for (const OpProfile& op : f.profile().ops)
    for (const std::string& name : names)
      if (op.op.find(name) != std::string::npos) {
        calls += op.calls;
        ++ops;
        break;
      }
  EXPECT_GT(ops, 0) << "the program has no op named like " << names[0];
  return calls;
}

}  // namespace

// Two ifelses on one condition: what only their then values need runs only when the condition
// holds, whichever of them reads it. A gradient makes such pairs (each input of a branch gets its
// gradient as an ifelse on the condition): the work of the branch not taken, forward and backward,
// must not run, nor make a call fail when it would fail there.
TEST(IfElse, WorkTwoIfElsesOnOneConditionShareRunsOnlyWhenTheirBranchIsTaken) {
  Var c = scalar("c", f64), x = matrix("x", f64), y = matrix("y", f64);
  Var product = dot(x, y);
  Var z1 = ifelse(c, product * 2.0, x), z2 = ifelse(c, product + 1.0, x * 3.0);
  Function f = function({c, x, y}, {z1, z2}, {.profile = true});
  const Tensor xv = random_tensor({2, 2}), yv = random_tensor({2, 2}, f64, -1, 1, 2);
  auto out = f(Tensor::scalar(0.0), xv, yv);
  expect_values(out[0], xv.to_vector<double>());
  EXPECT_EQ(calls_of_ops_named(f, {"dot", "gemm"}), 0);
  out = f(Tensor::scalar(1.0), xv, yv);
  expect_values(out[1], eval1({x, y}, dot(x, y) + 1.0, {xv, yv}).to_vector<double>());

  // The then branch cannot run for these shapes: (2, 3) . (2, 3).
  Var guarded = ifelse(c, dot(x, y) + 1.0, x * 2.0);
  const Var gx = grad(sum(guarded), x);
  for (const Mode& mode : {Mode::fast_run(), Mode::fast_compile(), plain_mode()}) {
    Function g = function({c, x, y}, {gx}, {.mode = mode});
    expect_values(g(Tensor::scalar(0.0), Tensor::ones({2, 3}, f64), Tensor::ones({2, 3}, f64))[0], std::vector<double>(6, 2.0));
  }

  Var w = vector("w", f64), v = vector("v", f64);
  Var loss = sum(ifelse(c, sqrt(exp(v * w)) * sin(w), v));
  const std::vector<Var> grads = grad(loss, {v, w});
  Function g = function({c, v, w}, {grads[0], grads[1]}, {.profile = true});
  const Tensor vv = Tensor::from({0.5, 1.5}, {2}), wv = Tensor::from({-0.5, 2.0}, {2});
  auto at_false = g(Tensor::scalar(0.0), vv, wv);
  expect_values(at_false[0], {1, 1});
  expect_values(at_false[1], {0, 0});
  EXPECT_EQ(calls_of_ops_named(g, {"exp", "sqrt", "sin", "cos"}), 0);
  verify_grad([](const std::vector<Var>& in) { return sum(ifelse(sum(in[0]) > 0.0, sqrt(exp(in[0] * in[1])) * sin(in[1]), in[0])); },
              {vv, wv});
  verify_grad([](const std::vector<Var>& in) { return sum(ifelse(sum(in[0]) < 0.0, sqrt(exp(in[0] * in[1])) * sin(in[1]), in[0])); },
              {vv, wv});
}

// A branch's work runs in the block of the ifelse on its condition that needs it, not in the first
// one: work one ifelse needs would otherwise start its buffer's life sooner and raise the peak.
// Sharing a condition must cost no memory that two conditions of equal value would not.
TEST(IfElse, SharedConditionsPlanNoMoreMemoryThanDistinctOnes) {
  Var x = vector("x", f64), y = vector("y", f64);
  auto peak = [&](const Var& c, const Var& d, const std::vector<Var>& inputs) {
    Var big = exp(x);  // only the second ifelse's then value reads it
    Var t1 = sin(y) * 2.0, t2 = cos(t1) + t1;
    Var a = ifelse(c, t2 * 3.0, y);
    Var b = ifelse(d, big * a + 1.0, x);
    Function f = function(std::vector<In>(inputs.begin(), inputs.end()), {b, a}, {.mode = plain_mode()});
    std::vector<Tensor> args(inputs.size() - 2, Tensor::scalar(1.0));
    args.push_back(Tensor::ones({1000}, f64));
    args.push_back(Tensor::ones({1000}, f64));
    const auto out = f(args);
    expect_values(out[1], std::vector<double>(1000, 6 * std::sin(1.0) + 3 * std::cos(2 * std::sin(1.0))));
    return f.memory_report().planned_peak_bytes;
  };
  Var c = scalar("c", f64), d = scalar("d", f64);
  EXPECT_LE(peak(c, c, {c, x, y}), peak(c, d, {c, d, x, y}));
}

// An ifelse's shape is worked out without its value (fast_run's shape_without_value) as an ifelse
// of its branches' shapes, as lazy as the values: the shape work of a branch that cannot run (a
// product whose shapes do not align) must not run either, nor make its gradient fail.
TEST(IfElse, TheShapeOfABranchNotTakenIsNotWorkedOut) {
  Var c = scalar("c", f64), x = matrix("x", f64), y = matrix("y", f64);
  Var z = ifelse(c, dot(x, y) + 1.0, x * 2.0);
  Var z1 = ifelse(c, dot(x, y) + 1.0, x * 2.0), z2 = ifelse(c, dot(x, y) * 2.0, x * 3.0);
  const Var gx = grad(sum(z1) + sum(z2), x);
  const Tensor misaligned = Tensor::ones({2, 3}, f64);
  for (const Mode& mode : {Mode::fast_run(), Mode::fast_compile(), plain_mode(), Mode::debug()}) {
    Function f = function({c, x, y}, {shape_of(z), mean(z), gx}, {.mode = mode});
    const auto out = f(Tensor::scalar(0.0), misaligned, misaligned);
    expect_values(out[0], {2, 3});
    expect_values(out[1], {2});
    expect_values(out[2], std::vector<double>(6, 5.0));
  }
}

// A guard within a guard: the gradient of an ifelse in a branch of an ifelse on another condition
// counts only where both branches are taken. Where the outer one is not, the inner branch's work
// (derivative infinite or undefined there, or shapes that do not align) adds exactly zero and
// does not run: it gave NaN (0 times the derivative of sqrt at a negative argument).
TEST(IfElse, AGuardWithinAGuardAddsNothingWhereTheOuterBranchIsNotTaken) {
  Var x = scalar("x", f64), y = scalar("y", f64);
  Var z = ifelse(x > 0.0, ifelse(y > 0.0, sqrt(x * y), x * 0.0), y * 2.0);
  const std::vector<Var> g = grad(z, {x, y});
  Var a = matrix("a", f64), b = matrix("b", f64), c = scalar("c", f64), d = scalar("d", f64);
  const Var ga = grad(sum(ifelse(c, ifelse(d, dot(a, b), a * 2.0), a * 3.0)), a);
  const Tensor misaligned = Tensor::ones({2, 3}, f64);
  for (const Mode& mode : {Mode::fast_run(), Mode::fast_compile(), plain_mode()}) {
    Function f = function({x, y}, {z, g[0], g[1]}, {.mode = mode});
    auto out = f(Tensor::scalar(-1.0), Tensor::scalar(2.0));
    expect_values(out[0], {4});
    expect_values(out[1], {0});
    expect_values(out[2], {2});
    out = f(Tensor::scalar(2.0), Tensor::scalar(8.0));
    expect_values(out[1], {1});  // d sqrt(xy) / dx = y / (2 sqrt(xy))
    expect_values(out[2], {0.25});
    Function h = function({c, d, a, b}, {ga}, {.mode = mode});
    expect_values(h(Tensor::scalar(0.0), Tensor::scalar(1.0), misaligned, misaligned)[0], std::vector<double>(6, 3.0));
    expect_values(h(Tensor::scalar(1.0), Tensor::scalar(0.0), misaligned, misaligned)[0], std::vector<double>(6, 2.0));
  }
  verify_grad([](const std::vector<Var>& in) {
    return ifelse(in[0] > 0.0, ifelse(in[1] > 0.0, sqrt(in[0] * in[1]), in[0] * 0.5), in[1] * 2.0);
  }, {Tensor::scalar(2.0), Tensor::scalar(8.0)});
  verify_grad([](const std::vector<Var>& in) {
    return ifelse(in[0] > 0.0, ifelse(in[1] > 0.0, sqrt(in[0] * in[1]), in[0] * 0.5), in[1] * 2.0);
  }, {Tensor::scalar(2.0), Tensor::scalar(-3.0)});
}

// A value read only on a side that can never be taken (the else side of an ifelse on c inside the
// then side of another on c) is still connected: its gradient is zero, not a "disconnected" error.
TEST(IfElse, AValueReadOnlyWhereNoBranchCanBeTakenHasAZeroGradient) {
  Var c = scalar("c", f64), x = scalar("x", f64), y = scalar("y", f64);
  Var z = ifelse(c, ifelse(c, y * 3.0, x * 5.0), y * 2.0);
  const std::vector<Var> g = grad(z, {x, y});
  for (const Mode& mode : {Mode::fast_run(), Mode::fast_compile(), plain_mode()}) {
    Function f = function({c, x, y}, {g[0], g[1]}, {.mode = mode});
    auto out = f(Tensor::scalar(1.0), Tensor::scalar(1.0), Tensor::scalar(1.0));
    expect_values(out[0], {0});
    expect_values(out[1], {3});
    out = f(Tensor::scalar(0.0), Tensor::scalar(1.0), Tensor::scalar(1.0));
    expect_values(out[0], {0});
    expect_values(out[1], {2});
  }
}

// Work that only the not-taken sides of ifelses on different conditions read runs only when one of
// those sides is taken (Theano's lazy evaluation): it ran always, and a product whose shapes do
// not align there raised although neither side reading it was taken.
TEST(IfElse, WorkReadOnlyBySidesOfIfElsesOnDifferentConditionsRunsOnlyWhenOneIsTaken) {
  Var a = scalar("a", f64), x = matrix("x", f64), y = matrix("y", f64);
  Var shared_work = dot(x, y) + 1.0;
  Var z1 = ifelse(a > 0.0, x * 2.0, shared_work), z2 = ifelse(a > 1.0, x * 3.0, shared_work * 2.0);
  const Tensor misaligned = Tensor::ones({2, 3}, f64);
  for (const Mode& mode : {Mode::fast_run(), Mode::fast_compile(), plain_mode(), Mode::debug()}) {
    Function f = function({a, x, y}, {z1, z2}, {.mode = mode, .profile = mode.name() != "debug"});
    const auto out = f(Tensor::scalar(2.0), misaligned, misaligned);
    expect_values(out[0], std::vector<double>(6, 2.0));
    expect_values(out[1], std::vector<double>(6, 3.0));
    if (mode.name() != "debug") EXPECT_EQ(calls_of_ops_named(f, {"dot", "gemm"}), 0) << mode.name();
    expect_error<ShapeError>([&] { f(Tensor::scalar(0.5), misaligned, misaligned); }, {"not aligned"});
    const Tensor xv = random_tensor({2, 2}), yv = random_tensor({2, 2}, f64, -1, 1, 2);
    const Tensor expected = eval1({x, y}, dot(x, y) + 1.0, {xv, yv});
    for (double at : {-1.0, 0.5, 2.0}) {
      const auto values = f(Tensor::scalar(at), xv, yv);
      expect_values(values[0], (at > 0 ? xv * 2.0 : expected).to_vector<double>());
      expect_values(values[1], (at > 1 ? xv * 3.0 : expected * 2.0).to_vector<double>());
    }
  }
}

// The guard's conditions may be computed only after the work it guards would otherwise run, or
// read an ifelse's result: the work still runs exactly when a side that reads it is taken.
TEST(IfElse, AGuardWhoseConditionReadsAnotherIfElseStillRunsTheWorkWhenNeeded) {
  Var a = scalar("a", f64), v = vector("v", f64);
  Var work = exp(v) + 1.0;
  Var z1 = ifelse(a > 0.0, v * 2.0, work);
  Var z2 = ifelse(sum(z1) > 100.0, v * 3.0, work * 2.0);
  Function f = function({a, v}, {z1, z2}, {.mode = plain_mode()});
  const Tensor vv = Tensor::from({0.0, 1.0}, {2});
  auto out = f(Tensor::scalar(1.0), vv);
  expect_values(out[0], {0, 2});
  expect_values(out[1], {4, 2 * (std::exp(1.0) + 1)});
  out = f(Tensor::scalar(-1.0), vv);
  expect_values(out[0], {2, std::exp(1.0) + 1});
  expect_values(out[1], {4, 2 * (std::exp(1.0) + 1)});
}

// An ifelse on a guard's condition that reads none of the guard's work may come before the work's
// own inputs: the guard's block comes before the first ifelse that reads it (its block ran before
// the first ifelse sharing the side, ahead of an input computed after that ifelse).
TEST(IfElse, AGuardRunsBeforeTheFirstIfElseThatReadsItNotTheFirstOnItsCondition) {
  Var a = scalar("a", f64), v = vector("v", f64), u = vector("u", f64);
  Var early = ifelse(a > 0.0, v * 2.0, v * 3.0);
  Var late_input = exp(u) * 2.0;  // an output too: computed outside the branches
  Var work = late_input + 1.0;
  Var z1 = ifelse(a > 0.0, v * 4.0, work);
  Var z2 = ifelse(a > 1.0, v * 5.0, work * 2.0);
  const Tensor vv = Tensor::from({1.0, 2.0}, {2}), uv = Tensor::from({0.0, 1.0}, {2});
  for (const Mode& mode : {Mode::fast_run(), Mode::fast_compile(), plain_mode(), Mode::debug()}) {
    Function f = function({a, v, u}, {early, z1, z2, late_input}, {.mode = mode});
    for (double at : {-1.0, 0.5, 2.0}) {
      const auto out = f(Tensor::scalar(at), vv, uv);
      const double w0 = 2 * std::exp(0.0) + 1, w1 = 2 * std::exp(1.0) + 1;
      expect_values(out[0], at > 0 ? std::vector<double>{2, 4} : std::vector<double>{3, 6});
      expect_values(out[1], at > 0 ? std::vector<double>{4, 8} : std::vector<double>{w0, w1});
      expect_values(out[2], at > 1 ? std::vector<double>{5, 10} : std::vector<double>{2 * w0, 2 * w1});
    }
  }
}

// Work in one guard may read work in another with more sides (u is read by three sides, w = u.y by
// two of them): the guard with more sides runs first (w's block ran first and read u unset: a crash).
TEST(IfElse, AGuardReadingAnotherGuardsWorkRunsAfterIt) {
  Var a = scalar("a", f64), b = scalar("b", f64), c = scalar("c", f64), x = matrix("x", f64), y = matrix("y", f64);
  Var u = dot(x, y), w = dot(u, y);
  Var out = sum(ifelse(a > 0.0, w * 3.0, x)) + sum(ifelse(b > 0.0, w * 4.0, x)) + sum(ifelse(c > 0.0, u * 5.0, x));
  const Tensor xv = Tensor::from({1.0, 2.0, 3.0, 4.0}, {2, 2}), identity = Tensor::from({1.0, 0.0, 0.0, 1.0}, {2, 2});
  const Tensor misaligned = Tensor::ones({2, 3}, f64);
  for (const Mode& mode : {Mode::fast_run(), Mode::fast_compile(), plain_mode(), Mode::debug()}) {
    Function f = function({a, b, c, x, y}, {out}, {.mode = mode});
    for (int k = 0; k < 8; ++k) {
      const double av = k & 1, bv = (k >> 1) & 1, cv = (k >> 2) & 1;
      const auto got = f(Tensor::scalar(av), Tensor::scalar(bv), Tensor::scalar(cv), xv, identity);
      expect_values(got[0], {(av ? 30.0 : 10.0) + (bv ? 40.0 : 10.0) + (cv ? 50.0 : 10.0)});
    }
    expect_values(f(Tensor::scalar(0.0), Tensor::scalar(0.0), Tensor::scalar(0.0), misaligned, misaligned)[0], {18});
  }
}

// A guard tests each side it runs for as deep as its conditions can be read: work that the else
// side of an ifelse on c reads, both at the top and inside the else side of an ifelse on d, runs
// only when c is false (it ran whenever d was false, and failed on shapes there).
TEST(IfElse, AGuardTestsTheConditionsDownToEachSideItRunsFor) {
  Var s = scalar("s", f64), t = scalar("t", f64), x = matrix("x", f64), y = matrix("y", f64);
  Var product = dot(x, x);
  Var c = s > -0.5;
  Var first = ifelse(c, y, product), second = ifelse(c, y * 2.0, product);
  auto pair = ifelse(t > 0.5, {second, second}, {first, second});
  const Tensor misaligned = Tensor::ones({2, 3}, f64);
  for (const Mode& mode : {Mode::fast_run(), plain_mode()}) {
    Function f = function({s, t, x, y}, {pair[0], pair[1]}, {.mode = mode, .profile = true});
    for (double at : {1.0, 0.0}) {
      const auto out = f(Tensor::scalar(1.0), Tensor::scalar(at), misaligned, misaligned);
      expect_values(out[0], std::vector<double>(6, at > 0.5 ? 2.0 : 1.0));
      expect_values(out[1], std::vector<double>(6, 2.0));
    }
    EXPECT_EQ(calls_of_ops_named(f, {"dot", "gemm"}), 0) << mode.name();
    expect_error<ShapeError>([&] { f(Tensor::scalar(-1.0), Tensor::scalar(0.0), misaligned, misaligned); }, {"not aligned"});
  }
}

// Work read inside branches of ifelses that sit in a guard: the guard's own sides and the inner
// sides together say when it runs (the product below is needed only when c1 is false; it ran
// when c1 held and c2 did not).
TEST(IfElse, WorkBelowAGuardRunsOnlyOnTheWaysThatNeedIt) {
  Var s0 = scalar("s0", f64), s2 = scalar("s2", f64), x = matrix("x", f64), y = matrix("y", f64);
  Var product = dot(x, x);
  Var c1 = s0 > -0.5, c2 = s2 > -0.5, c3 = s2 > 0.5;
  Var n11 = ifelse(c1, y, product);
  Var n13 = ifelse(c1, y, ifelse(c2, n11, product));
  auto pair = ifelse(c3, {n13, n13}, {n11, n13});
  const Tensor misaligned = Tensor::ones({2, 3}, f64), yv = Tensor::full({2, 3}, 7.0, f64);
  for (const Mode& mode : {Mode::fast_run(), Mode::fast_compile(), plain_mode(), Mode::debug()}) {
    Function f = function({s0, s2, x, y}, {pair[1]}, {.mode = mode});
    for (double at : {1.0, 0.0, -1.0}) {
      expect_values(f(Tensor::scalar(1.0), Tensor::scalar(at), misaligned, yv)[0], std::vector<double>(6, 7.0));
      expect_error<ShapeError>([&] { f(Tensor::scalar(-1.0), Tensor::scalar(at), misaligned, yv); }, {"not aligned"});
    }
  }
}

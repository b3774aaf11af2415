#include "exec/backend.hpp"
#include "graph/op.hpp"
#include "test_util.hpp"

using namespace kiln;
using namespace kiln::test;

TEST(Grad, PathsAccumulate) {
  Var x = scalar("x", f64);
  Var y = x * x + 3.0 * x + exp(x);  // three paths from x
  Tensor g = eval1({x}, grad(y, x), {Tensor::scalar(2.0)});
  expect_values(g, {2 * 2 + 3 + std::exp(2.0)});
}

TEST(Grad, SecondDerivative) {
  Var x = scalar("x", f64);
  Var g = grad(x * x * x, x);
  expect_values(eval1({x}, grad(g, x), {Tensor::scalar(2.0)}), {12});
}

TEST(Grad, CostMustBeAFloatScalar) {
  expect_error<GradError>([] { grad(vector("v"), vector("w")); }, {"scalar (0-d)", "sum() or mean()"});
  Var i = scalar("i", i64);
  expect_error<GradError>([&] { grad(i * 2, i); }, {"float"});
}

TEST(Grad, DisconnectedInputRaisesOrGivesZero) {
  Var x = vector("x", f64), z = vector("z", f64);
  Var cost = sum(x * 2.0);
  expect_error<GradError>([&] { grad(cost, {x, z}); }, {"wrt[1]", "'z'", "disconnected", "DisconnectedInputs::zero"});
  auto gs = grad(cost, {x, z}, {.disconnected_inputs = DisconnectedInputs::zero});
  auto o = eval({x, z}, gs, {Tensor::from({1.0, 2.0}, {2}), Tensor::from({5.0}, {1})});
  expect_values(o[0], {2, 2});
  expect_values(o[1], {0});
}

// "the cost does not depend on x" was wrong for a cost that reads x through a comparison.
TEST(Grad, ACostReadingXOnlyThroughAComparisonSaysSo) {
  Var x = vector("x", f64);
  expect_error<GradError>([&] { grad(sum(cast(x > 0.0, f64)), x); },
                          {"reads wrt[0] 'x'", "integer or boolean values", "gt", "disconnected", "DisconnectedInputs::zero"});
  expect_error<GradError>([&] { grad(sum(zeros_like(x)), x); }, {"reads wrt[0] 'x'", "its shape", "DisconnectedInputs::zero"});
  auto g = grad(sum(cast(x > 0.0, f64)), x, {.disconnected_inputs = DisconnectedInputs::zero});
  expect_values(eval1({x}, g, {Tensor::from({-1.0, 2.0}, {2})}), {0, 0});
}

TEST(Grad, IntegerInputsGetNoGradient) {
  Var x = vector("x", f64), k = vector("k", i64);
  Var cost = sum(x * cast(k, f64));
  expect_error<GradError>([&] { grad(cost, k); }, {"'k'", "integer"});
  expect_values(eval1({x, k}, grad(cost, x), {Tensor::from({1.0}, {1}), Tensor::from(std::vector<int64_t>{3})}), {3});
}

TEST(Grad, Lop) {
  Var x = vector("x", f64), v = vector("v", f64);
  Var y = x * x;
  Tensor g = eval1({x, v}, Lop({y}, {x}, {v})[0], {Tensor::from({1.0, 2.0}, {2}), Tensor::from({1.0, 10.0}, {2})});
  expect_values(g, {2, 40});
  expect_error<GradError>([&] { Lop({y}, {x}, {}); }, {"eval points"});
}

TEST(Grad, LopEvalPointOfAnotherShapeIsTheCallsError) {
  // Of the right rank but another shape: broadcasting would take it silently (it reported an
  // internal sum_to_shape); the call names the eval point, both shapes and the user's line.
  Var x = matrix("x", f64), v = matrix("v", f64);
  Function f = function({x, v}, {Lop({tanh(x)}, {x}, {v})[0]});
  expect_error<ShapeError>([&] { f(Tensor::ones({2, 3}, f64), Tensor::ones({1, 3}, f64)); },
                           {"Lop: eval point 0 (for f[0]) has shape (1,3) but must have shape (2,3)", "grad_test.cpp"});
  expect_values(f(Tensor::zeros({1, 2}, f64), Tensor::ones({1, 2}, f64))[0], {1, 1});
}

TEST(Grad, IntegerPathsCarryNoGradient) {
  Var x = vector("x", f64);
  expect_values(eval1({x}, grad(sum(cast(argmax(x), f64) * x), x), {Tensor::from({1.0, 5.0}, {2})}), {1, 1});
}

TEST(Grad, NonDifferentiableOpSaysSo) {
  Var x = matrix("x", f64), y = vector("y", i64);
  Var g = grad(sum(categorical_crossentropy(softmax(x), y)), x);
  EXPECT_NO_THROW(grad(sum(g * g), x));  // cross-entropy has second derivatives
  // A fused op has no gradient of its own: differentiation happens before compiling.
  expect_error<GradError>([&] { grad(sum(cast(argmax(x, {1}), f64) * x[0][0]), y); }, {"integer"});
}

TEST(Grad, CrossEntropySecondDerivative) {
  Tensor labels = Tensor::from(std::vector<int64_t>{1, 0});
  verify_grad([&](std::vector<Var> v) {
    Var x = v[0];
    return grad(sum(categorical_crossentropy(softmax(x), constant(labels))), x);
  }, {random_tensor({2, 3}, f64, -1, 1, 8)});
}

namespace {
// An op whose gradient is deliberately wrong, so that verify_grad must catch it.
class WrongSquare final : public Op {
 public:
  std::string name() const override { return "wrong_square"; }
  void params(OpParams&) const override {}
  std::vector<Type> infer_types(const std::vector<Type>& in) const override { return {in[0]}; }
  std::vector<Shape> infer_shapes(const std::vector<Shape>& in, const std::vector<const Tensor*>&) const override { return {in[0]}; }
  std::vector<Var> L_op(const Node& node, const std::vector<Var>& g) const override { return {g[0] * 3.0 * node.inputs[0]}; }
};
struct WrongSquareKernel final : Executable {
  void run(InputValues in, OutputValues out, std::span<std::byte>) const override {
    auto v = in[0].to_vector<double>();
    for (double& x : v) x *= x;
    out[0].copy_from(Tensor::from(v, in[0].shape()));
  }
};
const bool kernel_added = [] {
  cpu_backend().kernels().add<WrongSquare>([](auto, const Node&) { return std::make_unique<WrongSquareKernel>(); });
  return true;
}();
}  // namespace

TEST(VerifyGrad, CatchesAWrongGradient) {
  auto fn = [](std::vector<Var> v) { return apply1(std::make_shared<WrongSquare>(), {v[0]}, Loc::current()); };
  expect_error<GradError>([&] { verify_grad(fn, {Tensor::from({1.0, 2.0}, {2})}); },
                          {"verify_grad", "input 0", "element 0", "symbolic 3", "numeric 2"});
}

// Issue 9, item 14: verify_grad used one-sided differences (wrong at a kink) with an absolute step
// (below f32's resolution at large values, where the difference quotient divided by zero).
TEST(VerifyGrad, CentralDifferencesWithARelativeStep) {
  verify_grad([](std::vector<Var> v) { return abs(v[0]); }, {Tensor::from({0.0, 1.5, -2.0}, {3})});
  verify_grad([](std::vector<Var> v) { return v[0] * v[0] * 0.5; }, {Tensor::from({1e4f, -1e4f, 3e3f}, {3})});
  verify_grad([](std::vector<Var> v) { return softplus(v[0]); }, {Tensor::from({1e4f, -1e4f, 20.f}, {3})});
  verify_grad([](std::vector<Var> v) { return v[0] * v[0] * 0.5; }, {Tensor::from({1e9, -3e7, 1e-3}, {3})});
}

TEST(Grad, PowAtBaseZeroHasFiniteGradients) {
  // Found by the derivatives trial: d/dx x^0 and d/dy 0^y (y > 0) are 0, not NaN (0 times an
  // infinite power or logarithm), in every mode.
  Var x = vector("x", f64), y = vector("y", f64);
  const std::vector<Var> g = grad(sum(pow(x, y)), {x, y});
  for (Mode mode : {Mode::fast_run(), plain_mode()}) {
    const std::vector<Tensor> r = function({x, y}, {g[0], g[1]}, {.mode = mode})(Tensor::from({0.0, 0.0, 2.0}, {3}), Tensor::from({2.0, 0.0, 3.0}, {3}));
    expect_values(r[0], {0, 0, 12});
    EXPECT_EQ(r[1].to_vector<double>()[0], 0.0);
    EXPECT_NEAR(r[1].to_vector<double>()[2], 8 * std::log(2.0), 1e-12);
  }
  verify_grad([](std::vector<Var> v) { return pow(v[0], v[1]); }, {Tensor::from({0.5, 1.5, 2.0}, {3}), Tensor::from({2.0, 0.5, -1.0}, {3})});
}

#include <functional>

#include "test_util.hpp"

using namespace kiln;
using namespace kiln::test;

namespace {

struct UnaryCase {
  const char* name;
  std::function<Var(const Var&)> build;
  std::function<double(double)> reference;
  double lo, hi;
};

std::vector<UnaryCase> unary_cases() {
  return {
      {"neg", [](const Var& x) { return -x; }, [](double x) { return -x; }, -2, 2},
      {"exp", [](const Var& x) { return exp(x); }, [](double x) { return std::exp(x); }, -3, 3},
      {"log", [](const Var& x) { return log(x); }, [](double x) { return std::log(x); }, 0.2, 3},
      {"log1p", [](const Var& x) { return log1p(x); }, [](double x) { return std::log1p(x); }, -0.5, 2},
      {"expm1", [](const Var& x) { return expm1(x); }, [](double x) { return std::expm1(x); }, -2, 2},
      {"sqrt", [](const Var& x) { return sqrt(x); }, [](double x) { return std::sqrt(x); }, 0.2, 4},
      {"sqr", [](const Var& x) { return sqr(x); }, [](double x) { return x * x; }, -2, 2},
      {"tanh", [](const Var& x) { return tanh(x); }, [](double x) { return std::tanh(x); }, -3, 3},
      {"sigmoid", [](const Var& x) { return sigmoid(x); }, [](double x) { return 1 / (1 + std::exp(-x)); }, -4, 4},
      {"softplus", [](const Var& x) { return softplus(x); }, [](double x) { return std::log1p(std::exp(x)); }, -4, 4},
      {"relu", [](const Var& x) { return relu(x); }, [](double x) { return x > 0 ? x : 0; }, -2, 2},
      {"abs", [](const Var& x) { return abs(x); }, [](double x) { return std::fabs(x); }, -2, 2},
      {"sin", [](const Var& x) { return sin(x); }, [](double x) { return std::sin(x); }, -3, 3},
      {"cos", [](const Var& x) { return cos(x); }, [](double x) { return std::cos(x); }, -3, 3},
  };
}

struct BinaryCase {
  const char* name;
  std::function<Var(const Var&, const Var&)> build;
  std::function<double(double, double)> reference;
  double lo, hi;
};

std::vector<BinaryCase> binary_cases() {
  return {
      {"add", [](const Var& a, const Var& b) { return a + b; }, [](double a, double b) { return a + b; }, -2, 2},
      {"sub", [](const Var& a, const Var& b) { return a - b; }, [](double a, double b) { return a - b; }, -2, 2},
      {"mul", [](const Var& a, const Var& b) { return a * b; }, [](double a, double b) { return a * b; }, -2, 2},
      {"div", [](const Var& a, const Var& b) { return a / b; }, [](double a, double b) { return a / b; }, 0.5, 2},
      {"pow", [](const Var& a, const Var& b) { return pow(a, b); }, [](double a, double b) { return std::pow(a, b); }, 0.5, 2},
      {"maximum", [](const Var& a, const Var& b) { return maximum(a, b); }, [](double a, double b) { return std::max(a, b); }, -2, 2},
      {"minimum", [](const Var& a, const Var& b) { return minimum(a, b); }, [](double a, double b) { return std::min(a, b); }, -2, 2},
  };
}

}  // namespace

TEST(Elemwise, UnaryValuesMatchReference) {
  for (DType dt : {f64, f32}) {
    for (const auto& c : unary_cases()) {
      Var x = vector("x", dt);
      Tensor xv = random_tensor({257}, dt, c.lo, c.hi);
      Tensor y = eval1({x}, c.build(x), {xv});
      EXPECT_EQ(y.dtype(), dt) << c.name;
      std::vector<double> expected;
      for (double v : xv.to_vector<double>()) expected.push_back(c.reference(v));
      SCOPED_TRACE(c.name);
      expect_values(y, expected, dt == f32 ? 2e-6 : 1e-12);
    }
  }
}

TEST(Elemwise, UnaryGradientsMatchFiniteDifferences) {
  for (DType dt : {f64, f32})
    for (const auto& c : unary_cases()) {
      SCOPED_TRACE(c.name);
      EXPECT_NO_THROW(verify_grad([&](std::vector<Var> v) { return c.build(v[0]); },
                                  {random_tensor({3, 4}, dt, c.lo, c.hi, 11)}));
    }
}

TEST(Elemwise, BinaryValuesWithBroadcasting) {
  for (const auto& c : binary_cases()) {
    Var a = matrix("a", f64), b = vector("b", f64);
    Tensor av = random_tensor({3, 4}, f64, c.lo, c.hi, 1), bv = random_tensor({4}, f64, c.lo, c.hi, 2);
    Tensor y = eval1({a, b}, c.build(a, b), {av, bv});
    EXPECT_EQ(y.shape(), (Shape{3, 4}));
    auto A = av.to_vector<double>(), B = bv.to_vector<double>();
    std::vector<double> expected;
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 4; ++j) expected.push_back(c.reference(A[i * 4 + j], B[j]));
    SCOPED_TRACE(c.name);
    expect_values(y, expected, 1e-12);
  }
}

TEST(Elemwise, BinaryGradientsWithBroadcasting) {
  for (DType dt : {f64, f32})
    for (const auto& c : binary_cases()) {
      SCOPED_TRACE(c.name);
      // Runtime broadcasting: b has size 1 in a dimension its type does not declare broadcastable.
      EXPECT_NO_THROW(verify_grad([&](std::vector<Var> v) { return c.build(v[0], v[1]); },
                                  {random_tensor({3, 4}, dt, c.lo, c.hi, 3), random_tensor({1, 4}, dt, c.lo, c.hi, 4)}));
      EXPECT_NO_THROW(verify_grad([&](std::vector<Var> v) { return c.build(v[0], v[1]); },
                                  {random_tensor({2, 3}, dt, c.lo, c.hi, 5), random_tensor({3}, dt, c.lo, c.hi, 6)}));
    }
}

TEST(Elemwise, ComparisonsGiveBool) {
  Var a = vector("a"), b = vector("b");
  auto outs = eval({a, b}, {a < b, a <= b, a > b, a >= b, a == b, a != b},
                   {Tensor::from({1.f, 2.f, 3.f}, {3}), Tensor::from({2.f, 2.f, 2.f}, {3})});
  for (const Tensor& t : outs) EXPECT_EQ(t.dtype(), b8);
  expect_values(outs[0], {1, 0, 0});
  expect_values(outs[1], {1, 1, 0});
  expect_values(outs[2], {0, 0, 1});
  expect_values(outs[3], {0, 1, 1});
  expect_values(outs[4], {0, 1, 0});
  expect_values(outs[5], {1, 0, 1});
}

TEST(Elemwise, WhereSelectsAndDifferentiates) {
  Var c = vector("c", b8), a = vector("a", f64), b = vector("b", f64);
  Tensor y = eval1({c, a, b}, where(c, a, b),
                   {Tensor::from(std::vector<bool>{true, false}), Tensor::from({1.0, 2.0}, {2}), Tensor::from({3.0, 4.0}, {2})});
  expect_values(y, {1, 4});
  verify_grad([](std::vector<Var> v) { return where(v[0] > 0, v[0] * 2.0, v[1]); },
              {Tensor::from({0.5, -0.5, 1.0}, {3}), Tensor::from({1.0, 2.0, 3.0}, {3})});
}

TEST(Elemwise, SignHasZeroGradient) {
  Var x = vector("x", f64);
  Tensor g = eval1({x}, grad(sum(sign(x)), x), {Tensor::from({-1.0, 2.0}, {2})});
  expect_values(g, {0, 0});
}

TEST(Elemwise, DtypePromotionFollowsNumpy) {
  EXPECT_EQ((vector("a", f32) + vector("b", f64)).dtype(), f64);
  EXPECT_EQ((vector("a", i32) + vector("b", i64)).dtype(), i64);
  EXPECT_EQ((vector("a", i32) + vector("b", f32)).dtype(), f64);
  EXPECT_EQ((vector("a", b8) + vector("b", i32)).dtype(), i32);
  EXPECT_EQ((vector("a", b8) + vector("b", b8)).dtype(), i64);
  // Bare numbers are weak: they take the dtype of the tensor.
  EXPECT_EQ((vector("a", f32) * 2.5).dtype(), f32);
  EXPECT_EQ((vector("a", i32) + 1).dtype(), i32);
  EXPECT_EQ((vector("a", i32) * 0.5).dtype(), f64);
  // Arithmetic of bare numbers alone is a bare number (Python computes it before NumPy sees it).
  EXPECT_EQ(((1.0 - Var(0.9)) * vector("a", f32)).dtype(), f32);
  EXPECT_EQ((sqrt(Var(2.0)) * vector("a", f32)).dtype(), f32);
  EXPECT_EQ(((Var(2) * Var(3)) + vector("a", i32)).dtype(), i32);
  EXPECT_EQ(((Var(2) < Var(3)) + vector("a", i32)).dtype(), i32);  // a comparison's b8 is strong, and b8 + i32 is i32
  // True division and float functions of integers give f64.
  EXPECT_EQ((vector("a", i32) / vector("b", i32)).dtype(), f64);
  EXPECT_EQ(exp(vector("a", i64)).dtype(), f64);
  EXPECT_EQ(cast(vector("a", f64), f32).dtype(), f32);
}

TEST(Elemwise, IntegerArithmeticStaysInteger) {
  Var a = vector("a", i32);
  Tensor y = eval1({a}, a * 3 - 1, {Tensor::from(std::vector<int32_t>{1, 2, 3})});
  EXPECT_EQ(y.dtype(), i32);
  expect_values(y, {2, 5, 8});
  Tensor d = eval1({a}, a / 2, {Tensor::from(std::vector<int32_t>{1, 2, 3})});
  expect_values(d, {0.5, 1, 1.5});
}

TEST(Elemwise, BroadcastMismatchIsAShapeError) {
  Var a = matrix("a"), b = matrix("b");
  Function f = function({a, b}, {a + b});
  expect_error<ShapeError>([&] { f(Tensor::zeros({2, 3}), Tensor::zeros({4, 3})); },
                           {"add", "(2,3)", "(4,3)", "cannot be broadcast", "elemwise_test.cpp"});
}

TEST(Elemwise, StridedAndLargeInputs) {
  Var a = matrix("a", f32);
  Tensor big = random_tensor({300, 400}, f32, -1, 1, 9);
  Tensor t = big.view({400, 300}, {1, 400}, 0);  // a transposed view
  Tensor y = eval1({a}, tanh(a) * 2.0, {t});
  auto in = t.to_vector<double>();
  std::vector<double> expected;
  for (double v : in) expected.push_back(std::tanh(v) * 2);
  expect_values(y, expected, 2e-6);
}

TEST(Elemwise, FastExpEdgeCases) {
  Var x = vector("x", f32);
  Tensor y = eval1({x}, exp(x), {Tensor::from({100.f, -100.f, 0.f, 88.f}, {4})});
  auto v = y.to_vector<float>();
  EXPECT_TRUE(std::isinf(v[0]));
  EXPECT_EQ(v[1], 0.f);
  EXPECT_EQ(v[2], 1.f);
  EXPECT_NEAR(v[3], std::exp(88.0), std::exp(88.0) * 1e-6);
  // Issue 9, item 20: exp(88.38f) was inf (2^128 alone is not a float); the true value 2.42e38 is.
  const std::vector<float> at{88.38f, 88.72f, 88.73f, -87.3f};
  auto top = eval1({x}, exp(x), {Tensor::from(at, {4})}).to_vector<float>();
  for (int i : {0, 1, 3}) EXPECT_NEAR(top[i], std::exp(double(at[i])), std::exp(double(at[i])) * 1e-6) << at[i];
  EXPECT_TRUE(std::isinf(top[2]));
  Tensor t = eval1({x}, tanh(x), {Tensor::from({1e-6f, -30.f, 30.f, 0.7f}, {4})});
  expect_values(t, {std::tanh(1e-6), -1, 1, std::tanh(0.7)}, 1e-6);
}

TEST(Elemwise, ZerosAndOnesLike) {
  Var a = matrix("a", i32);
  auto outs = eval({a}, {zeros_like(a), ones_like(a)}, {Tensor::ones({2, 2}, i32)});
  EXPECT_EQ(outs[0].dtype(), i32);
  expect_values(outs[0], {0, 0, 0, 0});
  expect_values(outs[1], {1, 1, 1, 1});
}

TEST(Elemwise, CastGradient) {
  verify_grad([](std::vector<Var> v) { return cast(cast(v[0], f32) * 2.0, f64); }, {random_tensor({4}, f64)},
              {.eps = 1e-3, .abs_tol = 1e-3, .rel_tol = 1e-3});  // the value passes through f32
  verify_grad([](std::vector<Var> v) { return cast(v[0], f64) * v[0]; }, {random_tensor({4}, f32)});
  // Through an integer cast no gradient flows: the path is disconnected.
  Var x = vector("x", f64);
  expect_error<GradError>([&] { grad(sum(cast(cast(x, i64), f64)), x); }, {"disconnected"});
}

// Issue 9, item 8: sign and abs of b8 had no kernel (inside a fused loop on two threads the error
// aborted the process). b8 follows NumPy: abs keeps b8, arithmetic (sign included) counts it as an
// integer, comparisons order false before true. No op is accepted for a dtype it has no kernel for.
TEST(Elemwise, BoolOperandsFollowNumPy) {
  ThreadsForScope two_threads(2);
  Var b = vector("b", b8), c = vector("c", b8);
  std::vector<bool> many(100000, true);
  many[1] = false;
  for (Mode mode : {Mode::fast_run(), plain_mode()}) {
    Function f = function({b, c}, {abs(b), sign(b), relu(b), b < c, b >= c, sign(b) * 2 + abs(b)}, {.mode = mode});
    auto o = f(Tensor::from(many), Tensor::from(std::vector<bool>(100000, false)));
    EXPECT_EQ(o[0].dtype(), b8);
    EXPECT_EQ(o[1].dtype(), i64);
    EXPECT_EQ(o[2].dtype(), b8);
    EXPECT_EQ(o[0].to_vector<bool>(), many);
    auto s = o[1].to_vector<int64_t>();
    EXPECT_EQ(s[0], 1);
    EXPECT_EQ(s[1], 0);
    EXPECT_EQ(o[3].to_vector<bool>()[0], false);
    EXPECT_EQ(o[4].to_vector<bool>()[1], true);
    EXPECT_EQ(o[5].to_vector<int64_t>()[0], 3);
  }
}

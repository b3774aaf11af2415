#include <cmath>
#include <functional>
#include <limits>

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

TEST(Elemwise, SignOfNaNIsNaNAsInNumPy) {
  // sign(NaN) was 0 in the interpreter, the compiled fused loop and eager.
  for (DType dtype : {DType::f32, DType::f64}) {
    Var x = vector("x", dtype);
    const Tensor values = Tensor::from({std::nan(""), -2.0, 0.0, 3.0}, {4}).to(dtype);
    const std::vector<std::pair<Tensor, std::vector<double>>> results{
        {eval1({x}, sign(x), {values}), {-1, 0, 1}},
        {eval1({x}, sign(x * 2.0) + 1.0, {values}), {0, 1, 2}},  // one fused loop
        {sign(values), {-1, 0, 1}}};
    for (const auto& [t, rest] : results) {
      const std::vector<double> v = t.to_vector<double>();
      EXPECT_TRUE(std::isnan(v[0])) << dtype_name(dtype) << ": " << v[0];
      EXPECT_EQ(std::vector<double>(v.begin() + 1, v.end()), rest) << dtype_name(dtype);
    }
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
TEST(Elemwise, ReluOfNaNIsNaNAsMaximum) {
  // relu(x) is maximum(x, 0): NaN stays NaN (it gave 0), in the interpreter and in machine code.
  Var x = vector("x", f32), d = vector("d", f64);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (Mode mode : {Mode::fast_run(), plain_mode()}) {
    Function f = function({x, d}, {relu(x), relu(x * 2.0f) + 1.0f, relu(d)}, {.mode = mode});
    const std::vector<Tensor> r = f(Tensor::from<float>({nan, -1, 2, -0.0f}), Tensor::from<double>({std::nan(""), -3, 4}));
    const std::vector<float> a = r[0].to_vector<float>(), b = r[1].to_vector<float>();
    const std::vector<double> c = r[2].to_vector<double>();
    EXPECT_TRUE(std::isnan(a[0]) && std::isnan(b[0]) && std::isnan(c[0])) << mode.name();
    EXPECT_EQ(a[1], 0.0f);
    EXPECT_EQ(a[2], 2.0f);
    EXPECT_EQ(b[2], 5.0f);
    EXPECT_EQ(c[1], 0.0);
  }
  EXPECT_TRUE(std::isnan(relu(Tensor::from<float>({nan})).item<float>()));
}

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

// The everyday ops of issue 15: square, floor, ceil, round, mod, erf, clip.

namespace {
constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// Runs f on `values` compiled plainly and fused (fast_run), which must agree bit for bit here.
Tensor both_ways(const std::vector<Var>& in, const Var& out, const std::vector<Tensor>& values) {
  const Tensor fused = eval1(in, out, values);
  const Tensor plain = function(std::vector<In>(in.begin(), in.end()), {out}, {.mode = plain_mode()})(values)[0];
  EXPECT_EQ(fused.dtype(), plain.dtype());
  const auto a = fused.to_vector<double>(), b = plain.to_vector<double>();
  EXPECT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size() && i < b.size(); ++i)
    EXPECT_TRUE(a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i]))) << "element " << i << ": " << a[i] << " vs " << b[i];
  return fused;
}
}  // namespace

TEST(Elemwise, FloorCeilRoundValuesWithHalfwayCasesNegativesAndNaN) {
  const std::vector<double> in = {-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, -1.7, 1.2, -0.0, 3.0, kNan, kInf, -kInf, 0.49999999999999994};
  const std::vector<double> floors = {-3, -2, -1, 0, 1, 2, -2, 1, -0.0, 3, kNan, kInf, -kInf, 0};
  const std::vector<double> ceils = {-2, -1, -0.0, 1, 2, 3, -1, 2, -0.0, 3, kNan, kInf, -kInf, 1};
  const std::vector<double> rounds = {-2, -2, -0.0, 0, 2, 2, -2, 1, -0.0, 3, kNan, kInf, -kInf, 0};  // NumPy: half to even
  for (DType dt : {f64, f32}) {
    SCOPED_TRACE(dtype_name(dt));
    Var x = vector("x", dt);
    const Tensor xv = Tensor::from(in, {static_cast<int64_t>(in.size())}).to(dt);
    for (auto [y, want] : {std::pair{floor(x), floors}, std::pair{ceil(x), ceils}, std::pair{round(x), rounds}}) {
      const Tensor got = both_ways({x}, y, {xv});
      EXPECT_EQ(got.dtype(), dt);
      expect_values(got, want, 0);
    }
    // The sign of a zero result is NumPy's: floor(-0.0), ceil(-0.5) and round(-0.5) are -0.0.
    EXPECT_TRUE(std::signbit(eval1({x}, ceil(x), {xv}).to_vector<double>()[2]));
    EXPECT_TRUE(std::signbit(eval1({x}, round(x), {xv}).to_vector<double>()[2]));
  }
}

TEST(Elemwise, RoundingKeepsIntegersAndBoolsAsTheyAre) {
  for (DType dt : {i32, i64, b8}) {
    Var x = vector("x", dt);
    const Tensor xv = Tensor::from(std::vector<double>{-3, 0, 1, 7}, {4}).to(dt);
    for (const Var& y : {floor(x), ceil(x), round(x)}) {
      EXPECT_EQ(y.dtype(), dt);
      expect_values(both_ways({x}, y, {xv}), xv.to_vector<double>(), 0);
    }
  }
}

TEST(Elemwise, RoundingHasZeroGradient) {
  Var x = vector("x", f64);
  Function f = function({x}, {grad(sum(floor(x) + ceil(x) + round(x)), x)});
  expect_values(f(Tensor::from({-1.5, 0.3, 2.5}, {3}))[0], {0, 0, 0}, 0);
  verify_grad([](std::vector<Var> v) { return round(v[0]) * v[0] + floor(v[0]) - ceil(v[0]); },
              {Tensor::from({-1.3, 0.2, 2.7, -0.6}, {4})});
}

TEST(Elemwise, SquareIsSqr) {
  Var x = vector("x", i32);
  Var y = square(x);
  EXPECT_EQ(y.dtype(), i32);
  expect_values(eval1({x}, y, {Tensor::from(std::vector<int32_t>{-3, 0, 4}, {3})}), {9, 0, 16}, 0);
  EXPECT_EQ(square(vector("b", b8)).dtype(), i64);  // as sqr: True * True is 1
  verify_grad([](std::vector<Var> v) { return square(v[0]); }, {random_tensor({5}, f64, -2, 2)});
  verify_rop([](std::vector<Var> v) { return square(v[0]); }, {random_tensor({5}, f64, -2, 2)});
}

TEST(Elemwise, ModTakesTheDivisorsSignAsNumPy) {
  Var a = vector("a", f64), b = vector("b", f64);
  const Tensor av = Tensor::from({5.0, -5.0, 5.0, -5.0, 5.5, -0.0, 0.0, 3.0, 1.0, -1.0, kInf, kNan, 7.0}, {13});
  const Tensor bv = Tensor::from({3.0, 3.0, -3.0, -3.0, 2.0, 3.0, -3.0, 0.0, kInf, kInf, 2.0, 2.0, kNan}, {13});
  const Tensor r = both_ways({a, b}, a % b, {av, bv});
  expect_values(r, {2, 1, -1, -2, 1.5, 0, -0.0, kNan, 1, kInf, kNan, kNan, kNan}, 0);
  const auto rv = r.to_vector<double>();
  EXPECT_FALSE(std::signbit(rv[5]));  // a zero result takes the divisor's sign
  EXPECT_TRUE(std::signbit(rv[6]));
  // f32, and mod() spelled out, with a weak number.
  Var c = vector("c", f32);
  Var m = mod(c, 2.5);
  EXPECT_EQ(m.dtype(), f32);
  expect_values(both_ways({c}, m, {Tensor::from({-1.0f, 6.0f, 2.5f}, {3})}), {1.5, 1.0, 0.0}, 1e-7);
}

TEST(Elemwise, IntegerModByZeroIsZeroAndNeverTraps) {
  for (DType dt : {i64, i32}) {
    Var a = vector("a", dt), b = vector("b", dt);
    const double lowest = dt == i64 ? static_cast<double>(INT64_MIN) : static_cast<double>(INT32_MIN);
    const Tensor av = Tensor::from(std::vector<double>{7, -7, 7, -7, 5, lowest, 0, 9}, {8}).to(dt);
    const Tensor bv = Tensor::from(std::vector<double>{3, 3, -3, -3, 0, -1, -4, 4}, {8}).to(dt);
    Var y = a % b;
    EXPECT_EQ(y.dtype(), dt);
    expect_values(both_ways({a, b}, y, {av, bv}), {1, 2, -2, -1, 0, 0, 0, 1}, 0);
  }
  Var p = vector("p", b8);
  EXPECT_EQ((p % p).dtype(), i64);  // NumPy: bool % bool is an integer
  Var i = vector("i", i64);
  EXPECT_EQ((i % 2.5).dtype(), f64);
}

TEST(Elemwise, ModGradient) {
  Var a = vector("a", f64), b = vector("b", f64);
  const std::vector<Var> ga = grad(sum(a % b), {a, b});
  Function f = function({a, b}, {ga[0], ga[1]});
  auto g = f(Tensor::from({5.0, -5.0, 7.5}, {3}), Tensor::from({3.0, 3.0, -2.0}, {3}));
  expect_values(g[0], {1, 1, 1}, 0);
  expect_values(g[1], {-1, 2, 4}, 0);  // -floor(a / b)
  const std::vector<Tensor> at = {random_tensor({3, 4}, f64, -4, 4, 3), random_tensor({3, 4}, f64, 0.5, 2, 4)};
  verify_grad([](std::vector<Var> v) { return v[0] % v[1]; }, at);
  verify_rop([](std::vector<Var> v) { return v[0] % v[1]; }, at);
  verify_grad([](std::vector<Var> v) { return v[0] % -v[1]; }, at);
}

TEST(Elemwise, ErfValuesAndGradient) {
  Var x = vector("x", f64);
  expect_values(both_ways({x}, erf(x), {Tensor::from({0.0, 1.0, -0.5, 3.0, -kInf, kNan}, {6})}),
                {0.0, 0.8427007929497149, -0.5204998778130465, 0.9999779095030014, -1.0, kNan}, 1e-15);
  Var i = vector("i", i32);
  EXPECT_EQ(erf(i).dtype(), f64);
  Var h = vector("h", f32);
  EXPECT_EQ(erf(h).dtype(), f32);
  expect_values(both_ways({h}, erf(h) * 2.0f, {Tensor::from({0.25f, -2.0f}, {2})}), {2 * 0.2763263901682369, 2 * -0.9953222650189527}, 1e-6);
  verify_grad([](std::vector<Var> v) { return erf(v[0]); }, {random_tensor({3, 4}, f64, -2, 2)});
  verify_rop([](std::vector<Var> v) { return erf(v[0]); }, {random_tensor({3, 4}, f64, -2, 2)});
}

TEST(Elemwise, ClipValuesWithNumbersAndVarBounds) {
  Var x = vector("x", f64);
  Tensor xv = Tensor::from({-2.0, -1.0, 0.0, 0.5, 1.0, 3.0, kNan}, {7});
  expect_values(both_ways({x}, clip(x, -1, 1), {xv}), {-1, -1, 0, 0.5, 1, 1, kNan}, 0);
  expect_values(eval1({x}, clip(x, 2.0, 1.0), {xv}), {1, 1, 1, 1, 1, 1, kNan}, 0);  // lo > hi: hi, as NumPy
  Var lo = vector("lo", f64), hi = vector("hi", f64);
  expect_values(both_ways({x, lo, hi}, clip(x, lo, hi * 2.0),
                          {Tensor::from({-2.0, 5.0, 0.0}, {3}), Tensor::from({-1.0, 0.0, 1.0}, {3}), Tensor::from({1.0, 1.0, 1.0}, {3})}),
                {-1, 2, 1}, 0);
  Var n = vector("n", i32);
  EXPECT_EQ(clip(n, 0, 3).dtype(), i32);
  expect_values(eval1({n}, clip(n, 0, 3), {Tensor::from(std::vector<int32_t>{-5, 2, 9}, {3})}), {0, 2, 3}, 0);
  EXPECT_EQ(clip(n, 0.5, 3).dtype(), f64);  // a float bound makes an integer clip f64, as NumPy 2
  expect_error<TypeError>([] { clip(Var(), 0, 1); }, {"clip", "empty Var"});
  expect_error<ShapeError>([&] {
    function({x, lo}, {clip(x, lo, 1.0)})(Tensor::zeros({3}, f64), Tensor::zeros({2}, f64));
  }, {"(3,)", "(2,)", "cannot be broadcast"});
}

TEST(Elemwise, ClipGradientPassesWhereLoLeXLeHi) {
  Var x = vector("x", f64), lo = vector("lo", f64), hi = vector("hi", f64);
  const std::vector<Var> gc = grad(sum(clip(x, lo, hi) * 3.0), {x, lo, hi});
  Function f = function({x, lo, hi}, {gc[0], gc[1], gc[2]});
  auto g = f(Tensor::from({-2.0, -1.0, 0.0, 1.0, 2.0}, {5}), Tensor::full({5}, -1.0, f64), Tensor::full({5}, 1.0, f64));
  expect_values(g[0], {0, 3, 3, 3, 0}, 0);
  expect_values(g[1], {3, 0, 0, 0, 0}, 0);
  expect_values(g[2], {0, 0, 0, 0, 3}, 0);
  const std::vector<Tensor> at = {random_tensor({3, 4}, f64, -3, 3, 5), Tensor::full({3, 4}, -1.0, f64), random_tensor({3, 4}, f64, 0.5, 2, 6)};
  verify_grad([](std::vector<Var> v) { return clip(v[0], v[1], v[2]); }, at);
  verify_rop([](std::vector<Var> v) { return clip(v[0], v[1], v[2]); }, at);
}

TEST(Elemwise, NewOpsAreFusedWithTheirNeighbours) {
  Var x = matrix("x", f64), y = matrix("y", f64);
  Var z = clip(floor(x * 3.0) % y + erf(x) + round(y) - ceil(x) + square(x), -5.0, 5.0);
  const std::vector<Tensor> values = {random_tensor({40, 50}, f64, -3, 3, 1), random_tensor({40, 50}, f64, 0.5, 2, 2)};
  Function f = compare_with_plain({x, y}, z, values);
  EXPECT_EQ(count_op(f, "composite"), 1);
}

TEST(Elemwise, EmptyInputs) {
  Var x = vector("x", f64), y = vector("y", f64);
  for (const Var& z : {floor(x), ceil(x), round(x), erf(x), x % y, clip(x, y, 1.0), square(x)})
    EXPECT_EQ(eval1({x, y}, z, {Tensor::zeros({0}, f64), Tensor::zeros({0}, f64)}).shape(), Shape{0});
}

TEST(Elemwise, TanhKeepsTheSignOfZero) {
  // tanh(-0) is -0 as in NumPy (the polynomial gave +0), compiled and interpreted alike.
  Var x = vector("x", f32);
  for (Mode mode : {Mode::fast_run(), plain_mode()}) {
    const std::vector<float> r =
        function({x}, {tanh(x), tanh(x * 1.0f) + 0.0f * x}, {.mode = mode})(Tensor::from<float>({-0.0f, 0.0f}))[0].to_vector<float>();
    EXPECT_TRUE(std::signbit(r[0])) << mode.name();
    EXPECT_FALSE(std::signbit(r[1])) << mode.name();
  }
}

TEST(Elemwise, AbsClearsTheSignBitAsFabs) {
  // abs(-0) is +0 and abs(-NaN) a NaN without sign, as NumPy's and IEEE fabs (the parity trial
  // found -0 and -NaN kept), interpreted and compiled alike.
  Var x = vector("x", f64), y = vector("y", f32);
  for (Mode mode : {Mode::fast_run(), plain_mode()}) {
    const std::vector<Tensor> r = function({x, y}, {abs(x), abs(y * 1.0f) + 0.0f * y}, {.mode = mode})(
        Tensor::from<double>({-0.0, -std::nan(""), -2.0}), Tensor::from<float>({-0.0f, 3.0f, -4.0f}));
    const std::vector<double> a = r[0].to_vector<double>();
    EXPECT_FALSE(std::signbit(a[0]) || std::signbit(a[1])) << mode.name();
    EXPECT_TRUE(std::isnan(a[1]));
    EXPECT_EQ(a[2], 2.0);
    EXPECT_FALSE(std::signbit(r[1].to_vector<float>()[0]));
    EXPECT_EQ(r[1].to_vector<float>()[2], 4.0f);
  }
}

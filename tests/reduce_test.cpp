#include <limits>

#include "test_util.hpp"

using namespace kiln;
using namespace kiln::test;

namespace {
Tensor m23() { return Tensor::from({1.0, 5.0, 3.0, 4.0, 2.0, 6.0}, {2, 3}); }
}  // namespace

TEST(Reduce, SumOverAxes) {
  Var x = matrix("x", f64);
  auto o = eval({x}, {sum(x), sum(x, {0}), sum(x, {1}), sum(x, {-1}, true)}, {m23()});
  expect_values(o[0], {21});
  EXPECT_EQ(o[0].ndim(), 0);
  expect_values(o[1], {5, 7, 9});
  expect_values(o[2], {9, 12});
  EXPECT_EQ(o[3].shape(), (Shape{2, 1}));
}

TEST(Reduce, MeanMaxMinProdArgmax) {
  Var x = matrix("x", f64);
  auto o = eval({x}, {mean(x, {1}), max(x, {0}), min(x), prod(x, {1}), argmax(x, {1}), argmax(x)}, {m23()});
  expect_values(o[0], {3, 4});
  expect_values(o[1], {4, 5, 6});
  expect_values(o[2], {1});
  expect_values(o[3], {15, 48});
  EXPECT_EQ(o[4].dtype(), i64);
  expect_values(o[4], {1, 2});
  expect_values(o[5], {5});
}

TEST(Reduce, IntegerSumWidens) {
  Var x = vector("x", i32);
  Tensor s = eval1({x}, sum(x), {Tensor::from(std::vector<int32_t>{2000000000, 2000000000})});
  EXPECT_EQ(s.dtype(), i64);
  EXPECT_EQ(s.item<int64_t>(), 4000000000LL);
  EXPECT_EQ(mean(x).dtype(), f64);
}

TEST(Reduce, FloatSumIsAccurate) {
  Var x = vector("x", f32);
  Tensor s = eval1({x}, sum(x), {Tensor::full({1 << 20}, 0.1, f32)});
  EXPECT_NEAR(s.item<double>(), (1 << 20) * static_cast<double>(0.1f), 1e-2);
}

TEST(Reduce, Gradients) {
  for (DType dt : {f64, f32}) {
    Tensor x = random_tensor({3, 4}, dt, 0.5, 2.0, 3);
    verify_grad([](std::vector<Var> v) { return sum(v[0], {1}); }, {x});
    verify_grad([](std::vector<Var> v) { return sum(v[0]); }, {x});
    verify_grad([](std::vector<Var> v) { return mean(v[0], {0}, true); }, {x});
    verify_grad([](std::vector<Var> v) { return mean(v[0]); }, {x});
    verify_grad([](std::vector<Var> v) { return max(v[0], {1}); }, {x});
    verify_grad([](std::vector<Var> v) { return min(v[0], {0}); }, {x});
    verify_grad([](std::vector<Var> v) { return prod(v[0], {1}); }, {x});
  }
}

TEST(Reduce, BadAxesAreTypeErrors) {
  Var x = matrix("x");
  expect_error<TypeError>([&] { sum(x, {2}); }, {"axis 2", "out of range", "2 dimensions"});
  expect_error<TypeError>([&] { sum(x, {0, 0}); }, {"repeated"});
  expect_error<TypeError>([&] { argmax(tensor3("t"), {0, 1}); }, {"argmax", "one axis"});
}

TEST(Reduce, MaxOfEmptyAxisIsAShapeError) {
  Var x = matrix("x");
  Function f = function({x}, {max(x, {1})});
  expect_error<ShapeError>([&] { f(Tensor::zeros({2, 0})); }, {"empty axis"});
}

// Issue 9, item 19: max and min started from the largest finite value, not from -inf / +inf.
TEST(Reduce, MaxAndMinStartFromInfinity) {
  const double inf = std::numeric_limits<double>::infinity();
  for (DType dtype : {f64, f32}) {
    Var x = vector("x", dtype);
    auto o = eval({x}, {max(x), min(x)}, {Tensor::from({-inf, -inf}, {2}).to(dtype)});
    EXPECT_EQ(o[0].item<double>(), -inf) << dtype_name(dtype);
    EXPECT_EQ(o[1].item<double>(), -inf) << dtype_name(dtype);
    o = eval({x}, {max(x), min(x)}, {Tensor::from({inf}, {1}).to(dtype)});
    EXPECT_EQ(o[0].item<double>(), inf);
    EXPECT_EQ(o[1].item<double>(), inf);
  }
  Var n = vector("n", i32);
  auto o = eval({n}, {max(n), min(n)}, {Tensor::from(std::vector<int32_t>{INT32_MIN, INT32_MAX})});
  EXPECT_EQ(o[0].item<int64_t>(), INT32_MAX);
  EXPECT_EQ(o[1].item<int64_t>(), INT32_MIN);
}

// Issue 9, item 14: argmax skipped NaN where max returned it; NumPy returns the first NaN.
TEST(Reduce, ArgmaxReturnsTheFirstNaNAsNumPyDoes) {
  const double nan = std::nan("");
  Var x = matrix("x", f64);
  auto o = eval({x}, {argmax(x, {1}), max(x, {1}), argmax(x)}, {Tensor::from({1.0, nan, 3.0, nan, 9.0, nan}, {2, 3})});
  expect_values(o[0], {1, 0});
  EXPECT_TRUE(std::isnan(o[1].to_vector<double>()[0]) && std::isnan(o[1].to_vector<double>()[1]));
  expect_values(o[2], {1});
}

// Issue 9, item 20: the mean of 49 copies of 0.5 was 0.49999999999999994 (multiplied by 1/49).
TEST(Reduce, MeanOfEqualValuesIsExactFusedOrNot) {
  Var x = vector("x", f64);
  for (Mode mode : {Mode::fast_run(), plain_mode()}) {
    Function f = function({x}, {mean(x), mean(x * 1.0 + 0.0), mean(exp(x) * 0.0 + 0.5)}, {.mode = mode});
    for (const Tensor& m : f(Tensor::full({49}, 0.5, f64))) EXPECT_EQ(m.item<double>(), 0.5) << mode.name();
  }
}

TEST(Reduce, SumsAreAccurateOnLongRuns) {
  // Ten million times 0.1: a running sum drifts by about 1e-4; a pairwise sum stays within 1e-8.
  Var x = vector("x", f64);
  const Tensor tenths = Tensor::full({10'000'000}, 0.1, f64);
  Function f = function({x}, {sum(x)}, {.mode = plain_mode()});
  EXPECT_NEAR(f(tenths)[0].item<double>(), 1e6, 1e-8);
}

// Found by the differential fuzzer: max and min over an empty axis raised without keepdims but
// returned -inf / +inf with it; NumPy raises for both.
TEST(Reduce, MaxMinArgmaxOfAnEmptyAxisRaiseWithOrWithoutKeepdims) {
  Var x = matrix("x", f64);
  for (bool keep : {false, true}) {
    Function f = function({x}, {max(x, {0}, keep), min(x, {0}, keep)});
    expect_error<ShapeError>([&] { f(Tensor::zeros({0, 3}, f64)); }, {"empty axis 0", "(0,3)"});
    expect_error<ShapeError>([&] { function({x}, {argmax(x, {0}, keep)})(Tensor::zeros({0, 3}, f64)); }, {"empty axis"});
    EXPECT_EQ(function({x}, {max(x, {1}, keep)})(Tensor::zeros({0, 3}, f64))[0].numel(), 0);  // nothing to reduce, no error
  }
}

// Found by the oracle sweep: prod's gradient divided by the input, so a zero gave NaN (it was a
// documented limit). It is the product of the other elements, exact at zeros.
TEST(Reduce, ProdGradientIsExactAtZeros) {
  Var x = matrix("x", f64);
  const Tensor xv = Tensor::from({0.0, 2.0, 3.0, 0.0, 0.0, 4.0, 1.0, 2.0, 3.0}, {3, 3});
  expect_values(function({x}, {grad(sum(prod(x, {1})), x)})(xv)[0], {6, 0, 0, 0, 0, 0, 6, 3, 2});
  expect_values(function({x}, {grad(prod(x), x)})(xv)[0], {0, 0, 0, 0, 0, 0, 0, 0, 0});
  verify_grad([](std::vector<Var> v) { return prod(v[0], {0}); }, {xv});
}

TEST(Reduce, MaxAndMinOfBooleansAreBooleansAndAxisErrorsNameTheLine) {
  Var p = matrix("p", b8);
  const Tensor pv = Tensor::from(std::vector<bool>{true, false, false, false}, {2, 2});
  const Tensor any = eval1({p}, max(p, {1}), {pv}), all = eval1({p}, min(p, {0}), {pv});
  EXPECT_EQ(any.dtype(), b8);
  EXPECT_EQ(any.to_vector<int64_t>(), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(all.dtype(), b8);
  EXPECT_EQ(all.to_vector<int64_t>(), (std::vector<int64_t>{0, 0}));
  const int line = __LINE__ + 1;
  expect_error<TypeError>([&] { sum(p, {5}); }, {"axis 5", "2 dimensions", "reduce_test.cpp:" + std::to_string(line)});
  expect_error<TypeError>([&] { sum(p, {0, -2}); }, {"repeated"});
}

// argmin, var, std (issue 15).

TEST(Reduce, ArgminValuesTiesNaNAxesAndKeepdims) {
  Var x = matrix("x", f64);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Tensor v = Tensor::from({3.0, 1.0, 1.0, -2.0, 5.0, -2.0, 0.0, nan, -9.0}, {3, 3});
  auto o = eval({x}, {argmin(x, {1}), argmin(x, {0}), argmin(x), argmin(x, {-1}, true)}, {v});
  EXPECT_EQ(o[0].dtype(), i64);
  expect_values(o[0], {1, 0, 1}, 0);  // the first minimum; a NaN wins (NumPy)
  expect_values(o[1], {1, 2, 2}, 0);
  expect_values(o[2], {7}, 0);  // over everything, flattened: the first NaN
  EXPECT_EQ(o[3].shape(), (Shape{3, 1}));
  Var n = vector("n", i32);
  expect_values(eval1({n}, argmin(n), {Tensor::from(std::vector<int32_t>{4, -7, 2, -7})}), {1}, 0);
  Var b = vector("b", b8);
  expect_values(eval1({b}, argmin(b), {Tensor::from(std::vector<bool>{true, false, false})}), {1}, 0);
  // Strided: a transposed view.
  Var t = matrix("t", f64);
  expect_values(eval1({t}, argmin(transpose(t), {1}), {v}), {1, 2, 2}, 0);
}

TEST(Reduce, ArgminErrorsAndNoGradient) {
  Var x = matrix("x", f64);
  expect_error<TypeError>([&] { argmin(tensor3("t"), {0, 1}); }, {"argmin", "one axis or all"});
  expect_error<TypeError>([&] { argmin(x, {2}); }, {"argmin", "axis 2", "out of range"});
  expect_error<ShapeError>([&] { function({x}, {argmin(x, {1})})(Tensor::zeros({2, 0}, f64)); },
                           {"argmin", "empty axis 1", "(2,0)"});
  expect_error<GradError>([&] { grad(sum(cast(argmin(x), f64)), x); }, {"disconnected"});
}

TEST(Reduce, VarAndStdAsNumPy) {
  Var x = matrix("x", f64);
  // m23 = [[1, 5, 3], [4, 2, 6]]: mean 3.5, squares 2.5^2 + 1.5^2 + .5^2 + .5^2 + 1.5^2 + 2.5^2 = 17.5.
  auto o = eval({x}, {var(x), var(x, {1}), var(x, {0}, true), kiln::std(x, {-1}), var(x, {}, false, 1), kiln::std(x, {0}, false, 1)}, {m23()});
  expect_values(o[0], {17.5 / 6}, 1e-15);
  EXPECT_EQ(o[0].ndim(), 0);
  expect_values(o[1], {8.0 / 3, 8.0 / 3}, 1e-15);
  EXPECT_EQ(o[2].shape(), (Shape{1, 3}));
  expect_values(o[2], {2.25, 2.25, 2.25}, 1e-15);
  expect_values(o[3], {std::sqrt(8.0 / 3), std::sqrt(8.0 / 3)}, 1e-15);
  expect_values(o[4], {17.5 / 5}, 1e-15);
  expect_values(o[5], {std::sqrt(4.5), std::sqrt(4.5), std::sqrt(4.5)}, 1e-15);
}

TEST(Reduce, VarOfIntegersIsF64AndFloatsKeepTheirDtype) {
  Var n = vector("n", i32);
  EXPECT_EQ(var(n).dtype(), f64);
  EXPECT_EQ(kiln::std(vector("b", b8)).dtype(), f64);
  EXPECT_EQ(var(vector("h", f32)).dtype(), f32);
  expect_values(eval1({n}, var(n), {Tensor::from(std::vector<int32_t>{1, 2, 3, 4})}), {1.25}, 1e-15);
  Var h = vector("h", f32);
  expect_values(eval1({h}, kiln::std(h), {Tensor::from(std::vector<float>{1.0f, 2.0f, 3.0f, 4.0f})}), {std::sqrt(1.25)}, 1e-6);
}

TEST(Reduce, VarWithNoElementsOrTooFewIsNaNOrInf) {
  Var x = matrix("x", f64);
  auto o = eval({x}, {var(x, {1}), var(x, {0}, false, 1)}, {Tensor::zeros({2, 0}, f64)});
  EXPECT_EQ(o[0].shape(), Shape{2});
  expect_values(o[0], {std::nan(""), std::nan("")});
  EXPECT_EQ(o[1].shape(), Shape{0});
  // One element with ddof 1: 0 / 0; ddof beyond N divides by 0 (NumPy: max(N - ddof, 0)).
  Var v = vector("v", f64);
  expect_values(eval1({v}, var(v, {}, false, 1), {Tensor::from(std::vector<double>{2.0})}), {std::nan("")});
  EXPECT_TRUE(std::isinf(eval1({v}, var(v, {}, false, 3), {Tensor::from(std::vector<double>{1.0, 2.0})}).item<double>()));
  // A negative ddof divides by more than N, as NumPy: var([1, 2, 3], ddof=-1) = 2 / 4.
  expect_values(eval1({v}, var(v, {}, false, -1), {Tensor::from(std::vector<double>{1.0, 2.0, 3.0})}), {0.5}, 1e-15);
  expect_values(var(Tensor::from(std::vector<double>{1.0, 2.0, 3.0}), Axes{}, false, -1), {0.5}, 1e-15);
  expect_error<TypeError>([&] { kiln::std(v, {1}); }, {"var", "axis 1", "out of range"});
}

TEST(Reduce, VarAndStdGradientsAndRop) {
  const Tensor x = random_tensor({3, 4}, f64, -2, 2, 9);
  verify_grad([](std::vector<Var> v) { return var(v[0]); }, {x});
  verify_grad([](std::vector<Var> v) { return var(v[0], {1}, true, 1); }, {x});
  verify_grad([](std::vector<Var> v) { return kiln::std(v[0], {0}); }, {x});
  verify_rop([](std::vector<Var> v) { return var(v[0], {-1}); }, {x});
  verify_rop([](std::vector<Var> v) { return kiln::std(v[0]); }, {x});
  verify_grad([](std::vector<Var> v) { return var(v[0], {1}); }, {random_tensor({3, 4}, f32, -2, 2, 9)});
}

TEST(Reduce, EagerArgminVarStd) {
  const Tensor v = m23();
  expect_values(argmin(v, 1), {0, 1}, 0);
  expect_values(var(v, {1}), {8.0 / 3, 8.0 / 3}, 1e-15);
  expect_values(kiln::std(v, {}, false, 1), {std::sqrt(3.5)}, 1e-15);
}

TEST(Reduce, OneAxisGivenAsANumber) {
  Var x = matrix("x", f64);
  const Tensor v = Tensor::from({1.0, 5.0, 3.0, 4.0, 2.0, 6.0}, {2, 3});
  const std::vector<Tensor> out = eval({x}, {sum(x, 1), argmax(x, -1), mean(x, 0, true), kiln::var(x, 1), sum(x, {}), max(x, int64_t{0})}, {v});
  expect_values(out[0], {9, 12});
  expect_values(out[1], {1, 2});
  EXPECT_EQ(out[2].shape(), (Shape{1, 3}));
  expect_values(out[2], {2.5, 3.5, 4.5});
  expect_values(out[3], {8.0 / 3.0, 8.0 / 3.0});
  expect_values(out[4], {21});  // a braced empty list is still every axis
  expect_values(out[5], {4, 5, 6});
}

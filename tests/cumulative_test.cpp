// cumsum (issue 15): NumPy's running sums along an axis, with the reverse running sum as gradient.
#include <functional>
#include <limits>

#include "test_util.hpp"

using namespace kiln;
using namespace kiln::test;

TEST(Cumulative, CumsumAlongEachAxisAndFlattened) {
  Var x = matrix("x", f64);
  const Tensor xv = Tensor::from({1.0, 2.0, 3.0, 4.0, 5.0, 6.0}, {2, 3});
  auto o = eval({x}, {cumsum(x, 0), cumsum(x, 1), cumsum(x, -1), cumsum(x)}, {xv});
  expect_values(o[0], {1, 2, 3, 5, 7, 9}, 0);
  expect_values(o[1], {1, 3, 6, 4, 9, 15}, 0);
  expect_values(o[2], {1, 3, 6, 4, 9, 15}, 0);
  EXPECT_EQ(o[3].shape(), (Shape{6}));  // no axis: over the flattened values, as NumPy
  expect_values(o[3], {1, 3, 6, 10, 15, 21}, 0);
  // Strided input: a transposed view and a negative-step slice.
  expect_values(eval1({x}, cumsum(transpose(x), 1), {xv}), {1, 5, 2, 7, 3, 9}, 0);
  expect_values(eval1({x}, cumsum(slice(x, 1, std::nullopt, std::nullopt, -1), 1), {xv}), {3, 5, 6, 6, 11, 15}, 0);
}

TEST(Cumulative, CumsumDtypesAsNumPy) {
  Var n = vector("n", i32);
  Tensor s = eval1({n}, cumsum(n), {Tensor::from(std::vector<int32_t>{2000000000, 2000000000, -5})});
  EXPECT_EQ(s.dtype(), i64);  // integers widen, so the running sum does not wrap
  expect_values(s, {2e9, 4e9, 4e9 - 5}, 0);
  Var b = vector("b", b8);
  Tensor bs = eval1({b}, cumsum(b), {Tensor::from(std::vector<bool>{true, false, true, true})});
  EXPECT_EQ(bs.dtype(), i64);
  expect_values(bs, {1, 1, 2, 3}, 0);
  Var h = vector("h", f32);
  EXPECT_EQ(cumsum(h).dtype(), f32);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Var d = vector("d", f64);
  expect_values(eval1({d}, cumsum(d), {Tensor::from(std::vector<double>{1.0, nan, 2.0})}), {1, nan, nan});
}

TEST(Cumulative, CumsumOfEmptyAndZeroDimensionalValues) {
  Var x = matrix("x", f64);
  EXPECT_EQ(eval1({x}, cumsum(x, 1), {Tensor::zeros({3, 0}, f64)}).shape(), (Shape{3, 0}));
  EXPECT_EQ(eval1({x}, cumsum(x, 0), {Tensor::zeros({0, 2}, f64)}).shape(), (Shape{0, 2}));
  Var s = scalar("s", f64);
  Tensor one = eval1({s}, cumsum(s), {Tensor::scalar(2.5)});
  EXPECT_EQ(one.shape(), (Shape{1}));  // NumPy: cumsum of a 0-d value is a 1-element vector
  expect_values(one, {2.5}, 0);
}

TEST(Cumulative, CumsumErrorsNameTheAxisAndType) {
  Var x = matrix("x", f64);
  expect_error<TypeError>([&] { cumsum(x, 2); }, {"cumsum", "axis 2", "out of range", "f64[?,?]"});
  expect_error<TypeError>([&] { cumsum(x, -3); }, {"cumsum", "axis -3"});
  expect_error<TypeError>([&] { cumsum(Var(), 0); }, {"cumsum", "empty Var"});
}

TEST(Cumulative, CumsumGradientIsTheReverseRunningSum) {
  Var x = vector("x", f64);
  expect_values(eval1({x}, grad(sum(cumsum(x) * constant(Tensor::from(std::vector<double>{1.0, 10.0, 100.0}))), x), {Tensor::zeros({3}, f64)}),
                {111, 110, 100}, 0);
  using V = std::vector<Var>;
  const Tensor m = random_tensor({3, 4}, f64, -2, 2, 3);
  for (const auto& fn : std::vector<std::function<Var(V)>>{[](V v) { return cumsum(v[0], 0); }, [](V v) { return cumsum(v[0], -1); },
                                                            [](V v) { return cumsum(v[0]); }, [](V v) { return cumsum(cumsum(v[0], 1) * v[0], 0); }}) {
    verify_grad(fn, {m});
    verify_rop(fn, {m});
  }
  verify_grad([](V v) { return cumsum(v[0], 1); }, {random_tensor({3, 4}, f32, -2, 2, 3)});
}

TEST(Cumulative, CumsumUnderEveryModeAndEagerly) {
  Var x = matrix("x", f64);
  compare_with_plain({x}, cumsum(exp(x) * 2.0, 1) + 1.0, {random_tensor({5, 7}, f64, -1, 1, 2)});
  compare_with_plain({x}, std::vector<Var>{cumsum(x, 0)}, {random_tensor({5, 7}, f64, -1, 1, 2)}, 1e-12, Mode::debug());
  expect_values(cumsum(Tensor::from({1.0, 2.0, 3.0, 4.0}, {2, 2}), 1), {1, 3, 3, 7}, 0);
  expect_values(cumsum(Tensor::from({1.0, 2.0, 3.0, 4.0}, {2, 2})), {1, 3, 6, 10}, 0);
}

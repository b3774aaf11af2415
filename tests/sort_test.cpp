// sort and argsort (issue 15): NumPy's stable sort along an axis, NaN last; sort differentiates
// through the permutation.
#include <functional>
#include <limits>
#include <numeric>

#include "test_util.hpp"

using namespace kiln;
using namespace kiln::test;

TEST(Sort, SortAndArgsortAlongEachAxis) {
  Var x = matrix("x", f64);
  const Tensor xv = Tensor::from({3.0, -1.0, 2.0, 0.0, 5.0, -4.0}, {2, 3});
  auto o = eval({x}, {sort(x), argsort(x), sort(x, 0), argsort(x, 0), sort(transpose(x), 1)}, {xv});
  expect_values(o[0], {-1, 2, 3, -4, 0, 5}, 0);
  EXPECT_EQ(o[1].dtype(), i64);
  expect_values(o[1], {1, 2, 0, 2, 0, 1}, 0);
  expect_values(o[2], {0, -1, -4, 3, 5, 2}, 0);
  expect_values(o[3], {1, 0, 1, 0, 1, 0}, 0);
  expect_values(o[4], {0, 3, -1, 5, -4, 2}, 0);  // a strided (transposed) input
}

TEST(Sort, TiesKeepTheirOrderAndNaNGoesLast) {
  Var x = vector("x", f64);
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  const Tensor v = Tensor::from({2.0, nan, -inf, 1.0, 2.0, nan, 1.0, inf}, {8});
  auto o = eval({x}, {sort(x), argsort(x)}, {v});
  expect_values(o[0], {-inf, 1, 1, 2, 2, inf, nan, nan}, 0);
  expect_values(o[1], {2, 3, 6, 0, 4, 7, 1, 5}, 0);
}

TEST(Sort, IntegersBoolsAndEmptyValues) {
  Var n = vector("n", i32);
  Tensor s = eval1({n}, sort(n), {Tensor::from(std::vector<int32_t>{5, -3, 5, 0})});
  EXPECT_EQ(s.dtype(), i32);
  expect_values(s, {-3, 0, 5, 5}, 0);
  Var b = vector("b", b8);
  Tensor sb = eval1({b}, sort(b), {Tensor::from(std::vector<bool>{true, false, true, false})});
  EXPECT_EQ(sb.dtype(), b8);
  expect_values(sb, {0, 0, 1, 1}, 0);
  expect_values(eval1({b}, argsort(b), {Tensor::from(std::vector<bool>{true, false, true, false})}), {1, 3, 0, 2}, 0);
  Var x = matrix("x", f64);
  EXPECT_EQ(eval1({x}, sort(x), {Tensor::zeros({2, 0}, f64)}).shape(), (Shape{2, 0}));
  EXPECT_EQ(eval1({x}, argsort(x, 0), {Tensor::zeros({0, 3}, f64)}).shape(), (Shape{0, 3}));
}

TEST(Sort, ErrorsNameTheAxis) {
  Var x = matrix("x", f64);
  expect_error<TypeError>([&] { sort(x, 2); }, {"sort", "axis 2", "out of range", "f64[?,?]"});
  expect_error<TypeError>([&] { argsort(scalar("s", f64)); }, {"argsort", "0-d"});
  expect_error<TypeError>([&] { sort(Var()); }, {"sort", "empty Var"});
}

TEST(Sort, SortGradientGoesBackThroughThePermutation) {
  Var x = vector("x", f64);
  // sort([3, 1, 2]) = [1, 2, 3]; weights 1, 10, 100 land on the elements they came from.
  expect_values(eval1({x}, grad(sum(sort(x) * constant(Tensor::from(std::vector<double>{1.0, 10.0, 100.0}))), x), {Tensor::from(std::vector<double>{3.0, 1.0, 2.0})}),
                {100, 1, 10}, 0);
  using V = std::vector<Var>;
  const Tensor m = random_tensor({3, 4}, f64, -2, 2, 8);
  for (const auto& fn : std::vector<std::function<Var(V)>>{[](V v) { return sort(v[0]); }, [](V v) { return sort(v[0], 0); },
                                                            [](V v) { return sort(v[0] * v[0], 1) * v[0]; }}) {
    verify_grad(fn, {m});
    verify_rop(fn, {m});
  }
  // Second order: the gradient of the gradient runs through the permutation again.
  const Tensor s = random_tensor({5}, f64, -2, 2, 9);
  verify_grad([](V v) { return grad(sum(sort(v[0]) * sort(v[0])), v[0]); }, {s});
}

TEST(Sort, UnderEveryModeAndEagerly) {
  Var x = matrix("x", f64);
  compare_with_plain({x}, sort(exp(x) * 2.0) + argsort(x), {random_tensor({6, 5}, f64, -1, 1, 3)});
  compare_with_plain({x}, std::vector<Var>{sort(x, 0)}, {random_tensor({6, 5}, f64, -1, 1, 3)}, 0, Mode::debug());
  expect_values(sort(Tensor::from(std::vector<double>{2.0, -1.0, 0.5})), {-1, 0.5, 2}, 0);
  expect_values(argsort(Tensor::from(std::vector<double>{2.0, -1.0, 0.5})), {1, 2, 0}, 0);
}

TEST(Sort, LongRowsWithTiesMatchAStableSort) {
  Var x = matrix("x", f64);
  for (int64_t n : {15, 16, 17, 33, 100, 1000}) {
    // Few distinct values, so that ties are everywhere; a NaN now and then.
    std::vector<double> v(static_cast<size_t>(3 * n));
    for (size_t i = 0; i < v.size(); ++i) v[i] = i % 37 == 5 ? std::numeric_limits<double>::quiet_NaN() : double((i * 7919) % 13);
    const Tensor xv = Tensor::from(v, {3, n});
    auto o = eval({x}, {argsort(x), sort(x)}, {xv});
    const auto got = o[0].to_vector<double>();
    for (int64_t r = 0; r < 3; ++r) {
      std::vector<int64_t> want(static_cast<size_t>(n));
      std::iota(want.begin(), want.end(), int64_t{0});
      const double* row = v.data() + r * n;
      std::stable_sort(want.begin(), want.end(), [&](int64_t a, int64_t b) {
        return std::isnan(row[b]) ? !std::isnan(row[a]) : row[a] < row[b];
      });
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[r * n + i], static_cast<double>(want[i])) << "n " << n << " row " << r << " at " << i;
    }
  }
}

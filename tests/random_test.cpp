// Random streams (src/ops/random.cpp): fresh numbers every call with no update written, the same
// numbers for a seed whatever the thread count, the distributions' ranges and moments, dropout
// masks in a training step, and clear errors.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "test_util.hpp"

using namespace kiln;
using namespace kiln::test;

namespace {

double mean_of(const std::vector<double>& v) { return std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size()); }
double std_of(const std::vector<double>& v) {
  const double m = mean_of(v);
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return std::sqrt(s / static_cast<double>(v.size()));
}

}  // namespace

TEST(Random, EveryCallDrawsFreshNumbersWithNoUpdateWritten) {
  RandomStreams rng(7);
  Var u = rng.uniform({1000});
  Function f = function({}, {u});
  const std::vector<double> first = f({})[0].to_vector<double>(), second = f({})[0].to_vector<double>();
  EXPECT_NE(first, second);
  for (double x : first) {
    EXPECT_GE(x, 0.0);
    EXPECT_LT(x, 1.0);
  }
  EXPECT_NEAR(mean_of(first), 0.5, 0.04);  // 4.4 standard errors of the mean of 1000 uniforms
  ASSERT_EQ(rng.states().size(), 1u);
  EXPECT_EQ(rng.states()[0].get_value().to_vector<int64_t>()[1], 2 * 250) << "two calls of 250 blocks of 4 floats";
  // seed() starts every stream again: the first call's numbers come back.
  rng.seed(7);
  EXPECT_EQ(f({})[0].to_vector<double>(), first);
  // Another RandomStreams with the seed draws the same, another seed other numbers.
  RandomStreams same(7), other(8);
  EXPECT_EQ(function({}, {same.uniform({1000})})({})[0].to_vector<double>(), first);
  EXPECT_NE(function({}, {other.uniform({1000})})({})[0].to_vector<double>(), first);
}

TEST(Random, TheNumbersDoNotDependOnTheThreadCount) {
  const int threads_before = num_threads();
  std::vector<std::vector<double>> draws;
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    RandomStreams rng(11);
    Function f = function({}, {rng.normal({300, 200}, 0.0, 1.0, f64), rng.binomial({100000}, int64_t{3}, 0.25), rng.uniform({70000})});
    const std::vector<Tensor> out = f({});
    std::vector<double> all;
    for (const Tensor& t : out) {
      const std::vector<double> v = t.to_vector<double>();
      all.insert(all.end(), v.begin(), v.end());
    }
    draws.push_back(all);
  }
  set_num_threads(threads_before);
  EXPECT_EQ(draws[0], draws[1]);
}

TEST(Random, DistributionsHaveTheirRangesAndMoments) {
  RandomStreams rng(3);
  Var low = scalar("low", f64);
  const std::vector<Tensor> out = function({low}, {rng.normal({100000}, 2.0, 3.0, f64), rng.normal({100000}), rng.uniform({50000}, low, 5.0, f64),
                                                   rng.integers({20000}, int64_t{-3}, int64_t{4}), rng.integers({1000}, int64_t{0}, int64_t{10}, i32),
                                                   rng.binomial({100000}, int64_t{1}, 0.3), rng.binomial({20000}, int64_t{10}, 0.5, f32)})(
      Tensor::scalar(-5.0));
  const std::vector<double> n64 = out[0].to_vector<double>(), n32 = out[1].to_vector<double>(), u = out[2].to_vector<double>();
  EXPECT_NEAR(mean_of(n64), 2.0, 0.04);
  EXPECT_NEAR(std_of(n64), 3.0, 0.04);
  EXPECT_EQ(out[1].dtype(), f32);
  EXPECT_NEAR(mean_of(n32), 0.0, 0.015);
  EXPECT_NEAR(std_of(n32), 1.0, 0.015);
  EXPECT_NEAR(mean_of(u), 0.0, 0.06);
  EXPECT_GE(*std::min_element(u.begin(), u.end()), -5.0);
  EXPECT_LT(*std::max_element(u.begin(), u.end()), 5.0);
  const std::vector<int64_t> ints = out[3].to_vector<int64_t>();
  std::vector<int> seen(7, 0);
  for (int64_t v : ints) {
    ASSERT_GE(v, -3);
    ASSERT_LT(v, 4);
    ++seen[static_cast<size_t>(v + 3)];
  }
  for (int count : seen) EXPECT_NEAR(count, 20000 / 7, 200);
  EXPECT_EQ(out[4].dtype(), i32);
  const std::vector<double> mask = out[5].to_vector<double>(), tens = out[6].to_vector<double>();
  for (double v : mask) ASSERT_TRUE(v == 0 || v == 1);
  EXPECT_NEAR(mean_of(mask), 0.3, 0.006);
  EXPECT_EQ(out[6].dtype(), f32);
  EXPECT_NEAR(mean_of(tens), 5.0, 0.05);
  EXPECT_NEAR(std_of(tens), std::sqrt(2.5), 0.05);
}

TEST(Random, ADropoutMaskShapedLikeItsInputInATrainingStep) {
  RandomStreams rng(5);
  Shared w = shared(Tensor::full({4, 3}, 0.5, f64), "w");
  Var x = matrix("x", f64);
  Var h = tanh(dot(x, w));
  Var mask = rng.binomial(shape_of(h), int64_t{1}, 0.5, f64);
  Var cost = sum(sqr(h * mask));
  Function step = function({x}, {mask}, {.updates = {{w, w - 0.01 * grad(cost, w)}}});
  const Tensor xv = random_tensor({6, 4}, f64);
  const Tensor m1 = step(xv)[0], m2 = step(xv)[0];
  EXPECT_EQ(m1.shape(), (Shape{6, 3}));
  EXPECT_NE(m1.to_vector<double>(), m2.to_vector<double>()) << "a fresh mask each call";
  // The gradient through the mask reaches w only through the kept units.
  RandomStreams again(5);
  Var mask_again = again.binomial(shape_of(h), int64_t{1}, 0.5, f64);
  const Tensor g = function({x}, {grad(sum(sqr(h * mask_again)), w)})(xv)[0];
  EXPECT_EQ(g.shape(), (Shape{4, 3}));
}

TEST(Random, ChoiceAndTheCallersOwnUpdateOfAState) {
  RandomStreams rng(9);
  Var a = constant(Tensor::from(std::vector<double>{10, 20, 30}));
  const std::vector<double> picked = function({}, {rng.choice({500}, a)})({})[0].to_vector<double>();
  for (double v : picked) ASSERT_TRUE(v == 10 || v == 20 || v == 30);
  // An update the caller writes for a stream wins: here it keeps the state, so every call draws the same.
  RandomStreams fixed(1);
  Var u = fixed.uniform({8});
  Function f = function({}, {u}, {.updates = {{fixed.states()[0], fixed.states()[0] + int64_t{0}}}});
  EXPECT_EQ(f({})[0].to_vector<double>(), f({})[0].to_vector<double>());
}

TEST(Random, BadArgumentsAreClearErrors) {
  RandomStreams rng(2);
  Var low = scalar("low", i64), p = scalar("p", f64);
  Function ints = function({low}, {rng.integers({4}, low, int64_t{3})});
  expect_error<ShapeError>([&] { ints(Tensor::scalar(int64_t{3})); }, {"random_integers", "low (3) must be below high (3)"});
  Function coins = function({p}, {rng.binomial({4}, int64_t{1}, p)});
  expect_error<ShapeError>([&] { coins(Tensor::scalar(1.5)); }, {"random_binomial", "p in [0, 1]", "1.5"});
  expect_error<TypeError>([&] { rng.uniform({3}, 0.0, 1.0, i64); }, {"uniform", "f32 or f64", "i64"});
  expect_error<TypeError>([&] { rng.normal(vector("size", i64)); }, {"cannot tell how many dimensions", "shape_of"});
  expect_error<TypeError>([&] { rng.integers({3}, 0.5, 2.0); }, {"integers", "0-d integers"});
  Function normals = function({p}, {rng.normal({4}, 0.0, p)});  // a negative std was taken silently
  expect_error<ShapeError>([&] { normals(Tensor::scalar(-1.0)); }, {"random_normal", "std must be 0 or more", "-1"});
}

TEST(Random, IntegersCoverTheWholeI64RangeAndRefuseAnI32RangeTheyCannotHold) {
  // The bounds went through a double: [INT64_MIN, INT64_MAX) gave INT64_MIN every time, and an
  // i32 draw from [0, 2^40) wrapped to values outside the range.
  RandomStreams rng(4);
  const std::vector<int64_t> wide = function({}, {rng.integers({64}, INT64_MIN, INT64_MAX)})({})[0].to_vector<int64_t>();
  int64_t negative = 0, distinct_high_words = 0;
  for (size_t i = 0; i < wide.size(); ++i) {
    negative += wide[i] < 0;
    distinct_high_words += i > 0 && (wide[i] >> 40) != (wide[i - 1] >> 40);
  }
  EXPECT_GT(negative, 8);
  EXPECT_LT(negative, 56);
  EXPECT_GT(distinct_high_words, 56);
  const int64_t near = int64_t{1} << 62;
  for (int64_t v : function({}, {rng.integers({64}, near, near + 3)})({})[0].to_vector<int64_t>()) {
    EXPECT_GE(v, near);
    EXPECT_LT(v, near + 3);
  }
  Function narrow = function({}, {rng.integers({4}, int64_t{0}, int64_t{1} << 40, i32)});
  expect_error<ShapeError>([&] { narrow({}); }, {"random_integers{i32}", "[0, 1099511627776)", "i32", "draw i64"});
  Function fits = function({}, {rng.integers({256}, int64_t{INT32_MIN}, int64_t{INT32_MAX} + 1, i32)});
  EXPECT_EQ(fits({})[0].dtype(), i32);
}

TEST(Random, ChoiceFromAnEmptyVectorNamesChoiceAndAllowsNoDraws) {
  RandomStreams rng(5);
  Var a = vector("a", f64);
  Var n = scalar("n", i64);
  Function f = function({a, n}, {rng.choice(DrawSize(stack({n})), a)});
  EXPECT_EQ(f(Tensor::zeros({0}, f64), Tensor::scalar(int64_t{0}))[0].shape(), (Shape{0}));
  expect_error<ShapeError>([&] { f(Tensor::zeros({0}, f64), Tensor::scalar(int64_t{2})); }, {"choice", "a has no elements", "size 0"});
}

TEST(Random, UniformNeverDrawsItsUpperBound) {
  // Found by the trial: in f32, low + (high - low) u rounded to high for u near 1 where high is
  // large beside high - low (8 in 20M draws on [10, 11); some 30 in 1M on [1000, 1001)).
  RandomStreams rng(3);
  for (DType dtype : {f32, f64}) {
    const std::vector<double> v =
        function({}, {rng.uniform({1 << 20}, 1000.0, 1001.0, dtype)})(std::vector<Tensor>{})[0].to_vector<double>();
    EXPECT_EQ(std::count_if(v.begin(), v.end(), [](double x) { return x >= 1001.0 || x < 1000.0; }), 0) << dtype_name(dtype);
  }
}

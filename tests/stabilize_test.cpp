#include "ops/nnet.hpp"
#include "ops/reduce.hpp"
#include "test_util.hpp"

using namespace kiln;
using namespace kiln::test;

namespace {
double run1(const Var& x, const Var& y, double at, Mode mode = Mode::fast_run()) {
  return function({x}, {y}, {.mode = mode})(Tensor::from({at}, {1}))[0].to_vector<double>()[0];
}
}  // namespace

TEST(Stabilize, Log1pAndExpm1) {
  Var x = vector("x", f64);
  Function f = function({x}, {log(1.0 + x), exp(x) - 1.0});
  EXPECT_EQ(count_op(f, "log1p"), 1);
  EXPECT_EQ(count_op(f, "expm1"), 1);
  EXPECT_EQ(count_op(f, "log"), 0);
  EXPECT_EQ(run1(x, log(1.0 + x), 1e-20), 1e-20);
  EXPECT_EQ(run1(x, log(1.0 + x), 1e-20, plain_mode()), 0.0);  // what the unrewritten graph gives
  EXPECT_NEAR(run1(x, exp(x) - 1.0, 1e-12), 1e-12, 1e-24);
}

TEST(Stabilize, Softplus) {
  Var x = vector("x", f64);
  Function f = function({x}, {log(1.0 + exp(x))});
  EXPECT_EQ(count_op(f, "softplus"), 1);
  EXPECT_EQ(count_op(f, "exp"), 0);
  EXPECT_EQ(run1(x, log(1.0 + exp(x)), 1000.0), 1000.0);
  EXPECT_TRUE(std::isinf(run1(x, log(1.0 + exp(x)), 1000.0, plain_mode())));
  EXPECT_NEAR(run1(x, log(exp(x) + 1.0), -3.0), std::log1p(std::exp(-3.0)), 1e-15);
}

TEST(Stabilize, LogSigmoid) {
  Var x = vector("x", f64);
  Function f = function({x}, {log(sigmoid(x)), log(1.0 - sigmoid(x))});
  EXPECT_EQ(count_op(f, "sigmoid"), 0);
  EXPECT_EQ(count_op(f, "softplus"), 2);
  EXPECT_NEAR(run1(x, log(sigmoid(x)), -800.0), -800.0, 1e-9);
  EXPECT_NEAR(run1(x, log(1.0 - sigmoid(x)), 800.0), -800.0, 1e-9);
  EXPECT_NEAR(run1(x, log(sigmoid(x)), 0.3), std::log(1 / (1 + std::exp(-0.3))), 1e-15);
}

TEST(Stabilize, LogSoftmaxAndLogSumExp) {
  Var x = matrix("x", f64);
  Tensor big = Tensor::from({1000.0, 0.0, -1000.0, 1.0}, {2, 2});
  Function f = function({x}, {log(softmax(x)), log(sum(exp(x), {1}))});
  EXPECT_EQ(count_op(f, "softmax"), 0);
  EXPECT_EQ(count_op(f, "log_softmax"), 1);
  EXPECT_EQ(count_op(f, "logsumexp"), 1);
  auto o = f(big);
  expect_values(o[0], {0.0, -1000.0, -1001.0 - std::log1p(std::exp(-1001.0)), -std::log1p(std::exp(-1001.0))}, 1e-12);
  expect_values(o[1], {1000.0, 1.0 + std::log1p(std::exp(-1001.0))}, 1e-12);
  verify_grad([](std::vector<Var> v) { return apply1(std::make_shared<LogSumExp>(std::vector<int64_t>{1}, true), {v[0]}, Loc::current()); },
              {random_tensor({3, 4})});
}

TEST(Stabilize, CrossEntropyOfSoftmaxIsOneStableOp) {
  Var x = matrix("x", f64), y = vector("y", i64);
  Var loss = mean(categorical_crossentropy(softmax(x), y));
  Var gx = grad(loss, x);
  Function f = function({x, y}, {loss, gx});
  EXPECT_EQ(count_op(f, "crossentropy_softmax"), 1);
  EXPECT_EQ(count_op(f, "crossentropy_softmax_grad"), 1);
  EXPECT_EQ(count_op(f, "softmax"), 0) << f.graph_text();
  Tensor logits = Tensor::from({1000.0, 0.0, -1000.0, 0.0, 0.0, 0.0}, {2, 3});
  Tensor labels = Tensor::from(std::vector<int64_t>{1, 2});
  auto o = f(logits, labels);
  EXPECT_TRUE(std::isfinite(o[0].item<double>()));
  EXPECT_NEAR(o[0].item<double>(), (1000.0 + std::log(3.0)) / 2, 1e-9);
  // The gradient is (softmax - onehot) / batch.
  expect_values(o[1], {0.5, -0.5, 0.0, 1.0 / 6, 1.0 / 6, -1.0 / 3}, 1e-12);
  // kiln's own categorical_crossentropy builds its stable form: finite in the plain mode too.
  Function plain = function({x, y}, {loss}, {.mode = plain_mode()});
  EXPECT_NEAR(plain(logits, labels)[0].item<double>(), (1000.0 + std::log(3.0)) / 2, 1e-9);
  // Values equal the unrewritten graph where that one is finite.
  Tensor mild = random_tensor({2, 3}, f64, -2, 2);
  auto a = f(mild, labels);
  auto b = function({x, y}, {loss, gx}, {.mode = plain_mode()})(mild, labels);
  expect_values(a[0], b[0].to_vector<double>(), 1e-12);
  expect_values(a[1], b[1].to_vector<double>(), 1e-12);
}

TEST(Stabilize, NewOpsHaveCheckedGradients) {
  Tensor labels = Tensor::from(std::vector<int64_t>{0, 2, 1});
  for (DType dt : {f64, f32}) {
    Tensor x = random_tensor({3, 4}, dt, -2, 2);
    verify_grad([&](std::vector<Var> v) {
      return apply1(std::make_shared<CrossEntropySoftmax>(), {v[0], constant(labels)}, Loc::current());
    }, {x});
    verify_grad([&](std::vector<Var> v) {
      return apply1(std::make_shared<CrossEntropySoftmaxGrad>(), {v[0], v[1], constant(labels)}, Loc::current());
    }, {random_tensor({3}, dt, 0.5, 1.5, 3), x});
    verify_grad([&](std::vector<Var> v) { return apply1(std::make_shared<SoftmaxGrad>(1), {v[0], softmax(v[1])}, Loc::current()); },
                {random_tensor({3, 4}, dt, -1, 1, 5), x});
  }
}

namespace {
double stable_sigmoid(double x) { return x >= 0 ? 1 / (1 + std::exp(-x)) : std::exp(x) / (1 + std::exp(x)); }

std::vector<Mode> every_mode() { return {plain_mode(), Mode::fast_compile(), Mode::fast_run(), Mode::debug()}; }

const std::vector<double> kFar = {-1e4, -800, -40, -28, -1, 0, 0.5, 28, 40, 800, 1e4};

// Checks every element of a gradient against a closed form, within the dtype's precision.
void expect_gradient(const Tensor& got, const std::vector<double>& want, DType dtype, const std::string& what) {
  const auto g = got.to_vector<double>();
  ASSERT_EQ(g.size(), want.size()) << what;
  const double tol = dtype == f32 ? 2e-6 : 1e-13;
  for (size_t i = 0; i < g.size(); ++i) {
    ASSERT_TRUE(std::isfinite(g[i])) << what << " element " << i;
    EXPECT_NEAR(g[i], want[i], tol * std::max(1.0, std::fabs(want[i]))) << what << " element " << i;
  }
}
}  // namespace

// Issue 9, item 1: the stabilizing rewrites fixed the values of these expressions but their
// gradients were built from the unstable forms: NaN at |x| ~ 800 in f64, and 1 - sigmoid(40) is 0.
TEST(Stabilize, GradientsOfStabilizedExpressionsAreFiniteAndExactInEveryMode) {
  for (DType dtype : {f64, f32})
    for (const Mode& mode : every_mode()) {
      Var x = vector("x", dtype);
      const std::string where = std::string(dtype_name(dtype)) + " " + mode.name() + " ";
      const std::vector<std::pair<std::string, Var>> costs = {
          {"log(1 + exp(x))", sum(log(1.0 + exp(x)))},
          {"log1p(exp(x))", sum(log1p(exp(x)))},
          {"log(sigmoid(x))", sum(log(sigmoid(x)))},
          {"log(1 - sigmoid(x))", sum(log(1.0 - sigmoid(x)))}};
      const std::vector<std::function<double(double)>> derivative = {
          stable_sigmoid, stable_sigmoid, [](double v) { return stable_sigmoid(-v); }, [](double v) { return -stable_sigmoid(v); }};
      for (size_t c = 0; c < costs.size(); ++c) {
        Function f = function({x}, {grad(costs[c].second, x)}, {.mode = mode});
        std::vector<double> want;
        for (double v : kFar) want.push_back(derivative[c](v));
        expect_gradient(f(Tensor::from(kFar, {static_cast<int64_t>(kFar.size())}).to(dtype))[0], want, dtype,
                        where + costs[c].first);
      }
    }
}

TEST(Stabilize, GradientsOfLogSoftmaxLogSumExpAndCrossEntropyAreFinite) {
  for (DType dtype : {f64, f32})
    for (const Mode& mode : every_mode()) {
      Var m = matrix("m", dtype), t = matrix("t", dtype), y = vector("y", i64);
      const Tensor mv = Tensor::from({-1e4, 0.0, 1e4, 800.0, -800.0, 1.0}, {2, 3}).to(dtype);
      const Tensor tv = Tensor::from({0.2, 0.3, 0.5, 0.0, 1.0, 0.0}, {2, 3}).to(dtype);
      const Tensor yv = Tensor::from(std::vector<int64_t>{0, 1});
      const std::vector<double> p = {0, 0, 1, 1, 0, 0};  // softmax of mv's rows
      const std::string where = std::string(dtype_name(dtype)) + " " + mode.name() + " ";
      Function f = function({m, t, y},
                            {grad(sum(t * log(softmax(m))), m), grad(sum(log(sum(exp(m), {1}))), m),
                             grad(sum(categorical_crossentropy(softmax(m), t)), m),
                             grad(sum(categorical_crossentropy(softmax(m), y)), m), grad(sum(logsumexp(m, {1})), m)},
                            {.mode = mode});
      const auto o = f(mv, tv, yv);
      const std::vector<double> tw = tv.to_vector<double>();
      std::vector<double> log_softmax_grad, ce_grad, label_grad;
      for (size_t i = 0; i < 6; ++i) {
        log_softmax_grad.push_back(tw[i] - p[i]);  // each row of t sums to 1
        ce_grad.push_back(p[i] - tw[i]);
        label_grad.push_back(p[i] - (i == 0 || i == 4 ? 1.0 : 0.0));
      }
      expect_gradient(o[0], log_softmax_grad, dtype, where + "sum(t * log(softmax(m)))");
      expect_gradient(o[1], p, dtype, where + "log(sum(exp(m)))");
      expect_gradient(o[2], ce_grad, dtype, where + "crossentropy against a distribution");
      expect_gradient(o[3], label_grad, dtype, where + "crossentropy against labels");
      expect_gradient(o[4], p, dtype, where + "logsumexp");
    }
}

// exp(x - logsumexp(x)) carries logsumexp's rounding (1e-3 at 1e4 in f32) into every element:
// the gradient was 0.73090 where softmax is 0.73106.
TEST(Stabilize, GradientOfLogSumExpIsSoftmaxToTheLastBitsAtLargeValues) {
  for (DType dtype : {f32, f64})
    for (const Mode& mode : every_mode()) {
      Var m = matrix("m", dtype);
      const Tensor mv = Tensor::from({-10000.0, -10001.0, 9999.0, 10000.0}, {2, 2}).to(dtype);
      Function f = function({m}, {grad(sum(logsumexp(m, {1})), m), grad(sum(log(sum(exp(m), {1}))), m),
                                  grad(logsumexp(m, {0, 1}), m)},
                            {.mode = mode});
      const auto o = f(mv);
      const double e = 1 / (1 + std::exp(-1.0));
      const std::vector<double> rows = {e, 1 - e, 1 - e, e}, all = {0, 0, 1 - e, e};
      const double tolerance = dtype == f32 ? 2e-7 : 1e-15;
      const std::string where = std::string(dtype_name(dtype)) + " " + mode.name();
      for (size_t k : {0, 1})
        for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(o[k].to_vector<double>()[i], rows[i], tolerance) << where << " output " << k;
      for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(o[2].to_vector<double>()[i], all[i], tolerance) << where << " all axes";
    }
}

// The textbook logistic regression on separable data turned W into NaN at the first step while
// the printed loss looked healthy.
TEST(Stabilize, TextbookLogisticRegressionOnSeparableDataTrains) {
  for (const Mode& mode : every_mode()) {
    Var x = matrix("x", f64), y = vector("y", f64);
    Shared w = shared(Tensor::from({30.0, -30.0}, {2}), "w");
    Var z = dot(x, w);
    Var loss = mean(-y * log(sigmoid(z)) - (1.0 - y) * log(1.0 - sigmoid(z)));
    Function step = function({x, y}, {loss}, {.updates = {{w, w - 0.5 * grad(loss, w)}}, .mode = mode});
    const Tensor xv = Tensor::from({40.0, 0.0, 0.0, 40.0, 30.0, -10.0, -10.0, 30.0}, {4, 2});
    const Tensor yv = Tensor::from({1.0, 0.0, 1.0, 0.0}, {4});
    // The value is stabilized by the stabilize group (fast_run); plain and fast_compile compute the
    // graph as written, where 0 * log(0) is NaN. The gradient is stable in every mode.
    const bool stabilizes = mode.name() == "fast_run" || mode.name() == "debug";
    for (int i = 0; i < 3; ++i) {
      const double l = step(xv, yv)[0].item<double>();
      if (stabilizes) ASSERT_TRUE(std::isfinite(l)) << mode.name() << " step " << i;
      for (double wi : w.get_value().to_vector<double>()) ASSERT_TRUE(std::isfinite(wi)) << mode.name() << " step " << i;
    }
    if (stabilizes) EXPECT_NEAR(function({x, y}, {loss}, {.mode = mode})(xv, yv)[0].item<double>(), 0.0, 1e-12) << mode.name();
  }
}

TEST(Stabilize, BinaryCrossentropyOfASigmoidIsStableAndItsGradientChecks) {
  for (const Mode& mode : every_mode()) {
    Var z = vector("z", f64), t = vector("t", f64);
    Var cost = sum(binary_crossentropy(sigmoid(z), t));
    Function f = function({z, t}, {cost, grad(cost, z)}, {.mode = mode});
    const auto o = f(Tensor::from({-1e4, 1e4, 50.0}, {3}), Tensor::from({1.0, 0.0, 1.0}, {3}));
    EXPECT_NEAR(o[0].item<double>(), 2e4 + std::log1p(std::exp(-50.0)), 1e-9) << mode.name();
    expect_gradient(o[1], {-1.0, 1.0, stable_sigmoid(50.0) - 1.0}, f64, mode.name());
  }
  verify_grad([](std::vector<Var> v) { return binary_crossentropy(sigmoid(v[0]), v[1]); },
              {random_tensor({5}, f64, -3, 3), random_tensor({5}, f64, 0, 1, 3)});
  verify_grad([](std::vector<Var> v) { return binary_crossentropy(v[0], v[1]); },
              {random_tensor({5}, f64, 0.1, 0.9), random_tensor({5}, f64, 0, 1, 3)});
  verify_grad([](std::vector<Var> v) { return logsumexp(v[0], {0}, true); }, {random_tensor({3, 4}, f64, -5, 5)});
  Var m = vector("m", f64);
  expect_values(function({m}, {logsumexp(m)})(Tensor::from({1000.0, 1000.0}, {2}))[0], {1000 + std::log(2.0)}, 1e-15);
}

// A wrt inside a chain still gets the chain's own gradient.
TEST(Stabilize, AWrtInsideAStabilizedChainGetsItsGradient) {
  Var x = vector("x", f64);
  Var e = exp(x);
  const auto g = grad(sum(log(1.0 + e)), {e, x});
  auto o = function({x}, {g[0], g[1]})(Tensor::from({0.5, -2.0}, {2}));
  expect_values(o[0], {1 / (1 + std::exp(0.5)), 1 / (1 + std::exp(-2.0))}, 1e-14);
  expect_values(o[1], {stable_sigmoid(0.5), stable_sigmoid(-2.0)}, 1e-14);
}

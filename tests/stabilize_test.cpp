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
  Function plain = function({x, y}, {loss}, {.mode = plain_mode()});
  EXPECT_TRUE(std::isinf(plain(logits, labels)[0].item<double>()));
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

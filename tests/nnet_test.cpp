#include "test_util.hpp"

using namespace kiln;
using namespace kiln::test;

TEST(Nnet, SoftmaxRowsSumToOneAndAreStable) {
  for (DType dt : {f32, f64}) {
    Var x = matrix("x", dt);
    Tensor xv = Tensor::from({1000.0, 1001.0, 1002.0, -5.0, 0.0, 5.0}, {2, 3}).to(dt);
    auto o = eval({x}, {softmax(x), log_softmax(x), softmax(x, 0)}, {xv});
    double e0 = std::exp(-2.0), e1 = std::exp(-1.0), z = e0 + e1 + 1;
    expect_values(o[0], {e0 / z, e1 / z, 1 / z, std::exp(-10.0) / (std::exp(-10.0) + std::exp(-5.0) + 1),
                         std::exp(-5.0) / (std::exp(-10.0) + std::exp(-5.0) + 1), 1 / (std::exp(-10.0) + std::exp(-5.0) + 1)},
                  1e-5);
    expect_values(o[1], {-2 - std::log(z), -1 - std::log(z), -std::log(z), -10 - std::log(1 + std::exp(-5.0) + std::exp(-10.0)),
                         -5 - std::log(1 + std::exp(-5.0) + std::exp(-10.0)), -std::log(1 + std::exp(-5.0) + std::exp(-10.0))},
                  1e-5);
    auto col = o[2].to_vector<double>();
    EXPECT_NEAR(col[0] + col[3], 1.0, 1e-6);
  }
}

TEST(Nnet, CrossEntropyWithLabelsAndDistributions) {
  Var p = matrix("p", f64), y = vector("y", i64), t = matrix("t", f64);
  Tensor pv = Tensor::from({0.2, 0.8, 0.6, 0.4}, {2, 2});
  auto o = eval({p, y, t}, {categorical_crossentropy(p, y), categorical_crossentropy(p, t)},
                {pv, Tensor::from(std::vector<int64_t>{1, 0}), Tensor::from({0.0, 1.0, 1.0, 0.0}, {2, 2})});
  expect_values(o[0], {-std::log(0.8), -std::log(0.6)});
  expect_values(o[1], {-std::log(0.8), -std::log(0.6)});
  Function f = function({p, y}, {categorical_crossentropy(p, y)});
  expect_error<ShapeError>([&] { f(pv, Tensor::from(std::vector<int64_t>{1, 2})); }, {"label 2", "[0, 2)"});
  expect_error<ShapeError>([&] { f(pv, Tensor::from(std::vector<int64_t>{1})); }, {"2 rows", "1 labels"});
  expect_error<TypeError>([&] { categorical_crossentropy(p, vector("f", f32)); }, {"integer labels"});
}

TEST(Nnet, Gradients) {
  for (DType dt : {f64, f32}) {
    Tensor x = random_tensor({3, 4}, dt, -2, 2);
    Tensor labels = Tensor::from(std::vector<int64_t>{0, 3, 1});
    verify_grad([](std::vector<Var> v) { return softmax(v[0]); }, {x});
    verify_grad([](std::vector<Var> v) { return softmax(v[0], 0); }, {x});
    verify_grad([](std::vector<Var> v) { return log_softmax(v[0]); }, {x});
    verify_grad([&](std::vector<Var> v) { return categorical_crossentropy(softmax(v[0]), constant(labels)); }, {x});
    verify_grad([&](std::vector<Var> v) { return categorical_crossentropy(softmax(v[0]), softmax(v[1])); },
                {x, random_tensor({3, 4}, dt, -1, 1, 4)});
  }
}

// Issue 9, item 16: on a row longer than 8 192 elements with two threads, both threads computed the
// same row at once: softmax was wrong in most calls and log_softmax gave NaN.
TEST(Nnet, SoftmaxOfOneLongRowIsRightOnTwoThreadsEveryCall) {
  ThreadsForScope two_threads(2);
  Var x = matrix("x", f64);
  Function f = function({x}, {softmax(x), log_softmax(x)});
  const Tensor row = random_tensor({1, 40000}, f64, -3, 3);
  const auto first = f(row);
  for (int call = 0; call < 20; ++call) {
    const auto again = f(row);
    EXPECT_EQ(again[0].to_vector<double>(), first[0].to_vector<double>()) << "call " << call;
    EXPECT_EQ(again[1].to_vector<double>(), first[1].to_vector<double>()) << "call " << call;
  }
  double total = 0;
  for (double p : first[0].to_vector<double>()) total += p;
  EXPECT_NEAR(total, 1.0, 1e-12);
  for (double l : first[1].to_vector<double>()) ASSERT_TRUE(std::isfinite(l));
}

// Issue 9, item 20: the fused cross-entropy rounded logsumexp to the precision of the largest logit
// (0.00390625 instead of 0.0039219 for logits near 1009).
TEST(Nnet, FusedCrossEntropyIsAccurateInF32) {
  Var x = matrix("x"), y = vector("y", i64);
  Function f = function({x, y}, {categorical_crossentropy(softmax(x), y), grad(sum(categorical_crossentropy(softmax(x), y)), x)});
  const float a = 1009.f, b = 1003.46f;
  const double exact = std::log1p(std::exp(double(b) - double(a)));
  auto o = f(Tensor::from({a, b}, {1, 2}), Tensor::from(std::vector<int64_t>{0}));
  EXPECT_NEAR(o[0].item<double>(), exact, exact * 1e-6);
  const double p1 = 1 / (1 + std::exp(double(a) - double(b)));
  expect_values(o[1], {-p1, p1}, 1e-6);
}

TEST(Nnet, FusedCrossEntropyMatchesTheDefinitionOnShortAndLongRows) {
  // Rows of 10 classes go many at a time through one vectorized exp; rows longer than the fused
  // kernel's buffer (5000 classes) go alone, in chunks. Both against -log softmax in f64.
  for (DType dtype : {DType::f32, DType::f64})
    for (int64_t classes : {int64_t{10}, int64_t{5000}}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + ", " + std::to_string(classes) + " classes");
      const int64_t rows = 7;
      Var x = matrix("x", dtype), y = vector("y", i64);
      Var loss = categorical_crossentropy(softmax(x), y);
      Function f = function({x, y}, {loss, grad(sum(loss), x)});
      const Tensor xv = random_tensor({rows, classes}, dtype, -30, 30, 11);
      std::vector<int64_t> labels;
      for (int64_t r = 0; r < rows; ++r) labels.push_back((r * 7919) % classes);
      const auto out = f(xv, Tensor::from(labels));
      const std::vector<double> v = xv.to_vector<double>();
      std::vector<double> want_loss, want_grad;
      for (int64_t r = 0; r < rows; ++r) {
        double mx = -1e300, total = 0;
        for (int64_t j = 0; j < classes; ++j) mx = std::max(mx, v[r * classes + j]);
        for (int64_t j = 0; j < classes; ++j) total += std::exp(v[r * classes + j] - mx);
        want_loss.push_back(mx + std::log(total) - v[r * classes + labels[r]]);
        for (int64_t j = 0; j < classes; ++j)
          want_grad.push_back(std::exp(v[r * classes + j] - mx) / total - (j == labels[r] ? 1.0 : 0.0));
      }
      const double tol = dtype == DType::f32 ? 2e-6 : 1e-12;
      expect_values(out[0], want_loss, tol);
      expect_values(out[1], want_grad, tol);
    }
}

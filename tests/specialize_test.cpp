#include "ops/blas.hpp"
#include "test_util.hpp"

using namespace kiln;
using namespace kiln::test;


TEST(Specialize, GemmFromScaledSums) {
  Var a = matrix("a", f64), b = matrix("b", f64), c = matrix("c", f64), s = scalar("s", f64);
  std::vector<Tensor> v{random_tensor({3, 4}), random_tensor({4, 5}, f64, -1, 1, 2), random_tensor({3, 5}, f64, -1, 1, 3),
                        Tensor::scalar(0.25)};
  for (Var y : {c + dot(a, b), dot(a, b) + c, c - dot(a, b), c - 0.1 * dot(a, b), c + s * dot(a, b), c - dot(a, b) * s}) {
    Function f = compare_with_plain({a, b, c, s}, y, v);
    EXPECT_EQ(count_op(f, "gemm"), 1) << f.graph_text();
    EXPECT_EQ(count_op(f, "dot"), 0);
  }
}

TEST(Specialize, GemmTakesABroadcastBias) {
  Var x = matrix("x", f64), w = matrix("w", f64), bias = vector("bias", f64);
  Function f = compare_with_plain({x, w, bias}, tanh(dot(x, w) + bias),
                       {random_tensor({3, 4}), random_tensor({4, 5}, f64, -1, 1, 2), random_tensor({5}, f64, -1, 1, 3)});
  EXPECT_EQ(count_op(f, "gemm"), 1);
}

TEST(Specialize, GemmLeavesSharedProductsAndGrowingAddendsAlone) {
  Var a = matrix("a", f64), b = matrix("b", f64), c = matrix("c", f64);
  Var d = dot(a, b);
  Function f = function({a, b, c}, {c + d, exp(d)});
  EXPECT_EQ(count_op(f, "gemm"), 0);  // the product is read twice
  // A row vector a makes the product broadcastable; a full c would enlarge it: kept as add.
  Var r = tensor(f64, {true, false}, "r");
  Function g = compare_with_plain({r, b, c}, c + dot(r, b), {random_tensor({1, 4}), random_tensor({4, 5}, f64, -1, 1, 2), random_tensor({3, 5}, f64, -1, 1, 3)});
  EXPECT_EQ(count_op(g, "gemm"), 0);
}

TEST(Specialize, GemmGradient) {
  for (DType dt : {f64, f32})
    verify_grad([&](std::vector<Var> v) {
      return apply1(std::make_shared<Gemm>(), {v[0], v[1], v[2], v[3], v[4]}, Loc::current());
    }, {random_tensor({1, 3}, dt), random_tensor({2, 4}, dt, -1, 1, 2), random_tensor({4, 3}, dt, -1, 1, 3),
        Tensor::full({}, 0.7, dt), Tensor::full({}, 1.3, dt)});
}

TEST(Specialize, Powers) {
  Var x = vector("x", f64);
  Function f = compare_with_plain({x}, pow(x, 2.0) + pow(x, 0.5) + pow(x, 1.0), {random_tensor({4}, f64, 0.5, 2)});
  EXPECT_EQ(count_op(f, "pow"), 0);
  EXPECT_EQ(count_op(f, "sqr"), 1);
  EXPECT_EQ(count_op(f, "sqrt"), 1);
  Function g = compare_with_plain({x}, pow(x, 3.0), {random_tensor({4}, f64, 0.5, 2)});
  EXPECT_EQ(count_op(g, "pow"), 1);
}

// Found by the differential fuzzer: sum(s * x) -> s * sum(x) gave NaN where the sum is 0 (an empty
// x and s = NaN, from the mean of an empty axis) and inf where it is NaN (s = inf, x holding 0).
// The rewrite is gone (fusion computes sum(s * x) in one pass anyway); every mode agrees.
TEST(Specialize, ASumOfAScaledValueKeepsItsValueForNaNInfAndEmptyInputs) {
  Var x = matrix("x", f64), s = scalar("s", f64);
  const double inf = std::numeric_limits<double>::infinity();
  for (auto [xv, sv] : std::vector<std::pair<Tensor, double>>{{Tensor::zeros({0, 3}, f64), std::nan("")},
                                                              {Tensor::from({0.0, 1.0}, {1, 2}), inf},
                                                              {random_tensor({3, 4}), 3.0}})
    compare_with_plain({x, s}, {sum(s * x), sum(s * x, {1}), mean(x * s)}, {xv, Tensor::scalar(sv)});
}

TEST(Specialize, TrainingStepUsesGemmForEveryUpdate) {
  Var x = matrix("x"), y = vector("y", i64);
  Shared W1 = shared(random_tensor({6, 5}, f32), "W1"), b1 = shared(Tensor::zeros({5}), "b1");
  Shared W2 = shared(random_tensor({5, 3}, f32, -1, 1, 2), "W2"), b2 = shared(Tensor::zeros({3}), "b2");
  Var loss = mean(categorical_crossentropy(softmax(dot(tanh(dot(x, W1) + b1), W2) + b2), y));
  auto g = grad(loss, {W1, b1, W2, b2});
  Function f = function({x, y}, {loss}, {.updates = {{W1, W1 - 0.1 * g[0]}, {b1, b1 - 0.1 * g[1]}, {W2, W2 - 0.1 * g[2]}, {b2, b2 - 0.1 * g[3]}}});
  EXPECT_EQ(count_op(f, "dot"), 1) << f.graph_text();  // the input gradient of layer 2
  EXPECT_EQ(count_op(f, "gemm"), 4);                    // two forward products with bias, two updates
}

// Issue 9, item 17: c + dot(A, B) became a gemm even when c is larger than the product (which then
// broadcasts): fast_run raised a ShapeError where plain gave {11, 12, 23, 24, 35, 36}.
TEST(Specialize, GemmKeepsTheSumsValueWhenTheProductBroadcasts) {
  Var c = matrix("c"), a = matrix("a"), b = matrix("b");
  const Tensor cv = Tensor::from({1.f, 2.f, 3.f, 4.f, 5.f, 6.f}, {3, 2});
  const Tensor av = Tensor::from({1.f, 2.f, 3.f}, {3, 1}), bv = Tensor::from({10.f}, {1, 1});
  compare_with_plain({c, a, b}, {c + dot(a, b), c - 2.0 * dot(a, b), dot(a, b) + c}, {cv, av, bv});
  expect_values(function({c, a, b}, {c + dot(a, b)})(cv, av, bv)[0], {11, 12, 23, 24, 35, 36});
  compare_with_plain({c, a, b}, {c + dot(a, b)}, {cv, random_tensor({3, 4}, f32), random_tensor({4, 2}, f32)}, 1e-6);
  verify_grad([&](std::vector<Var> v) {
    return apply1(std::make_shared<Gemm>(), {v[0], v[1], v[2], v[3], v[4]}, Loc::current());
  }, {random_tensor({3, 2}), random_tensor({3, 4}, f64, -1, 1, 2), random_tensor({4, 1}, f64, -1, 1, 3),
      Tensor::full({}, 0.7, f64), Tensor::full({}, 1.3, f64)});
}

// An SGD step on weights whose gradients a loop summed from zeros (the RNN's W_h and W_x after
// the scan rewrites): W - lr * gemm(zeros_like(W), a, b, 1, 1) and W - lr * inc_take(zeros_like(W),
// v, i) sum straight into W.
TEST(Specialize, UpdatesFromZerosSumIntoTheWeight) {
  Var W = matrix("W", f64), a = matrix("a", f64), b = matrix("b", f64), v = matrix("v", f64), i = vector("i", i64);
  const Var one = constant(Tensor::scalar(1.0));
  const Var summed = apply1(std::make_shared<Gemm>(), {zeros_like(W), a, b, one, one}, Loc::current());
  const Var rows = inc_subtensor(take(zeros_like(W), i), v);
  const std::vector<Var> updated{W - 0.1 * summed, W - 0.5 * rows};
  Function f = compare_with_plain({W, a, b, v, i}, updated,
                                  {random_tensor({3, 4}), random_tensor({3, 2}, f64, -1, 1, 2), random_tensor({2, 4}, f64, -1, 1, 3),
                                   random_tensor({5, 4}, f64, -1, 1, 4), Tensor::from(std::vector<int64_t>{0, 2, 2, 1, 0}, {5})});
  EXPECT_EQ(count_op(f, "fill"), 0) << f.graph_text();
  EXPECT_EQ(count_op(f, "gemm"), 1);
  EXPECT_EQ(count_op(f, "inc_take"), 1);
}

TEST(Specialize, ProductsAndUpdatesKeepANonFiniteScale) {
  // Found by the rewrite fuzzer: with no terms to sum (k = 0) the gemm made of c + s * dot(a, b)
  // left c as it was where s * 0 is NaN (s NaN or infinite); and summing a lookup's gradient into
  // W left the rows it does not reach as they were, where a NaN rate makes every row NaN.
  Var a = matrix("a"), b = matrix("b"), c = matrix("c"), s = scalar("s");
  const std::vector<Tensor> empty_product{Tensor::zeros({2, 0}), Tensor::zeros({0, 2}), Tensor::ones({2, 2})};
  for (Var y : {c + s * dot(a, b), c - s * (zeros_like(c) + dot(a, b))}) {
    Function f = function({a, b, c, s}, {y});
    for (float scale : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
      std::vector<Tensor> args = empty_product;
      args.push_back(Tensor::scalar<float>(scale));
      for (float v : f(args)[0].to_vector<float>()) EXPECT_TRUE(std::isnan(v)) << scale << "\n" << f.graph_text();
    }
    std::vector<Tensor> args = empty_product;
    args.push_back(Tensor::scalar<float>(2));
    expect_values(f(args)[0], {1, 1, 1, 1});
  }
  Var W = matrix("W"), i = vector("i", i64), g = matrix("g"), lr = scalar("lr");
  Function step = function({W, i, g, lr}, {W - lr * grad(sum(take(W, i) * g), W)});
  const std::vector<float> stepped =
      step(Tensor::ones({3, 1}), Tensor::from(std::vector<int64_t>{0, 0}), Tensor::ones({2, 1}),
           Tensor::scalar<float>(std::numeric_limits<float>::quiet_NaN()))[0].to_vector<float>();
  for (float v : stepped) EXPECT_TRUE(std::isnan(v));
  // A finite rate still sums into W.
  Function constant_rate = function({W, i, g}, {W - 0.5 * grad(sum(take(W, i) * g), W)});
  EXPECT_EQ(count_op(constant_rate, "sub"), 0) << constant_rate.graph_text();
  expect_values(constant_rate(Tensor::ones({3, 1}), Tensor::from(std::vector<int64_t>{0, 0}), Tensor::ones({2, 1}))[0], {0, 1, 1});
}

TEST(Specialize, AScaledProductOfOneTermOverflowsOnlyWhereTheProductDoes) {
  // Found by the parity trial: dot(A, B) * 2 + 1 with a depth of 1 became a gemm that scaled A
  // before the product: 1e308 * 2 overflowed where 1e308 * 1e-300 * 2 does not.
  Var A = matrix("A", f64), B = matrix("B", f64);
  const Tensor a = Tensor::from<double>({1e308, 1e308}, {2, 1}), b = Tensor::from<double>({1e-300, 0.0}, {1, 2});
  const Var y = dot(A, B) * 2.0 + 1.0;
  for (Mode mode : {Mode::fast_run(), plain_mode()})
    expect_values(function({A, B}, {y}, {.mode = mode})(a, b)[0], {2e8 + 1, 1, 2e8 + 1, 1}, 1e-6);
  const Var row = dot(constant(Tensor::from<double>({1e308, 1e308}, {1, 2})), B * 1e-300) * 2.0 + 1.0;  // a single row
  expect_values(function({B}, {row})(Tensor::from<double>({1, 2, 3, 4}, {2, 2}))[0], {2 * 4e8 + 1, 2 * 6e8 + 1}, 1e-6);
}

#include "test_util.hpp"

using namespace kiln;
using namespace kiln::test;


TEST(Canonicalize, SelfInverses) {
  Var x = matrix("x", f64);
  Function f = compare_with_plain({x}, x - x, {random_tensor({2, 3})});
  EXPECT_EQ(count_op(f, "sub"), 0);
  Function g = compare_with_plain({x}, x / x, {random_tensor({2, 3}, f64, 1, 2)});
  EXPECT_EQ(count_op(g, "true_div"), 0);
}

TEST(Canonicalize, NeutralElements) {
  Var x = matrix("x", f64);
  for (Var y : {x + 0.0, 0.0 + x, x * 1.0, 1.0 * x, x - 0.0, x / 1.0}) {
    Function f = compare_with_plain({x}, exp(y), {random_tensor({2, 3})});
    EXPECT_EQ(op_counts(f).size(), 1u) << f.graph_text();  // exp alone
  }
  // A zero that would broadcast x larger is kept.
  Function g = compare_with_plain({x}, x + constant(Tensor::zeros({2, 3}, f64)), {random_tensor({1, 3})});
  EXPECT_EQ(count_op(g, "add"), 1);
}

TEST(Canonicalize, CancelFactor) {
  Var x = matrix("x", f64), y = matrix("y", f64);
  Function f = compare_with_plain({x, y}, (x * y) / x, {random_tensor({2, 3}, f64, 1, 2), random_tensor({2, 3}, f64, 1, 2, 4)});
  EXPECT_EQ(count_op(f, "mul"), 0);
  EXPECT_EQ(count_op(f, "true_div"), 0);
  // Broadcasting is kept: y is a row, x a matrix.
  Var r = matrix("r", f64);
  compare_with_plain({x, r}, (r * x) / x, {random_tensor({2, 3}, f64, 1, 2), random_tensor({1, 3}, f64, 1, 2, 4)});
}

TEST(Canonicalize, DoubleNegation) {
  Var x = vector("x", f64);
  Function f = compare_with_plain({x}, exp(-(-x)), {random_tensor({4})});
  EXPECT_EQ(count_op(f, "neg"), 0);
}

TEST(Canonicalize, FlattensChains) {
  Var a = vector("a", f64), b = vector("b", f64), c = vector("c", f64), d = vector("d", f64);
  Function f = compare_with_plain({a, b, c, d}, ((a + b) + c) + d, {random_tensor({3}), random_tensor({3}, f64, -1, 1, 2), random_tensor({3}, f64, -1, 1, 3), random_tensor({3}, f64, -1, 1, 4)});
  EXPECT_EQ(count_op(f, "add"), 1);
  Function g = compare_with_plain({a, b, c}, (a * b) * c, {random_tensor({3}), random_tensor({3}, f64, -1, 1, 2), random_tensor({3}, f64, -1, 1, 3)});
  EXPECT_EQ(count_op(g, "mul"), 1);
  // a + (b + c) is not reassociated: it rounds otherwise (it became add(a, b, c), whose 0 here
  // also flipped a comparison that debug mode then reported as merge's).
  const std::vector<Tensor> values{Tensor::from({1.0}, {1}), Tensor::from({1e16}, {1}), Tensor::from({-1e16}, {1})};
  for (Mode mode : {Mode::fast_run(), Mode::debug()}) {
    expect_values(function({a, b, c}, {a + (b + c)}, {.mode = mode})(values)[0], {1});
    expect_values(function({a, b, c}, {a * (b * c)}, {.mode = mode})(Tensor::from({1e300}, {1}), Tensor::from({1e300}, {1}),
                                                                      Tensor::from({1e-300}, {1}))[0], {1e300});
  }
  // A partial result read elsewhere is not flattened away.
  Var ab = a + b;
  Function h = function({a, b, c}, {ab + c, exp(ab)});
  EXPECT_EQ(count_op(h, "add"), 2);
}

TEST(Canonicalize, CastOfCast) {
  Var x = vector("x", f32);
  Function f = compare_with_plain({x}, cast(cast(x, f64), f32), {random_tensor({3}, f32)});
  EXPECT_EQ(op_counts(f).size(), 0u) << f.graph_text();
  Var i = vector("i", f64);
  // f64 -> i32 -> f32 loses the fraction: kept.
  Function g = compare_with_plain({i}, cast(cast(i, i32), f32), {Tensor::from({1.5, -2.5}, {2})});
  EXPECT_EQ(count_op(g, "cast"), 2);
}

TEST(Canonicalize, UselessMovement) {
  Var x = matrix("x", f64);
  Function f = compare_with_plain({x}, exp(transpose(transpose(x))), {random_tensor({2, 3})});
  EXPECT_EQ(count_op(f, "dimshuffle"), 0);
  Function g = compare_with_plain({x}, exp(reshape(x, shape_of(x))), {random_tensor({2, 3})});
  EXPECT_EQ(count_op(g, "reshape"), 0);
  Function h = compare_with_plain({x}, reshape(reshape(x, {6}), {3, 2}), {random_tensor({2, 3})});
  EXPECT_EQ(count_op(h, "reshape"), 1);
  Function k = compare_with_plain({x}, zeros_like(x) + x, {random_tensor({2, 3})});
  (void)k;
}

TEST(Canonicalize, ShapeWithoutComputingTheValue) {
  Var x = matrix("x", f64);
  Function f = compare_with_plain({x}, shape_of(exp(x)), {random_tensor({4, 5})});
  EXPECT_EQ(count_op(f, "exp"), 0) << f.graph_text();
  expect_values(f(random_tensor({4, 5}))[0], {4, 5});
  Var y = matrix("y", f64);
  Function g = compare_with_plain({x, y}, shape_of(dot(x, y)), {random_tensor({4, 5}), random_tensor({5, 2})});
  EXPECT_EQ(count_op(g, "dot"), 0);
}

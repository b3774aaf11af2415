#include <limits>

#include "test_util.hpp"

using namespace kiln;
using namespace kiln::test;

TEST(Shape, TransposeAndDimshuffleAreViews) {
  Var x = matrix("x", f64);
  Tensor xv = Tensor::from({1.0, 2.0, 3.0, 4.0, 5.0, 6.0}, {2, 3});
  Function f = function({x}, {Out(transpose(x), {.borrow = true})});
  Tensor t = f(xv)[0];
  EXPECT_EQ(t.shape(), (Shape{3, 2}));
  expect_values(t, {1, 4, 2, 5, 3, 6});
  Tensor d = eval1({x}, dimshuffle(x, {1, -1, 0}), {xv});
  EXPECT_EQ(d.shape(), (Shape{3, 1, 2}));
  EXPECT_TRUE(dimshuffle(x, {-1, 0, 1}).type().broadcastable[0]);
}

TEST(Shape, DimshuffleDropsOnlyBroadcastableAxes) {
  Var r = tensor(f64, {true, false}, "r");
  Tensor v = eval1({r}, dimshuffle(r, {1}), {Tensor::from({1.0, 2.0}, {1, 2})});
  expect_values(v, {1, 2});
  expect_error<TypeError>([] { dimshuffle(matrix("m"), {1}); }, {"drops axis 0", "not broadcastable"});
  expect_error<TypeError>([] { dimshuffle(matrix("m"), {0, 0}); }, {"appears twice"});
}

TEST(Shape, ReshapeAndFlatten) {
  Var x = tensor3("x", f64);
  Tensor xv = random_tensor({2, 3, 4}, f64);
  auto o = eval({x}, {reshape(x, {6, -1}), flatten(x), flatten(x, 2), reshape(x, shape_of(x))}, {xv});
  EXPECT_EQ(o[0].shape(), (Shape{6, 4}));
  EXPECT_EQ(o[1].shape(), (Shape{24}));
  EXPECT_EQ(o[2].shape(), (Shape{2, 12}));
  EXPECT_EQ(o[3].shape(), (Shape{2, 3, 4}));
  expect_values(o[1], xv.to_vector<double>());
}

TEST(Shape, ReshapeOfANonContiguousViewCopies) {
  Var x = matrix("x", f64);
  Tensor v = eval1({x}, reshape(transpose(x), {6}), {Tensor::from({1.0, 2.0, 3.0, 4.0, 5.0, 6.0}, {2, 3})});
  expect_values(v, {1, 4, 2, 5, 3, 6});
}

TEST(Shape, SymbolicReshape) {
  Var x = vector("x", f64), n = scalar("n", i64);
  Tensor v = eval1({x, n}, reshape(x, stack({n, Var(-1)})), {random_tensor({6}), Tensor::scalar<int64_t>(2)});
  EXPECT_EQ(v.shape(), (Shape{2, 3}));
  expect_error<TypeError>([&] { reshape(x, vector("s", i64)); }, {"pass ndim"});
}

TEST(Shape, ReshapeErrors) {
  Var x = vector("x");
  Function f = function({x}, {reshape(x, {4, -1})});
  expect_error<ShapeError>([&] { f(Tensor::zeros({6})); }, {"cannot reshape", "(6,)", "shape_test.cpp"});
  expect_error<TypeError>([&] { reshape(x, {-1, -1}); }, {"at most one"});
}

TEST(Shape, Gradients) {
  for (DType dt : {f64, f32}) {
    Tensor x = random_tensor({2, 3, 4}, dt);
    verify_grad([](std::vector<Var> v) { return transpose(v[0]) * 1.5; }, {x});
    verify_grad([](std::vector<Var> v) { return dimshuffle(v[0], {2, 0, -1, 1}); }, {x});
    verify_grad([](std::vector<Var> v) { return reshape(v[0], {4, 6}); }, {x});
    verify_grad([](std::vector<Var> v) { return flatten(transpose(v[0]), 2); }, {x});
  }
}

// arange (issue 15): NumPy's values and dtypes.

TEST(Shape, ArangeAsNumPy) {
  auto values = [](const Var& v) { return eval1({}, v, {}); };
  Tensor a = values(arange(5));
  EXPECT_EQ(a.dtype(), i64);
  expect_values(a, {0, 1, 2, 3, 4}, 0);
  expect_values(values(arange(2, 11, 3)), {2, 5, 8}, 0);
  expect_values(values(arange(5, -4, -3)), {5, 2, -1}, 0);
  EXPECT_EQ(values(arange(3, 3)).shape(), Shape{0});
  EXPECT_EQ(values(arange(5, 1)).shape(), Shape{0});  // empty, as NumPy, not an error
  Tensor f = values(arange(0.0, 1.0, 0.25));
  EXPECT_EQ(f.dtype(), f64);
  expect_values(f, {0, 0.25, 0.5, 0.75}, 0);
  EXPECT_EQ(values(arange(1, 2.5)).dtype(), f64);  // one float argument makes it f64
  expect_values(values(arange(1, 2.5)), {1, 2}, 0);
  expect_values(values(arange(0, 1, 0.1)), {0, 0.1, 0.2, 0.30000000000000004, 0.4, 0.5, 0.6000000000000001, 0.7000000000000001, 0.8, 0.9}, 0);
  EXPECT_EQ(values(arange(int64_t{3})).dtype(), i64);
  EXPECT_EQ(values(arange(3u)).dtype(), i64);
  expect_values(values(arange(-3.0)), {}, 0);
}

TEST(Shape, ArangeCombinesWithTensors) {
  Var x = vector("x", f32);
  Var y = x * arange(3);  // f32 with i64: f64, as NumPy
  EXPECT_EQ(y.dtype(), f64);
  expect_values(eval1({x}, y, {Tensor::from(std::vector<float>{2.0f, 2.0f, 2.0f})}), {0, 2, 4}, 0);
}

TEST(Shape, ArangeRefusesZeroStepsAndInfinities) {
  expect_error<TypeError>([] { arange(0, 5, 0); }, {"arange", "step cannot be zero"});
  expect_error<TypeError>([] { arange(0.0, 1.0, 0.0); }, {"arange", "step cannot be zero"});
  expect_error<TypeError>([] { arange(0.0, std::numeric_limits<double>::infinity()); }, {"arange", "finite"});
  expect_error<TypeError>([] { arange(int64_t{0}, INT64_MAX); }, {"arange", "too many"});
  // An unsigned bound above INT64_MAX wrapped to a negative one (an empty range, silently).
  expect_error<TypeError>([] { arange(uint64_t{1} << 63); }, {"arange", "above the largest i64"});
  expect_error<TypeError>([] { arange(uint64_t{1}, std::numeric_limits<uint64_t>::max() - 1); }, {"arange", "above the largest i64"});
  EXPECT_EQ(eval1({}, arange(uint64_t{3}), {}).to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2}));
}

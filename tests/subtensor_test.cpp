#include "test_util.hpp"

using namespace kiln;
using namespace kiln::test;

namespace {
Tensor m34() { return Tensor::from({0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0}, {3, 4}); }
}  // namespace

TEST(Subtensor, IndexAndSliceWithNumpyRules) {
  Var x = matrix("x", f64);
  auto o = eval({x}, {x[1], x[-1], slice(x, 1, 1, 3), slice(x, 1, std::nullopt, std::nullopt, -1), slice(x, 0, 0, 100, 2),
                      slice(x, 1, -2), slice(x, 0, 5, 9)},
                {m34()});
  expect_values(o[0], {4, 5, 6, 7});
  expect_values(o[1], {8, 9, 10, 11});
  expect_values(o[2], {1, 2, 5, 6, 9, 10});
  expect_values(o[3], {3, 2, 1, 0, 7, 6, 5, 4, 11, 10, 9, 8});
  expect_values(o[4], {0, 1, 2, 3, 8, 9, 10, 11});
  expect_values(o[5], {2, 3, 6, 7, 10, 11});
  EXPECT_EQ(o[6].shape(), (Shape{0, 4}));
}

TEST(Subtensor, SymbolicIndexUsesTake) {
  Var x = matrix("x", f64), i = scalar("i", i64);
  expect_values(eval1({x, i}, x[i], {m34(), Tensor::scalar<int64_t>(2)}), {8, 9, 10, 11});
}

TEST(Subtensor, IndexOutOfBounds) {
  Var x = matrix("x");
  Function f = function({x}, {x[5]});
  expect_error<ShapeError>([&] { f(Tensor::zeros({3, 4})); }, {"index 5", "out of bounds", "axis 0", "size 3"});
  expect_error<TypeError>([&] { (void)scalar("s")[0]; }, {"cannot index a 0-d"});
}

TEST(Subtensor, Take) {
  Var x = matrix("x", f64), idx = vector("idx", i64), idx2 = matrix("idx2", i32);
  auto o = eval({x, idx, idx2}, {take(x, idx, 0), take(x, idx, 1), take(x, idx2, 0)},
                {m34(), Tensor::from(std::vector<int64_t>{2, 0, -1}), Tensor::from(std::vector<int32_t>{0, 1}, {1, 2})});
  expect_values(o[0], {8, 9, 10, 11, 0, 1, 2, 3, 8, 9, 10, 11});
  expect_values(o[1], {2, 0, 3, 6, 4, 7, 10, 8, 11});
  EXPECT_EQ(o[2].shape(), (Shape{1, 2, 4}));
  Function f = function({x, idx}, {take(x, idx)});
  expect_error<ShapeError>([&] { f(m34(), Tensor::from(std::vector<int64_t>{3})); }, {"index 3", "out of bounds"});
  expect_error<TypeError>([&] { take(x, vector("f", f32)); }, {"indices must be integers"});
}

TEST(Subtensor, SetAndIncSubtensor) {
  Var x = matrix("x", f64), v = vector("v", f64), idx = vector("idx", i64);
  Tensor xv = m34();
  auto o = eval({x, v, idx}, {set_subtensor(x[1], v), inc_subtensor(slice(x, 1, 0, 2), 10.0),
                              inc_subtensor(take(x, idx), v), set_subtensor(take(x, idx), 0.0)},
                {xv, Tensor::from({1.0, 1.0, 1.0, 1.0}, {4}), Tensor::from(std::vector<int64_t>{0, 0})});
  expect_values(o[0], {0, 1, 2, 3, 1, 1, 1, 1, 8, 9, 10, 11});
  expect_values(o[1], {10, 11, 2, 3, 14, 15, 6, 7, 18, 19, 10, 11});
  expect_values(o[2], {2, 3, 4, 5, 4, 5, 6, 7, 8, 9, 10, 11});  // repeated indices accumulate
  expect_values(o[3], {0, 0, 0, 0, 4, 5, 6, 7, 8, 9, 10, 11});
  expect_values(xv, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});  // the input is untouched
  expect_error<TypeError>([&] { set_subtensor(x * 2.0, v); }, {"set_subtensor", "indexing result"});
}

TEST(Subtensor, Gradients) {
  for (DType dt : {f64, f32}) {
    Tensor x = random_tensor({4, 5}, dt);
    Tensor y = random_tensor({5}, dt, -1, 1, 3);
    Tensor idx = Tensor::from(std::vector<int64_t>{3, 1, 3});
    verify_grad([](std::vector<Var> v) { return v[0][2] * 3.0; }, {x});
    verify_grad([](std::vector<Var> v) { return slice(v[0], 1, 4, 0, -2); }, {x});
    verify_grad([&](std::vector<Var> v) { return take(v[0], constant(idx)); }, {x});
    verify_grad([](std::vector<Var> v) { return set_subtensor(v[0][1], v[1]); }, {x, y});
    verify_grad([](std::vector<Var> v) { return inc_subtensor(slice(v[0], 0, 1, 3), v[1]); }, {x, y});
    verify_grad([&](std::vector<Var> v) { return inc_subtensor(take(v[0], constant(idx)), v[1]); }, {x, y});
    verify_grad([&](std::vector<Var> v) { return set_subtensor(take(v[0], constant(idx)), v[1]); }, {x, y});
  }
}

// one_hot (issue 15): NumPy's eye(n, dtype)[indices].

TEST(Subtensor, OneHotOfVectorsAndMatricesOfIndices) {
  Var i = vector("i", i64);
  Tensor h = eval1({i}, one_hot(i, 4), {Tensor::from(std::vector<int64_t>{2, 0, -1, 3})});
  EXPECT_EQ(h.dtype(), f32);
  EXPECT_EQ(h.shape(), (Shape{4, 4}));
  expect_values(h, {0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1}, 0);  // -1 counts from the end
  Var m = matrix("m", i32);
  Tensor hm = eval1({m}, one_hot(m, 3, i64), {Tensor::from(std::vector<int32_t>{1, 2, 0, 1}, {2, 2})});
  EXPECT_EQ(hm.dtype(), i64);
  EXPECT_EQ(hm.shape(), (Shape{2, 2, 3}));
  expect_values(hm, {0, 1, 0, 0, 0, 1, 1, 0, 0, 0, 1, 0}, 0);
  // Strided indices, b8 and f64 results, no indices at all.
  Var t = matrix("t", i64);
  expect_values(eval1({t}, one_hot(transpose(t), 2, b8), {Tensor::from(std::vector<int64_t>{0, 1, 1, 0}, {2, 2})}),
                {1, 0, 0, 1, 0, 1, 1, 0}, 0);
  EXPECT_EQ(eval1({i}, one_hot(i, 5, f64), {Tensor::zeros({0}, i64)}).shape(), (Shape{0, 5}));
  EXPECT_EQ(eval1({i}, one_hot(i, 0), {Tensor::zeros({0}, i64)}).shape(), (Shape{0, 0}));
}

TEST(Subtensor, OneHotRefusesBadIndicesClearly) {
  Var i = vector("i", i64);
  Function f = function({i}, {one_hot(i, 3)});
  expect_error<ShapeError>([&] { f(Tensor::from(std::vector<int64_t>{0, 3})); }, {"one_hot", "index 3", "out of bounds", "3 classes"});
  expect_error<ShapeError>([&] { f(Tensor::from(std::vector<int64_t>{-4})); }, {"one_hot", "index -4"});
  expect_error<TypeError>([&] { one_hot(vector("x", f32), 3); }, {"one_hot", "integers", "f32"});
  expect_error<TypeError>([&] { one_hot(i, -1); }, {"one_hot", "-1"});
  // No gradient reaches the indices, and a one-hot target differentiates with the rest.
  Var z = matrix("z", f64);
  Var cost = sum(one_hot(i, 3, f64) * log_softmax(z));
  Function g = function({z, i}, {grad(cost, z)});
  EXPECT_EQ(g(Tensor::zeros({2, 3}, f64), Tensor::from(std::vector<int64_t>{0, 2}))[0].shape(), (Shape{2, 3}));
}

TEST(Subtensor, EagerOneHot) {
  expect_values(one_hot(Tensor::from(std::vector<int64_t>{1, 0}), 2), {0, 1, 1, 0}, 0);
}

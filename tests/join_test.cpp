#include <cmath>
#include <functional>

#include "test_util.hpp"

using namespace kiln;
using namespace kiln::test;

TEST(Join, ConcatenateAndStack) {
  Var a = matrix("a", f64), b = matrix("b", f64);
  Tensor av = Tensor::from({1.0, 2.0}, {1, 2}), bv = Tensor::from({3.0, 4.0, 5.0, 6.0}, {2, 2});
  auto o = eval({a, b}, {concatenate({a, b}), concatenate({b, b}, 1), stack({b, b}), stack({b, b}, -1)}, {av, bv});
  EXPECT_EQ(o[0].shape(), (Shape{3, 2}));
  expect_values(o[0], {1, 2, 3, 4, 5, 6});
  expect_values(o[1], {3, 4, 3, 4, 5, 6, 5, 6});
  EXPECT_EQ(o[2].shape(), (Shape{2, 2, 2}));
  EXPECT_EQ(o[3].shape(), (Shape{2, 2, 2}));
  expect_values(o[3], {3, 3, 4, 4, 5, 5, 6, 6});
}

TEST(Join, PromotesDtypes) {
  Var a = vector("a", i32), b = vector("b", f64);
  Tensor v = eval1({a, b}, concatenate({a, b}), {Tensor::from(std::vector<int32_t>{1}), Tensor::from({2.5}, {1})});
  EXPECT_EQ(v.dtype(), f64);
  expect_values(v, {1, 2.5});
}

TEST(Join, Errors) {
  Var a = matrix("a"), b = matrix("b");
  Function f = function({a, b}, {concatenate({a, b})});
  expect_error<ShapeError>([&] { f(Tensor::zeros({1, 2}), Tensor::zeros({1, 3})); }, {"concatenate", "(1,3)", "must match"});
  expect_error<TypeError>([&] { concatenate({a, vector("v")}); }, {"ndim"});
  expect_error<TypeError>([] { concatenate({}); }, {"at least one"});
}

TEST(Join, Gradients) {
  for (DType dt : {f64, f32}) {
    verify_grad([](std::vector<Var> v) { return concatenate({v[0], v[1], v[0]}, 1); },
                {random_tensor({2, 3}, dt), random_tensor({2, 1}, dt, -1, 1, 5)});
    verify_grad([](std::vector<Var> v) { return stack({v[0], v[1] * 2.0}); }, {random_tensor({3}, dt), random_tensor({3}, dt, -1, 1, 2)});
  }
}

// tile, repeat, pad (issue 15): NumPy's values, with gradients both ways.

TEST(Join, TileAsNumPy) {
  Var x = matrix("x", f64);
  const Tensor xv = Tensor::from({1.0, 2.0, 3.0, 4.0, 5.0, 6.0}, {2, 3});
  Tensor t = eval1({x}, tile(x, {2, 2}), {xv});
  EXPECT_EQ(t.shape(), (Shape{4, 6}));
  expect_values(t, {1, 2, 3, 1, 2, 3, 4, 5, 6, 4, 5, 6, 1, 2, 3, 1, 2, 3, 4, 5, 6, 4, 5, 6}, 0);
  EXPECT_EQ(eval1({x}, tile(x, {2}), {xv}).shape(), (Shape{2, 6}));  // reps padded with 1 on the left
  Tensor t3 = eval1({x}, tile(x, {2, 1, 1}), {xv});                    // x gains an axis on the left
  EXPECT_EQ(t3.shape(), (Shape{2, 2, 3}));
  expect_values(t3, {1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5, 6}, 0);
  EXPECT_EQ(eval1({x}, tile(x, {0, 2}), {xv}).shape(), (Shape{0, 6}));
  EXPECT_EQ(eval1({x}, tile(x, {3, 1}), {Tensor::zeros({0, 3}, f64)}).shape(), (Shape{0, 3}));
  // Strided input, integers and bools.
  Var n = matrix("n", i32);
  Tensor tn = eval1({n}, tile(transpose(n), {1, 2}), {Tensor::from(std::vector<int32_t>{1, 2, 3, 4}, {2, 2})});
  EXPECT_EQ(tn.dtype(), i32);
  expect_values(tn, {1, 3, 1, 3, 2, 4, 2, 4}, 0);
  Var b = vector("b", b8);
  expect_values(eval1({b}, tile(b, {3}), {Tensor::from(std::vector<bool>{true, false})}), {1, 0, 1, 0, 1, 0}, 0);
  expect_error<TypeError>([&] { tile(x, {2, -1}); }, {"tile", "-1"});
}

TEST(Join, RepeatAsNumPy) {
  Var x = matrix("x", f64);
  const Tensor xv = Tensor::from({1.0, 2.0, 3.0, 4.0, 5.0, 6.0}, {2, 3});
  expect_values(eval1({x}, repeat(x, 2, 0), {xv}), {1, 2, 3, 1, 2, 3, 4, 5, 6, 4, 5, 6}, 0);
  Tensor r = eval1({x}, repeat(x, 2, -1), {xv});
  EXPECT_EQ(r.shape(), (Shape{2, 6}));
  expect_values(r, {1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6}, 0);
  Tensor flat = eval1({x}, repeat(x, 2), {xv});  // no axis: the flattened values
  EXPECT_EQ(flat.shape(), (Shape{12}));
  expect_values(flat, {1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6}, 0);
  EXPECT_EQ(eval1({x}, repeat(x, 0, 1), {xv}).shape(), (Shape{2, 0}));
  Var n = vector("n", i64);
  expect_values(eval1({n}, repeat(n, 3), {Tensor::from(std::vector<int64_t>{7, -1})}), {7, 7, 7, -1, -1, -1}, 0);
  expect_error<TypeError>([&] { repeat(x, -2, 0); }, {"repeat", "-2"});
  expect_error<TypeError>([&] { repeat(x, 2, 2); }, {"repeat", "axis 2", "out of range"});
}

TEST(Join, PadAsNumPyConstantMode) {
  Var x = matrix("x", f64);
  const Tensor xv = Tensor::from({1.0, 2.0, 3.0, 4.0}, {2, 2});
  Tensor p = eval1({x}, pad(x, {{1, 0}, {0, 2}}, -1.0), {xv});
  EXPECT_EQ(p.shape(), (Shape{3, 4}));
  expect_values(p, {-1, -1, -1, -1, 1, 2, -1, -1, 3, 4, -1, -1}, 0);
  Tensor all = eval1({x}, pad(x, {{1, 1}}), {xv});  // one pair for every axis, zeros
  EXPECT_EQ(all.shape(), (Shape{4, 4}));
  expect_values(all, {0, 0, 0, 0, 0, 1, 2, 0, 0, 3, 4, 0, 0, 0, 0, 0}, 0);
  // An empty axis pads too; integers take the value as their dtype.
  EXPECT_EQ(eval1({x}, pad(x, {{1, 1}, {0, 0}}), {Tensor::zeros({0, 3}, f64)}).shape(), (Shape{2, 3}));
  Var n = vector("n", i32);
  Tensor pn = eval1({n}, pad(n, {{2, 1}}, 7), {Tensor::from(std::vector<int32_t>{1, 2})});
  EXPECT_EQ(pn.dtype(), i32);
  expect_values(pn, {7, 7, 1, 2, 7}, 0);
  Var b = vector("b", b8);
  expect_values(eval1({b}, pad(b, {{1, 0}}, 1), {Tensor::from(std::vector<bool>{false})}), {1, 0}, 0);
  expect_error<TypeError>([&] { pad(x, {{1, 1}, {1, 1}, {1, 1}}); }, {"pad", "3 pairs", "f64[?,?]"});
  expect_error<TypeError>([&] { pad(x, {{-1, 0}, {0, 0}}); }, {"pad", "-1"});
  expect_error<TypeError>([&] { pad(n, {{1, 1}}, std::nan("")); }, {"pad", "i32"});
}

TEST(Join, TileRepeatPadGradientsAndRop) {
  const Tensor m = random_tensor({2, 3}, f64, -1, 1, 5);
  using V = std::vector<Var>;
  for (const auto& fn : std::vector<std::function<Var(V)>>{
           [](V v) { return tile(v[0], {2, 3}); }, [](V v) { return tile(v[0], {2, 1, 2}); },
           [](V v) { return repeat(v[0], 3, 0); }, [](V v) { return repeat(v[0], 2); },
           [](V v) { return pad(v[0], {{1, 2}, {3, 0}}, 0.5); }, [](V v) { return pad(tile(v[0], {1, 2}), {{0, 1}}); }}) {
    verify_grad(fn, {m});
    verify_rop(fn, {m});
  }
  // Each element of x reaches as many outputs as it was copied to.
  Var x = matrix("x", f64);
  expect_values(eval1({x}, grad(sum(tile(x, {2, 3})), x), {m}), std::vector<double>(6, 6.0), 0);
  expect_values(eval1({x}, grad(sum(repeat(x, 4, 1)), x), {m}), std::vector<double>(6, 4.0), 0);
  expect_values(eval1({x}, grad(sum(pad(x, {{2, 2}}, 9.0)), x), {m}), std::vector<double>(6, 1.0), 0);
}

TEST(Join, EagerTileRepeat) {
  const Tensor v = Tensor::from({1.0, 2.0}, {2});
  expect_values(tile(v, {2}), {1, 2, 1, 2}, 0);
  expect_values(repeat(v, 2), {1, 1, 2, 2}, 0);
}

// Repetitions too large for memory are the op's error at the user's line; it named an internal
// b8 tensor of kiln's own.
TEST(Join, TileRepeatAndPadTooLargeForMemoryNameTheOpAndTheLine) {
  Var x = matrix("x", f64);
  expect_error<MemoryError>([&] { tile(x, {1000000000, 1000000000}); }, {"tile:", "1e+18 elements", "join_test.cpp"});
  expect_error<MemoryError>([&] { repeat(x, 1000000000000LL, 0); }, {"repeat:", "join_test.cpp"});
  expect_error<MemoryError>([&] { pad(x, {{1000000000000LL, 0}, {0, 0}}); }, {"pad:", "join_test.cpp"});
}

TEST(Join, StackErrorsNameStackAndTheInputsShapes) {
  // The NumPy trial: stacking (3,4) and (4,3) reported concatenate's (1,3,4) and (1,4,3), and an
  // axis out of range gave no range.
  Var a = matrix("a", f64), b = matrix("b", f64);
  Function f = function({a, b}, {stack({a, b})});
  expect_error<ShapeError>([&] { f(Tensor::ones({3, 4}, f64), Tensor::ones({4, 3}, f64)); },
                           {"stack: input 1 (as input 0) has shape (4,3) but must have shape (3,4)", "join_test.cpp"});
  expect_error<TypeError>([&] { stack({a, a}, 3); }, {"stack: axis 3", "[-3, 2]"});
  expect_values(f(Tensor::ones({1, 2}, f64), Tensor::zeros({1, 2}, f64))[0], {1, 1, 0, 0});
}

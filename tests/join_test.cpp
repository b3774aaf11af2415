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

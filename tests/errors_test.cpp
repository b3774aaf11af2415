// Every user-facing message not covered beside its op: each names the op, shapes/dtypes, and line.
#include "test_util.hpp"

using namespace kiln;
using namespace kiln::test;

TEST(Errors, HierarchyDerivesFromError) {
  EXPECT_THROW(throw TypeError("t"), Error);
  EXPECT_THROW(throw ShapeError("s"), Error);
  EXPECT_THROW(throw GradError("g"), Error);
  EXPECT_THROW(throw DisposedError("d"), std::runtime_error);
}

TEST(Errors, ElementwiseTypeErrorNamesOpAndLine) {
  expect_error<TypeError>([&] { exp(Var()); }, {"exp", "empty Var", "errors_test.cpp"});
}

TEST(Errors, DisposedInputIsRefused) {
  Var x = vector("x");
  Function f = function({x}, {x * 2.0});
  Tensor t = Tensor::ones({2});
  t.dispose();
  expect_error<DisposedError>([&] { f(t); }, {"input 0", "disposed"});
}

TEST(Errors, SliceStepZero) {
  expect_error<TypeError>([] { slice(vector("v"), 0, 0, 1, 0); }, {"step cannot be zero", "errors_test.cpp"});
  expect_error<TypeError>([] { slice(vector("v"), 3); }, {"axis 3", "out of range"});
}

TEST(Errors, SoftmaxAxis) {
  expect_error<TypeError>([] { softmax(matrix("m"), 2); }, {"softmax", "axis 2", "f32[?,?]", "errors_test.cpp"});
}

TEST(Errors, DimshufflePatternAxisMissing) {
  expect_error<TypeError>([] { dimshuffle(vector("v"), {1}); }, {"dimshuffle", "axis 1 does not exist"});
}

TEST(Errors, StackAndConcatenateAxes) {
  expect_error<TypeError>([] { stack({vector("a")}, 3); }, {"stack", "axis 3"});
  expect_error<TypeError>([] { concatenate({scalar("a")}); }, {"0-d", "use stack"});
}

TEST(Errors, FlattenOutdim) {
  expect_error<TypeError>([] { flatten(matrix("m"), 0); }, {"flatten", "at least 1"});
  expect_error<TypeError>([] { flatten(matrix("m"), 3); }, {"cannot flatten", "3 dimensions"});
}

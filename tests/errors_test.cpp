// Every user-facing message not covered beside its op: each names the op, shapes/dtypes, and line.
#include <sstream>
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

// Issue 9, item 12: nodes built by grad and by rewrites carried kiln's own source lines
// ("true_div (built at elemwise.cpp:311)"); they carry the user's line of the node they come from.
TEST(Errors, GradientAndRewrittenNodesCarryTheUsersLine) {
  Var x = vector("x", f64), idx = vector("idx", i64);
  Var taken = take(x, idx);  const std::string line = "errors_test.cpp:" + std::to_string(__LINE__);
  Var v = vector("v", f64);
  Function g = function({x, idx, v}, {Lop({taken}, {x}, {v})[0]});  // only gradient nodes run
  expect_error<Error>([&] { g(Tensor::from({1.0, 2.0}, {2}), Tensor::from(std::vector<int64_t>{5}), Tensor::zeros({1}, f64)); },
                      {"inc_take", "in the gradient of the node built at " + line});
  const std::string text = g.graph_text();
  EXPECT_NE(text.find(line + " (gradient)"), std::string::npos) << text;
  for (const char* kiln_file : {"elemwise.cpp", "grad.cpp", "subtensor.cpp", "reduce.cpp"})
    EXPECT_EQ(text.find(kiln_file), std::string::npos) << text;

  Var y = log(1.0 + exp(x));  const std::string stable_line = "errors_test.cpp:" + std::to_string(__LINE__);
  Function s = function({x}, {y, grad(sum(y), x)});
  const std::string stable = s.graph_text();
  EXPECT_NE(stable.find("softplus"), std::string::npos) << stable;
  EXPECT_NE(stable.find(stable_line), std::string::npos) << stable;
  for (const char* kiln_file : {"stabilize.cpp", "elemwise.cpp", "grad.cpp", "canonicalize.cpp", "specialize.cpp"})
    EXPECT_EQ(stable.find(kiln_file), std::string::npos) << stable;
}

// Found by the robustness trial (ASan/UBSan): each crashed, read out of bounds or overflowed.
TEST(Errors, EmptyHandlesAndOutOfRangeArgumentsAreClearErrors) {
  expect_error<TypeError>([] { (void)Var().name(); }, {"empty"});
  expect_error<TypeError>([] { ifelse(scalar("c"), Var(), vector("b")); }, {"empty Var"});
  expect_error<TypeError>([] { std::ostringstream o; debugprint(Var(), o); }, {"debugprint", "empty Var"});
  expect_error<TypeError>([] { to_dot(Var()); }, {"to_dot", "empty Var"});
  expect_error<TypeError>([] { save_shared("/nonexistent/x.npz", {Shared()}); }, {"empty"});
  expect_error<ShapeError>([] { (void)Tensor::ones({3}).item_as_double(3); }, {"item_as_double", "index 3", "f32(3,)"});
  expect_error<ShapeError>([] { (void)Tensor::ones({3}).item_as_double(-1); }, {"index -1"});
  expect_error<Error>([] { Tensor::view_of(nullptr, f32, {4}, {1}, 0); }, {"view_of", "storage is null"});
  expect_error<ShapeError>([] { Tensor::zeros({4}).view({2}, {INT64_MAX}, 0); }, {"outside its storage"});
  Var x = vector("x");
  Function outer = function({x}, {sum(dimshuffle(x, {0, -1}) * dimshuffle(x, {-1, 0}) + 1.0)});
  expect_error<ShapeError>([&] { outer.memory_report({{int64_t{1} << 40}}); }, {"more elements than a 64-bit count"});
}

// Integer arithmetic wraps around as NumPy's (it was signed overflow, undefined behaviour).
TEST(Errors, IntegerOverflowWrapsAroundAsNumPy) {
  const Tensor big = Tensor::from(std::vector<int64_t>{INT64_MAX, INT64_MIN});
  EXPECT_EQ((big + int64_t{1}).to_vector<int64_t>(), (std::vector<int64_t>{INT64_MIN, INT64_MIN + 1}));
  EXPECT_EQ((-big).to_vector<int64_t>(), (std::vector<int64_t>{-INT64_MAX, INT64_MIN}));
  EXPECT_EQ(abs(big).to_vector<int64_t>(), (std::vector<int64_t>{INT64_MAX, INT64_MIN}));
  EXPECT_EQ((big * int64_t{2}).to_vector<int64_t>(), (std::vector<int64_t>{-2, 0}));
  EXPECT_EQ(sum(Tensor::from(std::vector<int64_t>{INT64_MAX, INT64_MAX})).item<int64_t>(), -2);
  EXPECT_EQ(cumsum(Tensor::from(std::vector<int64_t>{INT64_MAX, 1})).to_vector<int64_t>(), (std::vector<int64_t>{INT64_MAX, INT64_MIN}));
  EXPECT_EQ((Tensor::from(std::vector<int32_t>{INT32_MAX}) + 1).to_vector<int32_t>(), (std::vector<int32_t>{INT32_MIN}));
}

// Found by the robustness trial: these errors named kiln's own source lines (nnet.cpp,
// jacobian.cpp) instead of the user's.
TEST(Errors, ErrorsInsideLibraryBuiltGraphsNameTheUsersLine) {
  Var p = matrix("p", f64), t = matrix("t", f64);
  Function f = function({p, t}, {categorical_crossentropy(p, t)});
  auto message_of = [](auto call) {
    try {
      call();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string crossentropy = message_of([&] { f(Tensor::ones({3, 4}, f64), Tensor::ones({3, 5}, f64)); });
  EXPECT_NE(crossentropy.find("in mul, built at errors_test.cpp"), std::string::npos) << crossentropy;
  EXPECT_EQ(crossentropy.find("nnet.cpp"), std::string::npos) << crossentropy;
  Var x = vector("x", f64);
  Function j = function({x}, {jacobian(x * 2.0, x, JacobianOptions{.vectorize = true})});
  const std::string jacobian_memory = message_of([&] { j(Tensor::ones({int64_t{1} << 22}, f64)); });
  EXPECT_NE(jacobian_memory.find("out of memory"), std::string::npos) << jacobian_memory;
  EXPECT_EQ(jacobian_memory.find("jacobian.cpp"), std::string::npos) << jacobian_memory;
}

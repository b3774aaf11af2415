// conv2d (issue 15): values against a direct loop for every option, gradients and tangents
// against finite differences, errors, and a steady training call.
#include "kiln/conv.hpp"

#include <functional>

#include "conv_reference.hpp"
#include "count_operator_new.hpp"
#include "test_util.hpp"

using namespace kiln;
using namespace kiln::test;

namespace {

struct ConvCase {
  Shape x, w;
  Conv2dOptions options;
  int64_t pad_top, pad_left, out_h, out_w;  // what the options mean for these shapes
};

std::vector<ConvCase> conv_cases() {
  return {
      {{2, 3, 7, 6}, {4, 3, 3, 3}, {}, 0, 0, 5, 4},
      {{1, 1, 5, 5}, {2, 1, 2, 2}, {.padding = Padding::full}, 1, 1, 6, 6},
      {{2, 2, 7, 8}, {3, 2, 3, 2}, {.stride = {2, 3}, .padding = Padding::same}, 1, 0, 4, 3},
      {{1, 2, 6, 6}, {2, 2, 2, 2}, {.padding = Padding::same}, 0, 0, 6, 6},  // even kernel: the extra row at the bottom
      {{2, 4, 9, 7}, {6, 2, 3, 3}, {.stride = {2, 1}, .padding = Padding(1, 2), .groups = 2}, 1, 2, 5, 9},
      {{1, 3, 9, 9}, {2, 3, 3, 2}, {.dilation = {2, 3}}, 0, 0, 5, 6},
      {{2, 2, 6, 5}, {2, 2, 3, 3}, {.stride = {2, 2}, .padding = Padding::sides(0, 2, 1, 0), .dilation = {1, 2}}, 0, 1, 3, 1},
      {{3, 4, 4, 4}, {4, 1, 1, 1}, {.groups = 4}, 0, 0, 4, 4},  // depthwise 1x1
      // Dilated taps that fall wholly in the padding beside a narrow image, in a batch.
      {{2, 1, 1, 1}, {2, 1, 1, 3}, {.padding = Padding(0, 2), .dilation = {1, 2}}, 0, 2, 1, 1},
      {{4, 2, 3, 1}, {2, 2, 2, 3}, {.padding = Padding(1, 3), .dilation = {2, 3}}, 1, 3, 3, 1},
  };
}

}  // namespace

TEST(Conv2d, ValuesMatchADirectLoopForEveryOption) {
  for (DType dtype : {f64, f32}) {
    uint64_t seed = 1;
    for (const ConvCase& c : conv_cases()) {
      Var x = tensor4("x", dtype), w = tensor4("w", dtype);
      const Tensor xv = random_tensor(c.x, dtype, -1, 1, seed++), wv = random_tensor(c.w, dtype, -1, 1, seed++);
      const Tensor y = eval1({x, w}, conv2d(x, w, c.options), {xv, wv});
      const Shape want_shape{c.x[0], c.w[0], c.out_h, c.out_w};
      ASSERT_EQ(y.shape(), want_shape) << shape_str(c.x) << " " << shape_str(c.w);
      expect_values(y, direct_conv(xv, wv, c.options.stride, c.options.dilation, c.options.groups, c.pad_top, c.pad_left, c.out_h, c.out_w),
                    dtype == f32 ? 1e-5 : 1e-12);
    }
  }
}

TEST(Conv2d, ReadsAnyLayoutOfInputAndFilters) {
  // x given as N x H x W x C and shuffled to N x C x H x W; w as a transposed view.
  Var xs = tensor4("xs", f64), ws = tensor4("ws", f64);
  const Tensor xv = random_tensor({2, 6, 5, 3}, f64, -1, 1, 3), wv = random_tensor({3, 3, 3, 4}, f64, -1, 1, 4);
  Var x = dimshuffle(xs, {0, 3, 1, 2}), w = dimshuffle(ws, {3, 2, 0, 1});
  const Tensor y = eval1({xs, ws}, conv2d(x, w, {.padding = 1}), {xv, wv});
  const Tensor xc = eval1({xs}, dimshuffle(xs, {0, 3, 1, 2}) + 0.0, {xv});
  const Tensor wc = eval1({ws}, dimshuffle(ws, {3, 2, 0, 1}) + 0.0, {wv});
  expect_values(y, direct_conv(xc, wc, {1, 1}, {1, 1}, 1, 1, 1, 6, 5), 1e-12);
}

TEST(Conv2d, GradientsAndTangentsMatchFiniteDifferences) {
  for (const ConvCase& c : conv_cases()) {
    const Conv2dOptions options = c.options;
    auto fn = [options](std::vector<Var> v) { return conv2d(v[0], v[1], options); };
    const std::vector<Tensor> at{random_tensor(c.x, f64, -1, 1, 11), random_tensor(c.w, f64, -1, 1, 12)};
    EXPECT_NO_THROW(verify_grad(fn, at)) << shape_str(c.x) << " " << shape_str(c.w);
    EXPECT_NO_THROW(verify_rop(fn, at)) << shape_str(c.x) << " " << shape_str(c.w);
  }
}

TEST(Conv2d, SecondOrderDerivativesMatchFiniteDifferences) {
  // The gradients' own gradients and tangents: the L_op of conv2d_grad_input / _filters.
  const Conv2dOptions options{.stride = {2, 1}, .padding = Padding::same, .groups = 2};
  auto fn = [options](std::vector<Var> v) {
    Var y = conv2d(v[0], v[1], options);
    std::vector<Var> g = grad(sum(tanh(y) * y), {v[0], v[1]});
    return sum(square(g[0])) + sum(g[1] * g[1] * 0.5);
  };
  const std::vector<Tensor> at{random_tensor({2, 4, 5, 5}, f64, -1, 1, 21), random_tensor({2, 2, 3, 3}, f64, -1, 1, 22)};
  EXPECT_NO_THROW(verify_grad(fn, at));
  EXPECT_NO_THROW(verify_rop(fn, at));
}

TEST(Conv2d, BadShapesAndDtypesNameTheOpAndTheShapes) {
  Var x = tensor4("x", f32), w = tensor4("w", f32);
  auto message = [&](const Tensor& xv, const Tensor& wv, const Conv2dOptions& options) -> std::string {
    try {
      eval1({x, w}, conv2d(x, w, options), {xv, wv});
    } catch (const ShapeError& e) {
      return e.what();
    }
    return "no error";
  };
  const Tensor img = random_tensor({1, 3, 5, 5}, f32);
  std::string m = message(img, random_tensor({2, 4, 3, 3}, f32), {});
  EXPECT_NE(m.find("conv2d"), std::string::npos) << m;
  EXPECT_NE(m.find("(1,3,5,5)"), std::string::npos) << m;
  EXPECT_NE(m.find("(2,4,3,3)"), std::string::npos) << m;
  m = message(img, random_tensor({2, 3, 7, 3}, f32), {});
  EXPECT_NE(m.find("more than the padded input"), std::string::npos) << m;
  m = message(img, random_tensor({3, 1, 3, 3}, f32), {.groups = 3});
  EXPECT_EQ(m, "no error");
  m = message(img, random_tensor({4, 1, 3, 3}, f32), {.groups = 3});
  EXPECT_NE(m.find("divide by the groups"), std::string::npos) << m;
  EXPECT_THROW(conv2d(matrix("m", f32), w), TypeError);
  EXPECT_THROW(conv2d(x, tensor4("w64", f64)), TypeError);
  EXPECT_THROW(conv2d(tensor4("i", i32), tensor4("wi", i32)), TypeError);
  EXPECT_THROW(conv2d(x, w, {.stride = {0, 1}}), ShapeError);
  EXPECT_THROW(conv2d(x, w, {.padding = Padding::sides(0, -1, 0, 0)}), ShapeError);
  // A dilation near INT64_MAX wrapped the kernel's extent around: a 3-row kernel "fit" a 2-row
  // input and gave a 4-row output.
  expect_error<ShapeError>([&] { conv2d(x, w, {.dilation = {INT64_MAX, 1}}); }, {"conv2d", "dilation", "2147483647", "conv_test.cpp"});
  expect_error<ShapeError>([&] { conv2d(x, w, {.stride = {1, int64_t{1} << 40}}); }, {"conv2d", "stride"});
  expect_error<ShapeError>([&] { conv2d(x, w, {.padding = Padding(INT64_MAX)}); }, {"conv2d", "padding"});
  m = message(random_tensor({1, 1, 2, 2}, f32), random_tensor({1, 1, 3, 1}, f32), {.dilation = {int64_t{1} << 30, 1}});
  EXPECT_NE(m.find("more than the padded input"), std::string::npos) << m;
  // The largest padding accepted, on a 1x1 image: an output too large to count names the op and
  // the user's line.
  m = message(random_tensor({1, 1, 1, 1}, f32), random_tensor({1, 1, 1, 1}, f32), {.padding = Padding(2147483647)});
  for (const char* part : {"64-bit count", "conv2d", "f32(1,1,1,1)", "conv_test.cpp"}) EXPECT_NE(m.find(part), std::string::npos) << m;
}

TEST(Conv2d, ASteadyTrainingStepAllocatesNothingAndMatchesAtOneAndTwoThreads) {
  Var x = tensor4("x", f32);
  const Tensor w0 = random_tensor({8, 3, 3, 3}, f32, -0.3, 0.3, 31);
  Shared w = shared(w0, "w");
  Var loss = mean(square(relu(conv2d(x, w, {.padding = Padding::same}))));
  Var gw = grad(loss, {Var(w)})[0];
  Function step = function({x}, {Out(loss, {.borrow = true})}, {.updates = {{w, w - 0.1 * gw}}, .keep_buffers = true});
  const std::vector<Tensor> args{random_tensor({6, 3, 10, 10}, f32, -1, 1, 32)};
  std::vector<double> losses[2];
  for (int threads : {1, 2}) {
    ThreadsForScope scope(threads);
    w.set_value(w0);
    std::vector<Tensor> outputs;
    for (int i = 0; i < 2; ++i) step.call(args, outputs);
    losses[threads - 1].reserve(5);
    const int64_t before = allocations_so_far();
    for (int i = 0; i < 5; ++i) {
      step.call(args, outputs);
      losses[threads - 1].push_back(outputs[0].item<double>());
    }
    EXPECT_EQ(allocations_so_far() - before, 0) << threads << " threads";
  }
  for (size_t i = 0; i < losses[0].size(); ++i) EXPECT_NEAR(losses[0][i], losses[1][i], 1e-6 * std::fabs(losses[0][i]));
  EXPECT_LT(losses[0].back(), losses[0].front());
}

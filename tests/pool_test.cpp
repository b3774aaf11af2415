// max_pool2d and avg_pool2d (include/kiln/conv.hpp): values and gradients against a plain reference
// (tests/pool_reference.hpp) for every option, layout, dtype and thread count; ties and NaN; the
// errors; verify_grad and verify_rop to second order; compiled training steps.
#include <functional>
#include <limits>

#include "ops/pool.hpp"
#include "pool_reference.hpp"
#include "test_util.hpp"

using namespace kiln;
using namespace kiln::test;

namespace {

using Window = std::array<int64_t, 2>;

struct PoolCase {
  std::string name;
  Pool2dOptions options;
  Shape shape;  // N x C x H x W
};

std::vector<PoolCase> pool_cases() {
  return {
      {"2x2 (the defaults)", {}, {2, 3, 8, 8}},
      {"2x2 on odd sizes, last row and column dropped", {}, {2, 2, 9, 7}},
      {"2x2 on odd sizes, partial windows kept", {.ignore_border = false}, {2, 2, 5, 7}},
      {"2x2 on an odd width, partial windows kept", {.ignore_border = false}, {2, 2, 6, 7}},
      {"2x2 on an odd width, last column dropped", {}, {2, 2, 6, 7}},
      {"3x3 stride 1", {.window = {3, 3}, .stride = Window{1, 1}}, {2, 3, 6, 7}},
      {"2x3 stride 1x2", {.window = {2, 3}, .stride = Window{1, 2}}, {1, 2, 5, 8}},
      {"2x2 stride 3 (gaps)", {.window = {2, 2}, .stride = Window{3, 3}}, {2, 1, 8, 7}},
      {"3x3 stride 2 padding 1", {.window = {3, 3}, .stride = Window{2, 2}, .padding = {1, 1}}, {2, 2, 7, 6}},
      {"3x3 stride 2 padding 1 partial windows kept",
       {.window = {3, 3}, .stride = Window{2, 2}, .padding = {1, 1}, .ignore_border = false}, {2, 2, 6, 6}},
      {"3x3 stride 2 padding 1 partial windows kept, padding not counted",
       {.window = {3, 3}, .stride = Window{2, 2}, .padding = {1, 1}, .ignore_border = false, .count_include_pad = false}, {2, 2, 6, 7}},
      {"3x2 stride 2x3 padding 1x1 partial windows kept, padding not counted",
       {.window = {3, 2}, .stride = Window{2, 3}, .padding = {1, 1}, .ignore_border = false, .count_include_pad = false}, {1, 3, 7, 8}},
      {"2x2 stride 1 padding 1, padding not counted",
       {.window = {2, 2}, .stride = Window{1, 1}, .padding = {1, 1}, .count_include_pad = false}, {2, 2, 4, 5}},
      {"2x2 padding 1 partial windows kept, none starting in the right padding",
       {.padding = {1, 1}, .ignore_border = false}, {1, 2, 5, 5}},
      {"3x1 stride 1x1 padding 1x0", {.window = {3, 1}, .stride = Window{1, 1}, .padding = {1, 0}}, {1, 2, 4, 3}},
  };
}

// How the input reaches the pooling: as the argument itself, as a dimshuffled N x H x W x C
// argument, or as every other column of a wider argument (both views, read in place).
enum class Layout { contiguous, channels_last, every_other_column };
const char* layout_name(Layout l) {
  switch (l) {
    case Layout::contiguous: return "contiguous";
    case Layout::channels_last: return "channels last";
    case Layout::every_other_column: return "every other column";
  }
  return "?";
}

// t's values in a fresh row-major tensor (offset 0), to view them in another order.
Tensor fresh(const Tensor& t) { return Tensor::from(t.to_vector<double>(), t.shape()); }

struct LaidOut {
  Var argument, pooled_input;
  Tensor value;
  std::function<std::vector<double>(const Tensor&)> in_nchw;  // a gradient of `argument`, as N x C x H x W values
};

LaidOut lay_out(const Tensor& nchw, Layout layout) {
  const Shape& s = nchw.shape();
  const int64_t N = s[0], C = s[1], H = s[2], W = s[3];
  const DType dtype = nchw.dtype();
  switch (layout) {
    case Layout::channels_last: {
      Var x = tensor4("x", dtype);
      Tensor value = nchw.view({N, H, W, C}, {C * H * W, W, 1, H * W}, 0).clone();
      return {x, dimshuffle(x, {0, 3, 1, 2}), value, [=](const Tensor& g) {
                return fresh(g).view({N, C, H, W}, {H * W * C, 1, W * C, C}, 0).to_vector<double>();
              }};
    }
    case Layout::every_other_column: {
      Var x = tensor4("x", dtype);
      Tensor wide = Tensor::full({N, C, H, 2 * W}, 99.0, dtype);
      wide.view({N, C, H, W}, {C * H * 2 * W, H * 2 * W, 2 * W, 2}, 0).copy_from(nchw);
      return {x, slice(x, 3, 0, std::nullopt, 2), wide, [=](const Tensor& g) {
                return fresh(g).view({N, C, H, W}, {C * H * 2 * W, H * 2 * W, 2 * W, 2}, 0).to_vector<double>();
              }};
    }
    case Layout::contiguous: break;
  }
  Var x = tensor4("x", dtype);
  return {x, x, nchw, [](const Tensor& g) { return g.to_vector<double>(); }};
}

// Checks max_pool2d and avg_pool2d of `value` and their gradients (for a random output gradient)
// against the reference.
void check_against_reference(const Pool2dOptions& options, const Tensor& value, Layout layout, const std::string& what) {
  const double tol = value.dtype() == f32 ? 1e-6 : 1e-13;
  const LaidOut in = lay_out(value, layout);
  const std::vector<double> x = value.to_vector<double>();
  for (bool max : {true, false}) {
    const PoolReference shape_only = reference_pool(max, x, value.shape(), options);
    const Tensor gy = random_tensor(shape_only.shape, value.dtype(), -1, 1, 11);
    const PoolReference want = reference_pool(max, x, value.shape(), options, gy.to_vector<double>());
    const Var y = max ? max_pool2d(in.pooled_input, options) : avg_pool2d(in.pooled_input, options);
    const Var gx = grad(sum(y * constant(gy)), in.argument);
    const auto got = eval({in.argument}, {y, gx}, {in.value});
    const std::string where = what + (max ? ", max" : ", avg") + ", " + layout_name(layout) + ", " + dtype_name(value.dtype());
    SCOPED_TRACE(where);
    EXPECT_EQ(got[0].shape(), want.shape);
    EXPECT_EQ(got[0].dtype(), value.dtype());
    expect_values(got[0], want.values, tol);
    expect_values(Tensor::from(in.in_nchw(got[1]), value.shape()), want.input_grad, tol);
  }
}

}  // namespace

TEST(Pool, EveryOptionLayoutAndDtypeMatchesTheReference) {
  int checked = 0;
  for (const PoolCase& c : pool_cases())
    for (DType dtype : {f32, f64})
      for (Layout layout : {Layout::contiguous, Layout::channels_last, Layout::every_other_column}) {
        check_against_reference(c.options, random_tensor(c.shape, dtype, -3, 3, 5), layout, c.name);
        ++checked;
      }
  EXPECT_EQ(checked, 90);
}

TEST(Pool, OutputShapesFollowTheBorderRule) {
  Var x = tensor4("x", f64);
  auto pooled_shape = [&](const Pool2dOptions& o, const Shape& s) { return eval1({x}, max_pool2d(x, o), {Tensor::zeros(s, f64)}).shape(); };
  EXPECT_EQ(pooled_shape({}, {1, 1, 5, 5}), (Shape{1, 1, 2, 2}));
  EXPECT_EQ(pooled_shape({.ignore_border = false}, {1, 1, 5, 5}), (Shape{1, 1, 3, 3}));
  // 5 + 2 padding in windows of 2 at stride 2: rounded up 4, but the 4th would start in the right padding.
  EXPECT_EQ(pooled_shape({.padding = {1, 1}, .ignore_border = false}, {1, 1, 5, 5}), (Shape{1, 1, 3, 3}));
  EXPECT_EQ(pooled_shape({.window = {3, 3}, .stride = Window{2, 2}, .padding = {1, 1}, .ignore_border = false}, {1, 1, 6, 6}),
            (Shape{1, 1, 4, 4}));
  EXPECT_EQ(pooled_shape({.window = {3, 3}, .stride = Window{2, 2}, .padding = {1, 1}}, {1, 1, 6, 6}), (Shape{1, 1, 3, 3}));
  EXPECT_EQ(pooled_shape({.window = {2, 3}, .stride = Window{1, 2}}, {3, 4, 5, 8}), (Shape{3, 4, 4, 3}));
  EXPECT_EQ(pooled_shape({.window = {1, 1}}, {1, 2, 3, 4}), (Shape{1, 2, 3, 4}));
  EXPECT_EQ(pooled_shape({}, {0, 3, 4, 4}), (Shape{0, 3, 2, 2}));  // an empty batch pools to an empty batch
}

TEST(Pool, LargeInputsOnOneAndTwoThreadsMatchTheReference) {
  // LeNet's pooling sizes, large enough to run over planes on several threads, and a general
  // window on the same input.
  for (int threads : {1, 2}) {
    ThreadsForScope scope(threads);
    for (const Shape& shape : {Shape{4, 20, 24, 24}, Shape{8, 50, 8, 8}}) {
      const std::string what = shape_str(shape) + ", " + std::to_string(threads) + " threads";
      check_against_reference({}, random_tensor(shape, f32, -1, 1, 8), Layout::contiguous, what);
      check_against_reference({.window = {3, 3}, .stride = Window{2, 2}, .padding = {1, 1}, .ignore_border = false},
                              random_tensor(shape, f64, -1, 1, 9), Layout::channels_last, what);
    }
  }
}

TEST(Pool, MaxPaddingIsMinusInfinityAndAveragePaddingZero) {
  Var x = tensor4("x", f64);
  const Tensor negative = Tensor::from({-1.0, -2.0, -3.0, -4.0}, {1, 1, 2, 2});
  // Every window holds one input element and three padding elements.
  expect_values(eval1({x}, max_pool2d(x, {.padding = {1, 1}}), {negative}), {-1, -2, -3, -4}, 0);
  expect_values(eval1({x}, avg_pool2d(x, {.padding = {1, 1}}), {negative}), {-0.25, -0.5, -0.75, -1}, 0);
  expect_values(eval1({x}, avg_pool2d(x, {.padding = {1, 1}, .count_include_pad = false}), {negative}), {-1, -2, -3, -4}, 0);
}

TEST(Pool, TiedMaximaSendTheGradientToTheFirstInRowMajorOrder) {
  for (DType dtype : {f32, f64}) {
    SCOPED_TRACE(dtype_name(dtype));
    Var x = tensor4("x", dtype);
    const Tensor gy = Tensor::from({10.0, 20.0}, {1, 1, 1, 2}).to(dtype);
    // Window 0 holds 5 twice (row 0 first), window 1 is all 2s.
    const Tensor tied = Tensor::from({1.0, 5.0, 2.0, 2.0, 5.0, 0.0, 2.0, 2.0}, {1, 1, 2, 4}).to(dtype);
    const Var y = max_pool2d(x);
    auto o = eval({x}, {y, grad(sum(y * constant(gy)), x)}, {tied});
    expect_values(o[0], {5, 2}, 0);
    expect_values(o[1], {0, 10, 20, 0, 0, 0, 0, 0}, 0);
    // Overlapping windows (the general loop): each sends its gradient to its own first maximum.
    const Tensor row = Tensor::from({3.0, 3.0, 3.0, 1.0}, {1, 1, 1, 4}).to(dtype);
    const Var z = max_pool2d(x, {.window = {1, 2}, .stride = Window{1, 1}});
    const Tensor gz = Tensor::from({1.0, 10.0, 100.0}, {1, 1, 1, 3}).to(dtype);
    o = eval({x}, {z, grad(sum(z * constant(gz)), x)}, {row});
    expect_values(o[0], {3, 3, 3}, 0);
    expect_values(o[1], {1, 10, 100, 0}, 0);
    // The same ties read through a transposed view (the general loop, columns strided).
    Var xt = tensor4("xt", dtype);
    const Tensor tied_t = tied.view({1, 1, 4, 2}, {8, 8, 1, 4}, 0).clone();
    const Var yt = max_pool2d(dimshuffle(xt, {0, 1, 3, 2}));
    o = eval({xt}, {yt, grad(sum(yt * constant(gy)), xt)}, {tied_t});
    expect_values(o[0], {5, 2}, 0);
    expect_values(fresh(o[1]).view({1, 1, 2, 4}, {8, 8, 1, 2}, 0).clone(), {0, 10, 20, 0, 0, 0, 0, 0}, 0);
  }
}

TEST(Pool, NaNPropagatesAndTakesTheGradient) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (DType dtype : {f32, f64}) {
    SCOPED_TRACE(dtype_name(dtype));
    Var x = tensor4("x", dtype);
    // Window 0: a NaN before a larger 9; window 1: NaN after the 3 and 4, twice.
    const Tensor value = Tensor::from({1.0, nan, 3.0, 4.0, 9.0, 2.0, nan, nan}, {1, 1, 2, 4}).to(dtype);
    const Tensor gy = Tensor::from({10.0, 20.0}, {1, 1, 1, 2}).to(dtype);
    for (const Pool2dOptions& o : {Pool2dOptions{}, Pool2dOptions{.window = {2, 2}, .stride = Window{1, 2}, .padding = {1, 0}}}) {
      const Var y = max_pool2d(x, o);
      const Tensor g = random_tensor(reference_pool(true, value.to_vector<double>(), value.shape(), o).shape, dtype, 1, 2, 3);
      const PoolReference want = reference_pool(true, value.to_vector<double>(), value.shape(), o, g.to_vector<double>());
      auto got = eval({x}, {y, grad(sum(y * constant(g)), x)}, {value});
      expect_values(got[0], want.values, 0);
      expect_values(got[1], want.input_grad, dtype == f32 ? 1e-6 : 0);  // overlapping windows add in f32
    }
    auto got = eval({x}, {grad(sum(max_pool2d(x) * constant(gy)), x), avg_pool2d(x)}, {value});
    expect_values(got[0], {0, 10, 0, 0, 0, 0, 20, 0}, 0);
    expect_values(got[1], {nan, nan}, 0);
    // The general loop (a strided view): the first NaN in row-major order still wins.
    Var xt = tensor4("xt", dtype);
    const Tensor value_t = value.view({1, 1, 4, 2}, {8, 8, 1, 4}, 0).clone();
    const Var yt = max_pool2d(dimshuffle(xt, {0, 1, 3, 2}));
    got = eval({xt}, {yt, grad(sum(yt * constant(gy)), xt)}, {value_t});
    expect_values(got[0], {nan, nan}, 0);
    expect_values(fresh(got[1]).view({1, 1, 2, 4}, {8, 8, 1, 2}, 0).clone(), {0, 10, 0, 0, 0, 0, 20, 0}, 0);
  }
}

TEST(Pool, ErrorsNameTheOpTheShapesAndTheFix) {
  expect_error<TypeError>([] { max_pool2d(matrix("m")); }, {"max_pool2d", "4-D", "f32[?,?]", "2-D", "dimshuffle", "pool_test.cpp"});
  expect_error<TypeError>([] { avg_pool2d(tensor3("t", f64)); }, {"avg_pool2d", "4-D", "f64[?,?,?]"});
  expect_error<TypeError>([] { max_pool2d(tensor4("i", i32)); }, {"max_pool2d", "f32 or f64", "i32[?,?,?,?]", "cast"});
  expect_error<TypeError>([] { avg_pool2d(tensor4("b", b8)); }, {"avg_pool2d", "f32 or f64", "b8[?,?,?,?]"});
  expect_error<TypeError>([] { max_pool2d(Var()); }, {"max_pool2d", "empty Var"});
  // Options that cannot pool any input, at the caller's line.
  expect_error<ShapeError>([] { max_pool2d(tensor4("x"), {.window = {2, 0}}); }, {"max_pool2d", "window must be from 1", "columns", "pool_test.cpp"});
  expect_error<ShapeError>([] { avg_pool2d(tensor4("x"), {.stride = Window{0, 1}}); }, {"avg_pool2d", "stride must be from 1", "rows"});
  expect_error<ShapeError>([] { max_pool2d(tensor4("x"), {.window = {INT64_MAX, 2}}); }, {"max_pool2d", "window must be from 1 to 2147483647", "rows"});
  expect_error<ShapeError>([] { avg_pool2d(tensor4("x"), {.padding = {2, 0}}); },
                           {"avg_pool2d", "padding (2)", "smaller than the window (2)", "rows"});
  expect_error<ShapeError>([] { max_pool2d(tensor4("x"), {.padding = {0, -1}}); }, {"max_pool2d", "may not be negative", "columns"});
  // A window larger than the padded input: when the function runs on that input.
  Var x = tensor4("x");
  expect_error<ShapeError>([&] { eval1({x}, max_pool2d(x, {.window = {3, 3}}), {Tensor::zeros({1, 1, 2, 2})}); },
                           {"max_pool2d", "3x3 window", "(1,1,2,2)", "padded by 0x0", "pool_test.cpp"});
  expect_error<ShapeError>([&] { eval1({x}, avg_pool2d(x, {.window = {4, 4}, .padding = {1, 1}}), {Tensor::zeros({2, 3, 1, 5})}); },
                           {"avg_pool2d", "4x4 window", "(2,3,1,5)", "padded by 1x1 (3x7)"});
  // Padding alone would make windows over empty images.
  expect_error<ShapeError>([&] { eval1({x}, max_pool2d(x, {.padding = {1, 1}}), {Tensor::zeros({2, 3, 0, 4})}); },
                           {"max_pool2d", "(2,3,0,4)", "no rows or no columns"});
}

TEST(Pool, GradientsPassVerifyGradAndVerifyRop) {
  using V = std::vector<Var>;
  const Tensor xv = distinct_values({2, 2, 5, 6}, 3);
  const std::vector<Pool2dOptions> options{
      {},
      {.ignore_border = false},
      {.window = {3, 2}, .stride = Window{1, 2}},
      {.window = {3, 3}, .stride = Window{2, 2}, .padding = {1, 1}, .ignore_border = false},
      {.window = {3, 3}, .stride = Window{2, 1}, .padding = {1, 1}, .ignore_border = false, .count_include_pad = false},
  };
  for (const Pool2dOptions& o : options) {
    for (const auto& fn : std::vector<std::function<Var(V)>>{
             [o](V v) { return max_pool2d(v[0], o); },
             [o](V v) { return avg_pool2d(v[0], o); },
             [o](V v) { return max_pool2d(dimshuffle(v[0], {0, 1, 3, 2}), o); },
             [o](V v) { return avg_pool2d(exp(v[0]), o) * max_pool2d(v[0], o); },
         }) {
      verify_grad(fn, {xv});
      verify_rop(fn, {xv});
    }
  }
  verify_grad([](V v) { return avg_pool2d(v[0]); }, {random_tensor({2, 3, 4, 6}, f32, -1, 1, 4)});
  verify_grad([](V v) { return max_pool2d(v[0], {.window = {3, 3}, .stride = Window{1, 1}}); }, {distinct_values({1, 2, 5, 5}, 5).to(f32)});
}

TEST(Pool, SecondOrderGradientsPassVerifyGradAndVerifyRop) {
  using V = std::vector<Var>;
  const Tensor xv = distinct_values({2, 2, 6, 5}, 7);
  for (const Pool2dOptions& o : {Pool2dOptions{}, Pool2dOptions{.window = {3, 3}, .stride = Window{1, 2}, .padding = {1, 1}, .ignore_border = false}}) {
    // The gradient of a pooled square depends on x through the pooled values (max: through
    // MaxPool2dGrad's gy, whose gradient is MaxPool2dGradGrad).
    auto max_grad = [o](V v) { return grad(sum(square(max_pool2d(v[0], o))), v[0]); };
    auto avg_grad = [o](V v) { return grad(sum(square(avg_pool2d(v[0], o))), v[0]); };
    for (const auto& fn : std::vector<std::function<Var(V)>>{
             max_grad, avg_grad,
             [max_grad](V v) { return sum(square(max_grad(v))); },
             [avg_grad](V v) { return sum(square(avg_grad(v))); },
             // Through MaxPool2dGradGrad's own gradient (MaxPool2dGrad) once more.
             [o](V v) {
               Var g = grad(sum(square(max_pool2d(v[0], o))), v[0]);
               return grad(sum(square(g) * v[0]), v[0]);
             },
         }) {
      verify_grad(fn, {xv});
      verify_rop(fn, {xv});
    }
  }
}

TEST(Pool, GradientsAreTheFourPoolingOps) {
  Var x = tensor4("x", f64);
  const Var g = grad(sum(square(max_pool2d(x))), x);
  Function f = function({x}, {g, grad(sum(square(g)), x), grad(sum(square(avg_pool2d(x))), x)});
  EXPECT_EQ(count_op(f, "max_pool2d"), 1) << f.graph_text();
  // Twice: g itself, and in the second order where the pooled values carry x's change.
  EXPECT_EQ(count_op(f, "max_pool2d_grad"), 2) << f.graph_text();
  EXPECT_EQ(count_op(f, "max_pool2d_grad_grad"), 1) << f.graph_text();
  EXPECT_EQ(count_op(f, "avg_pool2d"), 1) << f.graph_text();
  EXPECT_EQ(count_op(f, "avg_pool2d_grad"), 1) << f.graph_text();
  // The average's gradient reads x for its shape alone.
  EXPECT_EQ(AvgPool2dGrad(PoolWindows{}).shape_only_inputs(), (std::vector<int>{1}));
}

TEST(Pool, EqualOptionsMergeAndDifferentOnesDoNot) {
  Var x = tensor4("x", f64);
  Function same = function({x}, {max_pool2d(x) + max_pool2d(x, {.window = {2, 2}, .stride = Window{2, 2}, .count_include_pad = false})});
  EXPECT_EQ(count_op(same, "max_pool2d"), 1) << same.graph_text();  // count_include_pad means nothing to max
  Function different = function({x}, {avg_pool2d(x) + avg_pool2d(x, {.count_include_pad = false}) + max_pool2d(x) +
                                       max_pool2d(x, {.ignore_border = false})});
  EXPECT_EQ(count_op(different, "avg_pool2d"), 2) << different.graph_text();
  EXPECT_EQ(count_op(different, "max_pool2d"), 2) << different.graph_text();
}

TEST(Pool, EveryModeAgreesWithThePlainOne) {
  Var x = tensor4("x", f64);
  const Tensor xv = distinct_values({2, 3, 6, 6}, 9);
  const Var y = max_pool2d(tanh(x) * 2.0, {.window = {3, 3}, .stride = Window{1, 1}, .padding = {1, 1}});
  const Var z = avg_pool2d(y + 1.0, {.ignore_border = false, .count_include_pad = false});
  const Var loss = sum(square(z));
  compare_with_plain({x}, std::vector<Var>{z, grad(loss, x)}, {xv});
  compare_with_plain({x}, std::vector<Var>{z, grad(loss, x)}, {xv}, 1e-12, Mode::debug());
}

TEST(Pool, ATrainingStepGivesTheSameValuesCallAfterCallAndLearns) {
  // A small LeNet-like step: elementwise weights, tanh, max pooling, average pooling, a squared
  // error, its gradient and an SGD update.
  Var x = tensor4("x"), t = tensor4("t");
  Shared w = shared(random_tensor({2, 3, 8, 8}, f32, 0.5, 1.5, 1), "w");
  const Var h = max_pool2d(tanh(x * w));
  const Var out = avg_pool2d(h, {.window = {3, 3}, .stride = Window{1, 1}, .padding = {1, 1}, .count_include_pad = false});
  const Var loss = mean(square(out - t));
  const Var gw = grad(loss, w);
  const std::vector<Tensor> args{random_tensor({2, 3, 8, 8}, f32, -1, 1, 2), random_tensor({2, 3, 4, 4}, f32, -0.2, 0.2, 3)};
  Function evaluate = function({x, t}, {loss, gw}, {.keep_buffers = true});
  const auto first = evaluate(args), second = evaluate(args);
  expect_values(second[0], first[0].to_vector<double>(), 0);
  expect_values(second[1], first[1].to_vector<double>(), 0);
  Function step = function({x, t}, {loss}, {.updates = {{w, w - 0.5 * gw}}, .keep_buffers = true});
  const double before = step(args)[0].item<double>();
  for (int i = 0; i < 20; ++i) step(args);
  EXPECT_LT(step(args)[0].item<double>(), before);
}

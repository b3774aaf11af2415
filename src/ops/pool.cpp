// 2-D max and average pooling, their gradients and max pooling's second-order gradient.
#include "ops/pool.hpp"

#include <algorithm>
#include <limits>

#include "kiln/conv.hpp"
#include "kiln/ops.hpp"
#include "tensor/dispatch.hpp"
#include "tensor/loc.hpp"
#include "tensor/parallel.hpp"

namespace kiln {

namespace {

std::string pair_str(const std::array<int64_t, 2>& p) { return std::to_string(p[0]) + "x" + std::to_string(p[1]); }

// The number of windows along one axis of `size` elements (PoolWindows::output_size); -1 when the
// window does not fit in the padded axis.
int64_t pooled_size(int64_t size, int64_t window, int64_t stride, int64_t pad, bool ignore_border) {
  const int64_t room = size + 2 * pad - window;
  if (room < 0) return -1;
  if (ignore_border) return room / stride + 1;
  int64_t out = (room + stride - 1) / stride + 1;
  if ((out - 1) * stride >= size + pad) --out;  // the last window would start in the right padding
  return out;
}

const char* mode_name(PoolMode mode) { return mode == PoolMode::max ? "max_pool2d" : "avg_pool2d"; }

// A 4-D float input, or TypeError naming the op, the type and what to do.
void check_pool_input(const Type& t, const std::string& op, const char* role) {
  if (t.ndim() != 4)
    throw TypeError(op + ": needs a 4-D " + role + " (N x C x H x W), got " + t.str() + " (" + std::to_string(t.ndim()) +
                    "-D); give images as a batch of channels, e.g. dimshuffle(x, {-1, -1, 0, 1}) for one H x W image");
  if (!is_float(t.dtype)) throw TypeError(op + ": takes f32 or f64 values, got " + t.str() + "; cast(x, f32) first");
}

void check_same_dtype(const std::vector<Type>& in, const std::string& op) {
  for (const Type& t : in)
    if (t.dtype != in[0].dtype) throw TypeError(op + ": inputs of different dtypes: " + in[0].str() + " and " + t.str());
}

// The pooled shape of an N x C x H x W input.
Shape pooled_shape(const PoolWindows& windows, const Shape& input, const std::string& op) {
  const auto [h, w] = windows.output_size(input, op);
  return {input[0], input[1], h, w};
}

// ShapeError unless `got` (the role's shape) is `want`, the pooled shape of x.
void check_pooled(const Shape& got, const Shape& want, const Shape& x, const std::string& op, const char* role) {
  if (got != want)
    throw ShapeError(op + ": " + role + " " + shape_str(got) + " does not have the pooled shape " + shape_str(want) + " of input " +
                     shape_str(x));
}

}  // namespace

std::array<int64_t, 2> PoolWindows::output_size(const Shape& input, const std::string& op) const {
  if (input[2] == 0 || input[3] == 0)
    throw ShapeError(op + ": input " + shape_str(input) + " has images of no rows or no columns, where a window holds only padding; "
                     "give images of at least one element");
  std::array<int64_t, 2> out{};
  for (size_t a = 0; a < 2; ++a) {
    out[a] = pooled_size(input[2 + a], window[a], stride[a], padding[a], ignore_border);
    if (out[a] < 0)
      throw ShapeError(op + ": the " + pair_str(window) + " window does not fit in input " + shape_str(input) + " padded by " +
                       pair_str(padding) + " (" + pair_str({input[2] + 2 * padding[0], input[3] + 2 * padding[1]}) +
                       "); use a smaller window or more padding");
  }
  return out;
}

std::string PoolWindows::str() const {
  return "window=" + pair_str(window) + ",stride=" + pair_str(stride) + ",padding=" + pair_str(padding) +
         ",ignore_border=" + (ignore_border ? "true" : "false");
}

void PoolWindows::write(OpParams& out) const {
  out << window[0] << window[1] << stride[0] << stride[1] << padding[0] << padding[1] << ignore_border << count_include_pad;
}

namespace {
// count_include_pad means nothing to max pooling: kept true there, so that equal ops stay equal.
PoolWindows normalized(PoolMode mode, PoolWindows windows) {
  if (mode == PoolMode::max) windows.count_include_pad = true;
  return windows;
}
}  // namespace

Pool2d::Pool2d(PoolMode mode, PoolWindows windows) : PoolOp(normalized(mode, windows)), mode_(mode) {}

void Pool2d::params(OpParams& out) const {
  out << mode_;
  PoolOp::params(out);
}

std::string Pool2d::name() const {
  std::string s = mode_name(mode_) + std::string("{") + windows().str();
  if (mode_ == PoolMode::avg) s += std::string(",count_include_pad=") + (windows().count_include_pad ? "true" : "false");
  return s + "}";
}

std::vector<Type> Pool2d::infer_types(const std::vector<Type>& in) const {
  check_pool_input(in.at(0), name(), "input");
  return {Type{in[0].dtype, {in[0].broadcastable[0], in[0].broadcastable[1], false, false}}};
}

std::vector<Shape> Pool2d::infer_shapes(const std::vector<Shape>& in, const std::vector<const Tensor*>&) const {
  return {pooled_shape(windows(), in[0], name())};
}

std::vector<Var> Pool2d::L_op(const Node& node, const std::vector<Var>& gouts) const {
  if (!gouts[0].defined()) return {Var()};
  const Var& x = node.inputs[0];
  const Var gy = cast(gouts[0], x.dtype(), node.loc);
  if (mode_ == PoolMode::max) return {apply1(std::make_shared<MaxPool2dGrad>(windows()), {x, node.output(0), gy}, node.loc)};
  return {apply1(std::make_shared<AvgPool2dGrad>(windows()), {gy, x}, node.loc)};
}

std::vector<Type> MaxPool2dGrad::infer_types(const std::vector<Type>& in) const {
  check_pool_input(in.at(0), name(), "input x");
  check_pool_input(in.at(1), name(), "pooled y");
  check_pool_input(in.at(2), name(), "gradient gy");
  check_same_dtype(in, name());
  return {in[0]};
}

std::vector<Shape> MaxPool2dGrad::infer_shapes(const std::vector<Shape>& in, const std::vector<const Tensor*>&) const {
  const Shape pooled = pooled_shape(windows(), in[0], name());
  check_pooled(in[1], pooled, in[0], name(), "pooled y");
  check_pooled(in[2], pooled, in[0], name(), "gradient gy");
  return {in[0]};
}

std::vector<Var> MaxPool2dGrad::L_op(const Node& node, const std::vector<Var>& gouts) const {
  if (!gouts[0].defined()) return {Var(), Var(), Var()};
  const Var &x = node.inputs[0], &y = node.inputs[1];
  const Var ggx = cast(gouts[0], x.dtype(), node.loc);
  return {Var(), Var(), apply1(std::make_shared<MaxPool2dGradGrad>(windows()), {x, y, ggx}, node.loc)};
}

std::vector<Type> MaxPool2dGradGrad::infer_types(const std::vector<Type>& in) const {
  check_pool_input(in.at(0), name(), "input x");
  check_pool_input(in.at(1), name(), "pooled y");
  check_pool_input(in.at(2), name(), "gradient ggx");
  check_same_dtype(in, name());
  return {in[1]};
}

std::vector<Shape> MaxPool2dGradGrad::infer_shapes(const std::vector<Shape>& in, const std::vector<const Tensor*>&) const {
  check_pooled(in[1], pooled_shape(windows(), in[0], name()), in[0], name(), "pooled y");
  if (in[2] != in[0])
    throw ShapeError(name() + ": gradient ggx " + shape_str(in[2]) + " does not have the shape of input x " + shape_str(in[0]));
  return {in[1]};
}

std::vector<Var> MaxPool2dGradGrad::L_op(const Node& node, const std::vector<Var>& gouts) const {
  if (!gouts[0].defined()) return {Var(), Var(), Var()};
  const Var &x = node.inputs[0], &y = node.inputs[1];
  const Var gy = cast(gouts[0], x.dtype(), node.loc);
  return {Var(), Var(), apply1(std::make_shared<MaxPool2dGrad>(windows()), {x, y, gy}, node.loc)};
}

std::vector<Type> AvgPool2dGrad::infer_types(const std::vector<Type>& in) const {
  check_pool_input(in.at(0), name(), "gradient gy");
  check_pool_input(in.at(1), name(), "input x");
  check_same_dtype(in, name());
  return {in[1]};
}

std::vector<Shape> AvgPool2dGrad::infer_shapes(const std::vector<Shape>& in, const std::vector<const Tensor*>&) const {
  check_pooled(in[0], pooled_shape(windows(), in[1], name()), in[1], name(), "gradient gy");
  return {in[1]};
}

std::vector<Var> AvgPool2dGrad::L_op(const Node& node, const std::vector<Var>& gouts) const {
  if (!gouts[0].defined()) return {Var(), Var()};
  const Var g = cast(gouts[0], node.inputs[1].dtype(), node.loc);
  return {apply1(std::make_shared<Pool2d>(PoolMode::avg, windows()), {g}, node.loc), Var()};
}

namespace {

// Pooling loops run on several threads once the input has this many elements: below it, starting
// the threads costs more than the loop (the same bound as elementwise work).
constexpr int64_t kParallelPoolElements = int64_t{1} << 15;

// fn(first, last) over the items [0, items) (planes, or rows of windows), split into one range per
// thread when the input's `elements` are enough. Each item writes its own part of the output.
template <class F> void for_each_range(int64_t items, int64_t elements, F&& fn) {
  const int threads = elements >= kParallelPoolElements && !omp_in_parallel()
                          ? static_cast<int>(std::min<int64_t>(num_threads(), items))
                          : 1;
  if (threads <= 1) return fn(int64_t{0}, items);
  parallel_region(threads, [&](int t, int nt) { fn(items * t / nt, items * (t + 1) / nt); });
}

// A 4-D tensor read in place through its strides, plane by plane (a plane: one image's one
// channel): a transposed or sliced view is read where it lies, as a kernel may not allocate a
// contiguous copy.
template <class T> struct Planes {
  explicit Planes(const Tensor& t)
      : data(reinterpret_cast<const T*>(t.storage()->data()) + t.offset()), batch(t.shape()[0]), channels(t.shape()[1]),
        height(t.shape()[2]), stride_n(t.strides()[0]), stride_c(t.strides()[1]), stride_h(t.strides()[2]),
        stride_w(t.strides()[3]) {}
  const T* plane(int64_t p) const { return data + (p / channels) * stride_n + (p % channels) * stride_c; }
  // Whether the rows of all planes follow one another at one stride (a contiguous tensor, or one
  // strided along W alone): row i of the N*C*H rows then starts at data + i * stride_h.
  bool rows_in_sequence() const {
    return (channels == 1 || stride_c == height * stride_h) && (batch == 1 || stride_n == channels * height * stride_h);
  }
  const T* data;
  int64_t batch, channels, height, stride_n, stride_c, stride_h, stride_w;
};

// The input rows (or columns) [first, last) one window reads, and its length within the padded input.
struct WindowRange {
  int64_t first, last, padded;
};
WindowRange window_range(int64_t out_index, int64_t window, int64_t stride, int64_t pad, int64_t size) {
  const int64_t start = out_index * stride - pad;
  return {std::max<int64_t>(start, 0), std::min(start + window, size), std::min(start + window, size + pad) - start};
}

// The windows of one plane: input H x W, output OH x OW.
struct PlaneGeometry {
  PlaneGeometry(const PoolWindows& windows, const Shape& input, const Shape& output)
      : windows(windows), planes(input[0] * input[1]), height(input[2]), width(input[3]), out_height(output[2]),
        out_width(output[3]) {
    const auto [kh, kw] = windows.window;
    const auto [sh, sw] = windows.stride;
    const auto [ph, pw] = windows.padding;
    halving = kh == 2 && kw == 2 && sh == 2 && sw == 2 && ph == 0 && pw == 0 && 2 * out_height == height && 2 * out_width <= width;
    tiling = halving && 2 * out_width == width;
  }
  WindowRange rows(int64_t oh) const { return window_range(oh, windows.window[0], windows.stride[0], windows.padding[0], height); }
  WindowRange cols(int64_t ow) const { return window_range(ow, windows.window[1], windows.stride[1], windows.padding[1], width); }
  // Average pooling's divisor (PyTorch's rule): the window within the padded input, or its input
  // elements alone.
  int64_t divisor(const WindowRange& r, const WindowRange& c) const {
    return windows.count_include_pad ? r.padded * c.padded : (r.last - r.first) * (c.last - c.first);
  }
  const PoolWindows& windows;
  int64_t planes, height, width, out_height, out_width;
  // The common case (LeNet's): 2x2 windows at stride 2 without padding, each inside the input,
  // over an even number of rows: output row i reads input rows 2i and 2i + 1 of the N*C*H rows (a
  // last odd column is left out). Tiling: every input element in one window (W even too).
  bool halving = false, tiling = false;
};

// The larger of a and b, NaN if either is NaN (NumPy's max); a when they are equal, so a
// row-major scan keeps the first maximum. Branch-free, it vectorizes.
template <class T> T max_or_nan(T a, T b) { return (b > a || b != b) ? b : a; }

// Whether v is the window maximum m (a NaN window's maximum is NaN).
template <class T> bool is_maximum(T v, T m) { return v == m || (v != v && m != m); }
// The same without branches, for loops that vectorize.
template <class T> bool matches_maximum(T v, T m) { return (v == m) | ((v != v) & (m != m)); }

// The row and column of a window's first maximum m, row-major. m was computed by max pooling from
// these very elements, so one of them matches it.
template <class T>
std::pair<int64_t, int64_t> first_maximum(const T* plane, int64_t stride_h, int64_t stride_w, const WindowRange& r,
                                          const WindowRange& c, T m) {
  for (int64_t h = r.first; h < r.last; ++h)
    for (int64_t w = c.first; w < c.last; ++w)
      if (is_maximum(plane[h * stride_h + w * stride_w], m)) return {h, w};
  return {r.first, c.first};
}

// 2x2 windows at stride 2 over output rows [first, last) of all planes (PlaneGeometry::halving),
// the input's columns contiguous. One long run of rows instead of many short planes: LeNet's 8x8
// planes pool twice as fast.
template <class T>
void pool_halving_rows(PoolMode mode, const PlaneGeometry& g, const Planes<T>& x, int64_t first, int64_t last, T* y) {
  const int64_t sh = x.stride_h, ow_end = g.out_width;
  for (int64_t i = first; i < last; ++i) {
    const T *r0 = x.data + 2 * i * sh, *r1 = r0 + sh;
    T* out = y + i * ow_end;
    if (mode == PoolMode::max) {
      for (int64_t ow = 0; ow < ow_end; ++ow)
        out[ow] = max_or_nan(max_or_nan(r0[2 * ow], r0[2 * ow + 1]), max_or_nan(r1[2 * ow], r1[2 * ow + 1]));
    } else {
      // Summed row-major as the general loop sums; * 0.25 is exactly / 4.
      for (int64_t ow = 0; ow < ow_end; ++ow) out[ow] = (((r0[2 * ow] + r0[2 * ow + 1]) + r1[2 * ow]) + r1[2 * ow + 1]) * T(0.25);
    }
  }
}

template <class T> void pool_plane(PoolMode mode, const PlaneGeometry& g, const Planes<T>& x, int64_t p, T* py) {
  const T* px = x.plane(p);
  const int64_t sh = x.stride_h, sw = x.stride_w;
  for (int64_t oh = 0; oh < g.out_height; ++oh) {
    const WindowRange r = g.rows(oh);
    for (int64_t ow = 0; ow < g.out_width; ++ow) {
      const WindowRange c = g.cols(ow);
      T& out = py[oh * g.out_width + ow];
      if (mode == PoolMode::max) {
        // Padding is -infinity, which never beats an input element: every window holds one.
        T m = px[r.first * sh + c.first * sw];
        for (int64_t h = r.first; h < r.last; ++h)
          for (int64_t w = c.first; w < c.last; ++w) m = max_or_nan(m, px[h * sh + w * sw]);
        out = m;
      } else {
        T sum = 0;
        for (int64_t h = r.first; h < r.last; ++h)
          for (int64_t w = c.first; w < c.last; ++w) sum += px[h * sh + w * sw];
        out = sum / static_cast<T>(g.divisor(r, c));
      }
    }
  }
}

class Pool2dKernel final : public KernelOf<Pool2d> {
 public:
  using KernelOf::KernelOf;
  void run(InputValues in, OutputValues out, std::span<std::byte>) const override {
    const Tensor& x = in[0];
    Tensor& y = out[0];  // contiguous
    const PlaneGeometry g(op().windows(), x.shape(), y.shape());
    const PoolMode mode = op().mode();
    dispatch_float(x.dtype(), mode_name(mode), [&](auto tag) {
      using T = decltype(tag);
      const Planes<T> xs(x);
      T* py = y.data<T>();
      if (g.halving && xs.stride_w == 1 && xs.rows_in_sequence()) {
        for_each_range(g.planes * g.out_height, x.numel(), [&](int64_t first, int64_t last) { pool_halving_rows<T>(mode, g, xs, first, last, py); });
        return;
      }
      const int64_t plane_size = g.out_height * g.out_width;
      for_each_range(g.planes, x.numel(), [&](int64_t first, int64_t last) {
        for (int64_t p = first; p < last; ++p) pool_plane<T>(mode, g, xs, p, py + p * plane_size);
      });
    });
  }
};

// gx of 2x2 windows tiling the input (PlaneGeometry::tiling), output rows [first, last) of all
// planes, x's columns contiguous: each input element is in one window, so it is written once, with
// no zeroing first.
template <class T>
void max_pool_grad_tiling_rows(const PlaneGeometry& g, const Planes<T>& x, const Planes<T>& y, const Planes<T>& gy, int64_t first,
                               int64_t last, T* gx) {
  const int64_t sh = x.stride_h, width = g.width;
  for (int64_t i = first; i < last; ++i) {
    const T *r0 = x.data + 2 * i * sh, *r1 = r0 + sh;
    const T *ym = y.data + i * y.stride_h, *gv = gy.data + i * gy.stride_h;
    T *g0 = gx + 2 * i * width, *g1 = g0 + width;
    // Branch-free (bitwise & and |): where the maximum lies is data, and a branch on it would be
    // mispredicted half the time (7x slower on random values).
    for (int64_t ow = 0; ow < g.out_width; ++ow) {
      const T m = ym[ow * y.stride_w], v = gv[ow * gy.stride_w];
      const bool at0 = matches_maximum(r0[2 * ow], m);
      const bool at1 = !at0 & matches_maximum(r0[2 * ow + 1], m);
      const bool at2 = !(at0 | at1) & matches_maximum(r1[2 * ow], m);
      const bool at3 = !(at0 | at1 | at2);
      g0[2 * ow] = at0 ? v : T(0);
      g0[2 * ow + 1] = at1 ? v : T(0);
      g1[2 * ow] = at2 ? v : T(0);
      g1[2 * ow + 1] = at3 ? v : T(0);
    }
  }
}

// gx of one plane (contiguous, H x W) from x, the pooled y and its gradient gy.
template <class T>
void max_pool_grad_plane(const PlaneGeometry& g, const Planes<T>& x, const Planes<T>& y, const Planes<T>& gy, int64_t p, T* gx) {
  const T *px = x.plane(p), *py = y.plane(p), *pg = gy.plane(p);
  std::fill_n(gx, g.height * g.width, T(0));
  for (int64_t oh = 0; oh < g.out_height; ++oh) {
    const WindowRange r = g.rows(oh);
    for (int64_t ow = 0; ow < g.out_width; ++ow) {
      const auto [h, w] = first_maximum(px, x.stride_h, x.stride_w, r, g.cols(ow), py[oh * y.stride_h + ow * y.stride_w]);
      gx[h * g.width + w] += pg[oh * gy.stride_h + ow * gy.stride_w];
    }
  }
}

class MaxPool2dGradKernel final : public KernelOf<MaxPool2dGrad> {
 public:
  using KernelOf::KernelOf;
  void run(InputValues in, OutputValues out, std::span<std::byte>) const override {
    const Tensor &x = in[0], &y = in[1], &gy = in[2];
    Tensor& gx = out[0];  // contiguous
    const PlaneGeometry g(op().windows(), x.shape(), y.shape());
    dispatch_float(x.dtype(), "max_pool2d_grad", [&](auto tag) {
      using T = decltype(tag);
      const Planes<T> xs(x), ys(y), gys(gy);
      T* pgx = gx.data<T>();
      if (g.tiling && xs.stride_w == 1 && xs.rows_in_sequence() && ys.rows_in_sequence() && gys.rows_in_sequence()) {
        for_each_range(g.planes * g.out_height, x.numel(),
                       [&](int64_t first, int64_t last) { max_pool_grad_tiling_rows<T>(g, xs, ys, gys, first, last, pgx); });
        return;
      }
      const int64_t plane_size = g.height * g.width;
      for_each_range(g.planes, x.numel(), [&](int64_t first, int64_t last) {
        for (int64_t p = first; p < last; ++p) max_pool_grad_plane<T>(g, xs, ys, gys, p, pgx + p * plane_size);
      });
    });
  }
};

class MaxPool2dGradGradKernel final : public KernelOf<MaxPool2dGradGrad> {
 public:
  using KernelOf::KernelOf;
  void run(InputValues in, OutputValues out, std::span<std::byte>) const override {
    const Tensor &x = in[0], &y = in[1], &ggx = in[2];
    Tensor& ggy = out[0];  // contiguous
    const PlaneGeometry g(op().windows(), x.shape(), y.shape());
    dispatch_float(x.dtype(), "max_pool2d_grad_grad", [&](auto tag) {
      using T = decltype(tag);
      const Planes<T> xs(x), ys(y), ggxs(ggx);
      T* pggy = ggy.data<T>();
      const int64_t plane_size = g.out_height * g.out_width;
      for_each_range(g.planes, x.numel(), [&](int64_t first, int64_t last) {
        for (int64_t p = first; p < last; ++p) {
          const T *px = xs.plane(p), *py = ys.plane(p), *pgg = ggxs.plane(p);
          T* o = pggy + p * plane_size;
          for (int64_t oh = 0; oh < g.out_height; ++oh) {
            const WindowRange r = g.rows(oh);
            for (int64_t ow = 0; ow < g.out_width; ++ow) {
              const auto [h, w] = first_maximum(px, xs.stride_h, xs.stride_w, r, g.cols(ow), py[oh * ys.stride_h + ow * ys.stride_w]);
              o[oh * g.out_width + ow] = pgg[h * ggxs.stride_h + w * ggxs.stride_w];
            }
          }
        }
      });
    });
  }
};

// gx of 2x2 windows tiling the input, output rows [first, last) of all planes: each element a
// quarter of its window's gradient (* 0.25 is exactly / 4, as the general loop divides).
template <class T> void avg_pool_grad_tiling_rows(const PlaneGeometry& g, const Planes<T>& gy, int64_t first, int64_t last, T* gx) {
  for (int64_t i = first; i < last; ++i) {
    const T* gv = gy.data + i * gy.stride_h;
    T *g0 = gx + 2 * i * g.width, *g1 = g0 + g.width;
    for (int64_t ow = 0; ow < g.out_width; ++ow) {
      const T v = gv[ow * gy.stride_w] * T(0.25);
      g0[2 * ow] = g0[2 * ow + 1] = g1[2 * ow] = g1[2 * ow + 1] = v;
    }
  }
}

// gx of one plane (contiguous, H x W) from the pooled gradient gy: each window's gy / divisor
// added to its input elements.
template <class T> void avg_pool_grad_plane(const PlaneGeometry& g, const Planes<T>& gy, int64_t p, T* gx) {
  const T* pg = gy.plane(p);
  std::fill_n(gx, g.height * g.width, T(0));
  for (int64_t oh = 0; oh < g.out_height; ++oh) {
    const WindowRange r = g.rows(oh);
    for (int64_t ow = 0; ow < g.out_width; ++ow) {
      const WindowRange c = g.cols(ow);
      const T v = pg[oh * gy.stride_h + ow * gy.stride_w] / static_cast<T>(g.divisor(r, c));
      for (int64_t h = r.first; h < r.last; ++h)
        for (int64_t w = c.first; w < c.last; ++w) gx[h * g.width + w] += v;
    }
  }
}

class AvgPool2dGradKernel final : public KernelOf<AvgPool2dGrad> {
 public:
  using KernelOf::KernelOf;
  void run(InputValues in, OutputValues out, std::span<std::byte>) const override {
    const Tensor& gy = in[0];
    Tensor& gx = out[0];  // contiguous, x's shape (x itself is read for its shape alone)
    const PlaneGeometry g(op().windows(), gx.shape(), gy.shape());
    dispatch_float(gy.dtype(), "avg_pool2d_grad", [&](auto tag) {
      using T = decltype(tag);
      const Planes<T> gys(gy);
      T* pgx = gx.data<T>();
      if (g.tiling && gys.rows_in_sequence()) {
        for_each_range(g.planes * g.out_height, gx.numel(),
                       [&](int64_t first, int64_t last) { avg_pool_grad_tiling_rows<T>(g, gys, first, last, pgx); });
        return;
      }
      const int64_t plane_size = g.height * g.width;
      for_each_range(g.planes, gx.numel(), [&](int64_t first, int64_t last) {
        for (int64_t p = first; p < last; ++p) avg_pool_grad_plane<T>(g, gys, p, pgx + p * plane_size);
      });
    });
  }
};

// The options with the stride defaulted, or ShapeError naming the op and the options that cannot
// pool (at the caller's line: they are wrong whatever the input).
PoolWindows resolved_windows(const Pool2dOptions& options, PoolMode mode, const Loc& loc) {
  PoolWindows w{options.window, options.stride.value_or(options.window), options.padding, options.ignore_border,
                options.count_include_pad};
  auto fail = [&](const std::string& what) {
    throw ShapeError(std::string(mode_name(mode)) + ": " + what + " (" + w.str() + "; at " + loc_str(loc) + ")");
  };
  for (size_t a = 0; a < 2; ++a) {
    const char* axis = a == 0 ? "rows" : "columns";
    // Bounded so that no geometry computed from them wraps around.
    constexpr int64_t kLargest = std::numeric_limits<int32_t>::max();
    if (w.window[a] <= 0 || w.window[a] > kLargest)
      fail("the window must be from 1 to " + std::to_string(kLargest) + " along the " + std::string(axis) + ", got " + std::to_string(w.window[a]));
    if (w.stride[a] <= 0 || w.stride[a] > kLargest)
      fail("the stride must be from 1 to " + std::to_string(kLargest) + " along the " + std::string(axis) + ", got " + std::to_string(w.stride[a]));
    if (w.padding[a] < 0) fail("the padding may not be negative along the " + std::string(axis) + ", got " + std::to_string(w.padding[a]));
    if (w.padding[a] >= w.window[a])
      fail("the padding (" + std::to_string(w.padding[a]) + ") must be smaller than the window (" + std::to_string(w.window[a]) +
           ") along the " + axis + ", so that every window holds an input element");
  }
  return w;
}

Var pool2d(PoolMode mode, const Var& input, const Pool2dOptions& options, const Loc& loc) {
  if (!input.defined()) throw TypeError(std::string(mode_name(mode)) + ": input is an empty Var (at " + loc_str(loc) + ")");
  return apply1(std::make_shared<Pool2d>(mode, resolved_windows(options, mode, loc)), {input}, loc);
}

}  // namespace

void add_pool_kernels(KernelTable& table) {
  table.add<Pool2d, Pool2dKernel>();
  table.add<MaxPool2dGrad, MaxPool2dGradKernel>();
  table.add<MaxPool2dGradGrad, MaxPool2dGradGradKernel>();
  table.add<AvgPool2dGrad, AvgPool2dGradKernel>();
}

Var max_pool2d(const Var& input, const Pool2dOptions& options, Loc loc) { return pool2d(PoolMode::max, input, options, loc); }
Var avg_pool2d(const Var& input, const Pool2dOptions& options, Loc loc) { return pool2d(PoolMode::avg, input, options, loc); }

}  // namespace kiln

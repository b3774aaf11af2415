// 2-D convolution and its gradients: lowered to matrix products over unfolded patches (im2col),
// image by image, the images shared among the threads.
#include "ops/conv.hpp"

#include <omp.h>

#include <algorithm>
#include <limits>

#include "graph/node.hpp"
#include "kiln/ops.hpp"
#include "ops/blas.hpp"
#include "tensor/dispatch.hpp"
#include "tensor/isa.hpp"
#include "tensor/loc.hpp"
#include "tensor/parallel.hpp"

namespace kiln {

namespace {

std::string pair_str(const std::array<int64_t, 2>& v) { return std::to_string(v[0]) + "x" + std::to_string(v[1]); }

std::string padding_str(const Padding& p) {
  switch (p.rule) {
    case Padding::valid: return "valid";
    case Padding::full: return "full";
    case Padding::same: return "same";
    case Padding::explicit_sides: break;
  }
  return std::to_string(p.top) + "," + std::to_string(p.bottom) + "," + std::to_string(p.left) + "," + std::to_string(p.right);
}

// The padding before and after one axis for an input of `size` and a kernel spanning `extent`.
std::pair<int64_t, int64_t> axis_padding(const Padding& p, int64_t size, int64_t extent, int64_t stride, bool rows) {
  switch (p.rule) {
    case Padding::valid: return {0, 0};
    case Padding::full: return {extent - 1, extent - 1};
    case Padding::same: {
      const int64_t out = (size + stride - 1) / stride;
      const int64_t total = std::max<int64_t>(0, (out - 1) * stride + extent - size);
      return {total / 2, total - total / 2};
    }
    case Padding::explicit_sides: break;
  }
  return rows ? std::pair{p.top, p.bottom} : std::pair{p.left, p.right};
}

}  // namespace

void ConvOp::params(OpParams& out) const {
  const Padding& p = options_.padding;
  out << options_.stride[0] << options_.stride[1] << options_.dilation[0] << options_.dilation[1] << options_.groups
      << p.rule << p.top << p.bottom << p.left << p.right;
}

std::string ConvOp::name_with(const char* what) const {
  std::string s = what;
  std::string params;
  auto add = [&](const std::string& p) { params += (params.empty() ? "" : ",") + p; };
  if (options_.stride != std::array<int64_t, 2>{1, 1}) add("stride=" + pair_str(options_.stride));
  if (options_.padding.rule != Padding::valid) add("padding=" + padding_str(options_.padding));
  if (options_.dilation != std::array<int64_t, 2>{1, 1}) add("dilation=" + pair_str(options_.dilation));
  if (options_.groups != 1) add("groups=" + std::to_string(options_.groups));
  return params.empty() ? s : s + "{" + params + "}";
}

Type ConvOp::checked_type(const Type& input, const Type& filters, const char* input_role, const char* filter_role) const {
  if (input.ndim() != 4 || filters.ndim() != 4)
    throw TypeError(name() + ": takes a 4-D " + input_role + " (N x C x H x W) and 4-D " + filter_role +
                    " (O x C/groups x KH x KW), got " + input.str() + " and " + filters.str() +
                    " (reshape a single image to 1 x C x H x W)");
  if (!is_float(input.dtype) || input.dtype != filters.dtype)
    throw TypeError(name() + ": takes f32 or f64 values of one dtype, got " + input.str() + " and " + filters.str() +
                    " (cast() one of them)");
  return Type{input.dtype, {input.broadcastable[0], filters.broadcastable[0], false, false}};
}

ConvGeometry ConvOp::geometry(const Shape& input, const Shape& filters) const {
  const int64_t groups = options_.groups;
  auto fail = [&](const std::string& why) -> ConvGeometry {
    throw ShapeError(name() + ": input " + shape_str(input) + " and filters " + shape_str(filters) + ": " + why);
  };
  if (input.size() != 4 || filters.size() != 4) return fail("both must have 4 dimensions");
  if (input[1] % groups != 0 || filters[0] % groups != 0)
    return fail("with groups=" + std::to_string(groups) + " the input channels (" + std::to_string(input[1]) +
                ") and the filter count (" + std::to_string(filters[0]) + ") must both divide by the groups");
  if (filters[1] * groups != input[1])
    return fail("the filters take " + std::to_string(filters[1]) + " channels per group but the input has " +
                std::to_string(input[1]) + " channels in " + std::to_string(groups) +
                " group(s) (filters must be O x C/groups x KH x KW)");
  ConvGeometry g{};
  g.batch = input[0], g.channels = input[1], g.height = input[2], g.width = input[3];
  g.filters = filters[0], g.kernel_h = filters[2], g.kernel_w = filters[3];
  g.groups = groups;
  g.stride_h = options_.stride[0], g.stride_w = options_.stride[1];
  g.dilation_h = options_.dilation[0], g.dilation_w = options_.dilation[1];
  int64_t extent_h = 0, extent_w = 0;
  auto extent = [](int64_t kernel, int64_t dilation, int64_t& out) {
    return !__builtin_mul_overflow(kernel - 1, dilation, &out) && !__builtin_add_overflow(out, 1, &out);
  };
  if (!extent(g.kernel_h, g.dilation_h, extent_h) || !extent(g.kernel_w, g.dilation_w, extent_w))
    return fail("the kernel's extent with dilation " + pair_str(options_.dilation) + " does not fit in 64 bits");
  const auto [top, bottom] = axis_padding(options_.padding, g.height, extent_h, g.stride_h, true);
  const auto [left, right] = axis_padding(options_.padding, g.width, extent_w, g.stride_w, false);
  g.pad_top = top, g.pad_left = left;
  if (g.kernel_h < 1 || g.kernel_w < 1 || g.height + top + bottom < extent_h || g.width + left + right < extent_w)
    return fail("the kernel spans " + std::to_string(extent_h) + "x" + std::to_string(extent_w) +
                " pixels (dilation included), more than the padded input's " + std::to_string(g.height + top + bottom) + "x" +
                std::to_string(g.width + left + right) +
                (options_.padding.rule == Padding::same ? std::string(" (the input is empty)") : std::string(" (pad the input or use padding=same)")));
  g.out_h = (g.height + top + bottom - extent_h) / g.stride_h + 1;
  g.out_w = (g.width + left + right - extent_w) / g.stride_w + 1;
  return g;
}

std::vector<Type> Conv2d::infer_types(const std::vector<Type>& in) const {
  return {checked_type(in.at(0), in.at(1), "input", "filters")};
}

std::vector<Shape> Conv2d::infer_shapes(const std::vector<Shape>& in, const std::vector<const Tensor*>&) const {
  return {geometry(in[0], in[1]).output_shape()};
}

std::vector<Var> Conv2d::L_op(const Node& node, const std::vector<Var>& gouts) const {
  const Var &x = node.inputs[0], &w = node.inputs[1], &gy = gouts[0];
  if (!gy.defined()) return {Var(), Var()};
  return {apply1(std::make_shared<Conv2dGradInput>(options()), {gy, w, x}, node.loc),
          apply1(std::make_shared<Conv2dGradFilters>(options()), {x, gy, w}, node.loc)};
}

std::optional<std::vector<Var>> Conv2d::R_op(const Node& node, const std::vector<Var>& tangents) const {
  const Var &x = node.inputs[0], &w = node.inputs[1];
  Var out;
  auto add = [&](const Var& term) { out = out.defined() ? out + term : term; };
  if (tangents[0].defined()) add(conv2d(cast(tangents[0], x.dtype(), node.loc), w, options(), node.loc));
  if (tangents[1].defined()) add(conv2d(x, cast(tangents[1], w.dtype(), node.loc), options(), node.loc));
  return std::vector<Var>{out};
}

std::vector<Type> Conv2dGradInput::infer_types(const std::vector<Type>& in) const {
  checked_type(in.at(0), in.at(1), "output gradient", "filters");
  return {Type{in.at(0).dtype, in.at(2).broadcastable}};
}

ConvGeometry ConvOp::gradient_geometry(const Shape& input, const Shape& filters, const Shape& output_gradient) const {
  const ConvGeometry g = geometry(input, filters);
  if (output_gradient != g.output_shape())
    throw ShapeError(name() + ": the output gradient is " + shape_str(output_gradient) + ", the convolution's output " +
                     shape_str(g.output_shape()));
  return g;
}

std::vector<Shape> Conv2dGradInput::infer_shapes(const std::vector<Shape>& in, const std::vector<const Tensor*>&) const {
  return {gradient_geometry(in[2], in[1], in[0]).input_shape()};
}

// gx = grad_input(gy, w) is linear in each of gy and w: <gx, g> = <gy, conv(g, w)>, and as a
// function of w, <conv(g, w), gy>.
std::vector<Var> Conv2dGradInput::L_op(const Node& node, const std::vector<Var>& gouts) const {
  const Var &gy = node.inputs[0], &w = node.inputs[1], &g = gouts[0];
  if (!g.defined()) return {Var(), Var(), Var()};
  return {conv2d(g, w, options(), node.loc), apply1(std::make_shared<Conv2dGradFilters>(options()), {g, gy, w}, node.loc), Var()};
}

std::vector<Type> Conv2dGradFilters::infer_types(const std::vector<Type>& in) const {
  checked_type(in.at(0), in.at(2), "input", "filters");
  if (in.at(1).dtype != in.at(0).dtype || in.at(1).ndim() != 4)
    throw TypeError(name() + ": the output gradient must be 4-D of the input's dtype, got " + in.at(1).str() + " for input " + in.at(0).str());
  return {Type{in.at(0).dtype, in.at(2).broadcastable}};
}

std::vector<Shape> Conv2dGradFilters::infer_shapes(const std::vector<Shape>& in, const std::vector<const Tensor*>&) const {
  return {gradient_geometry(in[0], in[2], in[1]).filter_shape()};
}

// gw = grad_filters(x, gy): <gw, g> = <conv(x, g), gy>, so x gets grad_input(gy, g) and gy gets conv(x, g).
std::vector<Var> Conv2dGradFilters::L_op(const Node& node, const std::vector<Var>& gouts) const {
  const Var &x = node.inputs[0], &gy = node.inputs[1], &g = gouts[0];
  if (!g.defined()) return {Var(), Var(), Var()};
  return {apply1(std::make_shared<Conv2dGradInput>(options()), {gy, g, x}, node.loc), conv2d(x, g, options(), node.loc), Var()};
}

namespace {

constexpr int64_t kAlign = 64;
int64_t aligned(int64_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

// A 4-D tensor's element pointer and strides.
template <class T> struct Strided4 {
  T* data;
  int64_t s0, s1, s2, s3;
  static Strided4 of(const Tensor& t) {
    const Shape& s = t.strides();
    return {reinterpret_cast<T*>(t.raw_data()), s[0], s[1], s[2], s[3]};
  }
};

// The output columns ox whose input column x0 + ox * stride lies inside the image: [first, last).
std::pair<int64_t, int64_t> inside_columns(const ConvGeometry& g, int64_t x0) {
  const int64_t first = x0 >= 0 ? 0 : std::min(g.out_w, (-x0 + g.stride_w - 1) / g.stride_w);
  const int64_t last = g.width - x0 <= 0 ? 0 : std::min(g.out_w, (g.width - x0 - 1) / g.stride_w + 1);
  return {first, std::max(first, last)};
}

// The unfolded patches of one group of one image, rows `ld` apart: col[(c, i, j), (oy, ox)] = the
// input pixel that filter tap (i, j) of channel c meets at output pixel (oy, ox), zero in the
// padding.
template <class T> void unfold_loops(const ConvGeometry& g, const T* x, int64_t sc, int64_t sy, int64_t sx, T* col, int64_t ld) {
  const int64_t out_h = g.out_h, out_w = g.out_w, stride_h = g.stride_h, stride_w = g.stride_w;
  for (int64_t c = 0; c < g.group_channels(); ++c)
    for (int64_t i = 0; i < g.kernel_h; ++i) {
      // The output rows whose input row lies inside the image: [top, bottom).
      const int64_t y0 = i * g.dilation_h - g.pad_top;
      const int64_t top = y0 >= 0 ? 0 : std::min(out_h, (-y0 + stride_h - 1) / stride_h);
      const int64_t bottom = g.height - y0 <= 0 ? top : std::clamp((g.height - y0 - 1) / stride_h + 1, top, out_h);
      for (int64_t j = 0; j < g.kernel_w; ++j) {
        T* __restrict row = col + ((c * g.kernel_h + i) * g.kernel_w + j) * ld;
        const int64_t x0 = j * g.dilation_w - g.pad_left;
        const auto [first, last] = inside_columns(g, x0);
        std::fill_n(row, top * out_w, T(0));
        for (int64_t oy = top; oy < bottom; ++oy) {
          T* __restrict out = row + oy * out_w;
          const T* __restrict in = x + c * sc + (y0 + oy * stride_h) * sy;
          for (int64_t ox = 0; ox < first; ++ox) out[ox] = T(0);
          if (stride_w == 1 && sx == 1)
            for (int64_t ox = first; ox < last; ++ox) out[ox] = in[x0 + ox];
          else
            for (int64_t ox = first; ox < last; ++ox) out[ox] = in[(x0 + ox * stride_w) * sx];
          for (int64_t ox = last; ox < out_w; ++ox) out[ox] = T(0);
        }
        std::fill(row + bottom * out_w, row + out_h * out_w, T(0));
      }
    }
}

// The reverse of unfold: each patch entry added back to the pixel it came from (gx contiguous,
// the group's channels zeroed first).
template <class T> void fold_loops(const ConvGeometry& g, const T* col, int64_t ld, T* gx) {
  const int64_t plane = g.height * g.width;
  std::fill_n(gx, g.group_channels() * plane, T(0));
  for (int64_t c = 0; c < g.group_channels(); ++c)
    for (int64_t i = 0; i < g.kernel_h; ++i)
      for (int64_t j = 0; j < g.kernel_w; ++j) {
        const T* row = col + ((c * g.kernel_h + i) * g.kernel_w + j) * ld;
        const int64_t x0 = j * g.dilation_w - g.pad_left;
        const auto [first, last] = inside_columns(g, x0);
        for (int64_t oy = 0; oy < g.out_h; ++oy) {
          const int64_t iy = oy * g.stride_h + i * g.dilation_h - g.pad_top;
          if (iy < 0 || iy >= g.height) continue;
          T* out = gx + c * plane + iy * g.width;
          const T* in = row + oy * g.out_w;
          for (int64_t ox = first; ox < last; ++ox) out[x0 + ox * g.stride_w] += in[ox];
        }
      }
}

// Compiled for each instruction set: the rows are short (a LeNet layer's are 8 pixels), so the
// vector width decides how few instructions copy one.
template <class T> void unfold(const ConvGeometry& g, const T* x, int64_t sc, int64_t sy, int64_t sx, T* col, int64_t ld) {
  for_this_cpu([=] { unfold_loops(g, x, sc, sy, sx, col, ld); });
}
template <class T> void fold(const ConvGeometry& g, const T* col, int64_t ld, T* gx) {
  for_this_cpu([=] { fold_loops(g, col, ld, gx); });
}

enum class ConvPass : uint8_t { forward, grad_input, grad_filters };

// Images go through the matrix products in chunks: the patches of a chunk side by side make one
// product wide enough to run near the machine's peak (a 12 x 12 output alone gives 64 columns),
// while a chunk's patches stay within a few MiB.
int64_t chunk_images(const ConvGeometry& g, DType dtype, int threads) {
  constexpr int64_t kColumns = 1024, kPatchBytes = int64_t{256} << 10;
  const int64_t per_image = std::max<int64_t>(g.patch() * g.pixels() * dtype_size(dtype), 1);
  const int64_t share = (g.batch + threads - 1) / threads;
  return std::clamp<int64_t>(std::min((kColumns + g.pixels() - 1) / std::max<int64_t>(g.pixels(), 1), kPatchBytes / per_image), 1,
                             std::max<int64_t>(share, 1));
}

// Where each thread's working memory lies in a kernel's scratch: a chunk's unfolded patches, its
// outputs or output gradients side by side (O x chunk pixels), the thread's share of the filter
// gradient, and the matrix product's own scratch; after every thread's part, a contiguous copy of
// the filters.
struct ConvScratch {
  int64_t chunk = 1, col = 0, outputs = 0, partial = 0, product = 0, per_thread = 0, filters = 0;

  ConvScratch(const ConvGeometry& g, ConvPass pass, DType dtype, int64_t chunk) : chunk(chunk) {
    const int64_t size = dtype_size(dtype), columns = chunk * g.pixels();
    col = aligned(g.patch() * columns * size);
    outputs = aligned(g.filters * columns * size);
    partial = pass == ConvPass::grad_filters ? aligned(g.filters * g.patch() * size) : 0;
    const int64_t m = g.group_filters(), k = g.patch();
    product = aligned(std::max({gemm_scratch_bytes(dtype, m, columns, k), gemm_scratch_bytes(dtype, k, columns, m),
                                gemm_scratch_bytes(dtype, m, k, columns)}));
    per_thread = col + outputs + partial + product;
    filters = aligned(g.filters * g.patch() * size);
  }
  // The scratch a pass on `threads` threads needs.
  static int64_t bytes(const ConvGeometry& g, ConvPass pass, DType dtype, int threads) {
    const ConvScratch layout(g, pass, dtype, chunk_images(g, dtype, threads));
    return threads * layout.per_thread + layout.filters;
  }
  // The layout and thread count for a run that wants `threads` in `scratch` (planned for the
  // threads of its time, which may have changed since): fewer threads, then smaller chunks, as
  // the room requires.
  static std::pair<ConvScratch, int> fitting(const ConvGeometry& g, ConvPass pass, DType dtype, int threads, std::span<std::byte> scratch) {
    const int64_t room = static_cast<int64_t>(scratch.size());
    for (int64_t chunk = chunk_images(g, dtype, threads);; chunk = std::max<int64_t>(chunk / 2, 1)) {
      const ConvScratch layout(g, pass, dtype, chunk);
      const int64_t fit = (room - layout.filters) / layout.per_thread;
      if (fit >= 1 || chunk == 1) return {layout, static_cast<int>(std::clamp<int64_t>(fit, 1, threads))};
    }
  }
  template <class T> T* col_of(std::byte* mine) const { return reinterpret_cast<T*>(mine); }
  template <class T> T* outputs_of(std::byte* mine) const { return reinterpret_cast<T*>(mine + col); }
  template <class T> T* partial_of(std::byte* mine) const { return reinterpret_cast<T*>(mine + col + outputs); }
  std::span<std::byte> product_of(std::byte* mine) const {
    return {mine + col + outputs + partial, static_cast<size_t>(product)};
  }
};

// The threads a pass over this many images uses: one per image up to the pool, only one for a
// batch of one (its products take the threads then).
int image_threads(const ConvGeometry& g) {
  const int64_t work = g.batch * g.filters * g.patch() * g.pixels();
  if (g.batch < 2 || work < (int64_t{1} << 18) || omp_in_parallel()) return 1;
  return static_cast<int>(std::min<int64_t>(num_threads(), g.batch));
}

// The filters as a matrix, O x patch, copied into `room` when their last three axes are not one run.
template <class T> const T* filter_matrix(const Tensor& w, const ConvGeometry& g, std::byte* room) {
  const Shape& s = w.strides();
  const bool runs = (g.kernel_w == 1 || s[3] == 1) && (g.kernel_h == 1 || s[2] == g.kernel_w) &&
                    (g.group_channels() == 1 || s[1] == g.kernel_h * g.kernel_w) && (g.filters == 1 || s[0] == g.patch());
  if (runs) return reinterpret_cast<const T*>(w.raw_data());
  T* copy = reinterpret_cast<T*>(room);
  const auto v = Strided4<const T>::of(w);
  int64_t at = 0;
  for (int64_t o = 0; o < g.filters; ++o)
    for (int64_t c = 0; c < g.group_channels(); ++c)
      for (int64_t i = 0; i < g.kernel_h; ++i)
        for (int64_t j = 0; j < g.kernel_w; ++j) copy[at++] = v.data[o * v.s0 + c * v.s1 + i * v.s2 + j * v.s3];
  return copy;
}

// Images [n0, n0 + count) of the output gradient side by side: rows[o, b * pixels + p].
template <class T> void gather_outputs(const Strided4<const T>& gy, const ConvGeometry& g, int64_t n0, int64_t count, T* rows) {
  const int64_t ld = count * g.pixels();
  for (int64_t b = 0; b < count; ++b)
    for (int64_t o = 0; o < g.filters; ++o) {
      const T* in = gy.data + (n0 + b) * gy.s0 + o * gy.s1;
      T* out = rows + o * ld + b * g.pixels();
      for (int64_t y = 0; y < g.out_h; ++y)
        for (int64_t x = 0; x < g.out_w; ++x) out[y * g.out_w + x] = in[y * gy.s2 + x * gy.s3];
    }
}

// The patches of one group of images [n0, n0 + count) side by side: image b's columns start at
// b * pixels, rows `count * pixels` apart.
template <class T> void unfold_chunk(const Strided4<const T>& x, const ConvGeometry& g, int64_t n0, int64_t count, int64_t group, T* col) {
  const int64_t ld = count * g.pixels();
  for (int64_t b = 0; b < count; ++b)
    unfold(g, x.data + (n0 + b) * x.s0 + group * g.group_channels() * x.s1, x.s1, x.s2, x.s3, col + b * g.pixels(), ld);
}

MatrixView matrix(const void* data, int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride) {
  return {static_cast<const std::byte*>(data), rows, cols, row_stride, col_stride};
}

// Runs body(first image, image count, thread scratch, thread, whether it is the thread's first
// chunk) for chunks of every image, the images shared among up to `threads`; returns the
// threads that ran (OpenMP may give fewer).
template <class Body> int for_each_chunk(const ConvGeometry& g, int threads, const ConvScratch& layout, std::byte* scratch, Body body) {
  if (threads == 1) {
    // One image's products below this many multiply-adds run faster on one thread than split
    // (LeNet's second layer at batch 1: 1.6 M, 0.047 ms on one thread, 0.087 ms on two).
    constexpr int64_t kThreadedProducts = int64_t{1} << 22;
    const bool single = g.group_filters() * g.patch() * g.pixels() * layout.chunk < kThreadedProducts;
    const int saved = omp_get_max_threads();
    if (single) omp_set_num_threads(1);
    try {
      for (int64_t n = 0; n < g.batch; n += layout.chunk) body(n, std::min(layout.chunk, g.batch - n), scratch, 0, n == 0);
    } catch (...) {
      if (single) omp_set_num_threads(saved);
      throw;
    }
    if (single) omp_set_num_threads(saved);
    return 1;
  }
  int ran = 1;
  parallel_region(threads, [&](int thread, int team) {
    if (thread == 0) ran = team;
    std::byte* mine = scratch + thread * layout.per_thread;
    const int64_t begin = g.batch * thread / team, end = g.batch * (thread + 1) / team;
    for (int64_t n = begin; n < end; n += layout.chunk) body(n, std::min(layout.chunk, end - n), mine, thread, n == begin);
  });
  return ran;
}

// What the three kernels share: their pass, where the input and the filters (or the shapes they
// stand for) are among the node's inputs, and the scratch that follows from them.
template <class OpClass, ConvPass kPass, size_t kInput, size_t kFilters> class ConvKernel : public KernelOf<OpClass> {
 public:
  using KernelOf<OpClass>::KernelOf;
  int64_t scratch_bytes(const std::vector<Shape>& in, const std::vector<Shape>&) const override {
    const ConvGeometry g = this->op().geometry(in[kInput], in[kFilters]);
    return ConvScratch::bytes(g, kPass, this->output_dtype(0), image_threads(g));
  }

 protected:
  ConvGeometry geometry(InputValues in) const { return this->op().geometry(in[kInput].shape(), in[kFilters].shape()); }
  // The layout of `scratch` for this run and the threads it has room for.
  std::pair<ConvScratch, int> layout(const ConvGeometry& g, std::span<std::byte> scratch) const {
    return ConvScratch::fitting(g, kPass, this->output_dtype(0), image_threads(g), scratch);
  }
};

class Conv2dKernel final : public ConvKernel<Conv2d, ConvPass::forward, 0, 1> {
 public:
  using ConvKernel::ConvKernel;
  void run(InputValues in, OutputValues out, std::span<std::byte> scratch) const override {
    const ConvGeometry g = geometry(in);
    dispatch_float(output_dtype(0), "conv2d", [&](auto tag) {
      using T = decltype(tag);
      const auto [layout, threads] = this->layout(g, scratch);
      const T* w = filter_matrix<T>(in[1], g, scratch.data() + threads * layout.per_thread);
      const auto x = Strided4<const T>::of(in[0]);
      T* y = out[0].template data<T>();
      const int64_t P = g.pixels(), Og = g.group_filters(), K = g.patch();
      for_each_chunk(g, threads, layout, scratch.data(), [&](int64_t n0, int64_t count, std::byte* mine, int, bool) {
        T* col = layout.col_of<T>(mine);
        T* rows = layout.outputs_of<T>(mine);
        const int64_t ld = count * P;
        for (int64_t group = 0; group < g.groups; ++group) {
          unfold_chunk(x, g, n0, count, group, col);
          // One image: straight into y; several: side by side, then each image's rows to its place.
          T* dest = count == 1 ? y + (n0 * g.filters + group * Og) * P : rows;
          gemm(output_dtype(0), Og, ld, K, 1.0, matrix(w + group * Og * K, Og, K, K, 1), matrix(col, K, ld, ld, 1), 0.0,
               reinterpret_cast<std::byte*>(dest), ld, layout.product_of(mine));
          if (count > 1)
            for (int64_t b = 0; b < count; ++b)
              for (int64_t o = 0; o < Og; ++o)
                std::copy_n(rows + o * ld + b * P, P, y + ((n0 + b) * g.filters + group * Og + o) * P);
        }
      });
    });
  }
};

class Conv2dGradInputKernel final : public ConvKernel<Conv2dGradInput, ConvPass::grad_input, 2, 1> {
 public:
  using ConvKernel::ConvKernel;
  void run(InputValues in, OutputValues out, std::span<std::byte> scratch) const override {
    const ConvGeometry g = geometry(in);
    dispatch_float(output_dtype(0), "conv2d_grad_input", [&](auto tag) {
      using T = decltype(tag);
      const auto [layout, threads] = this->layout(g, scratch);
      const T* w = filter_matrix<T>(in[1], g, scratch.data() + threads * layout.per_thread);
      const auto gy = Strided4<const T>::of(in[0]);
      T* gx = out[0].template data<T>();
      const int64_t P = g.pixels(), Og = g.group_filters(), K = g.patch(), plane = g.height * g.width;
      for_each_chunk(g, threads, layout, scratch.data(), [&](int64_t n0, int64_t count, std::byte* mine, int, bool) {
        T* col = layout.col_of<T>(mine);
        T* rows = layout.outputs_of<T>(mine);
        const int64_t ld = count * P;
        gather_outputs(gy, g, n0, count, rows);
        for (int64_t group = 0; group < g.groups; ++group) {
          // col (patch x chunk pixels) = W_g^T (patch x Og) gy_g (Og x chunk pixels)
          gemm(output_dtype(0), K, ld, Og, 1.0, matrix(w + group * Og * K, K, Og, 1, K), matrix(rows + group * Og * ld, Og, ld, ld, 1),
               0.0, reinterpret_cast<std::byte*>(col), ld, layout.product_of(mine));
          for (int64_t b = 0; b < count; ++b) fold(g, col + b * P, ld, gx + ((n0 + b) * g.channels + group * g.group_channels()) * plane);
        }
      });
    });
  }
};

class Conv2dGradFiltersKernel final : public ConvKernel<Conv2dGradFilters, ConvPass::grad_filters, 0, 2> {
 public:
  using ConvKernel::ConvKernel;
  void run(InputValues in, OutputValues out, std::span<std::byte> scratch) const override {
    const ConvGeometry g = geometry(in);
    dispatch_float(output_dtype(0), "conv2d_grad_filters", [&](auto tag) {
      using T = decltype(tag);
      const auto [layout, threads] = this->layout(g, scratch);
      const auto x = Strided4<const T>::of(in[0]);
      const auto gy = Strided4<const T>::of(in[1]);
      T* gw = out[0].template data<T>();
      const int64_t P = g.pixels(), Og = g.group_filters(), K = g.patch(), total = g.filters * K;
      // Each thread sums its chunks' products into its own share (the first thread straight into
      // gw), and the shares are added at the end.
      auto share = [&](int thread) { return thread == 0 ? gw : layout.partial_of<T>(scratch.data() + thread * layout.per_thread); };
      const int ran = for_each_chunk(g, threads, layout, scratch.data(), [&](int64_t n0, int64_t count, std::byte* mine, int thread, bool first) {
        T* col = layout.col_of<T>(mine);
        T* rows = layout.outputs_of<T>(mine);
        T* acc = share(thread);
        const int64_t ld = count * P;
        gather_outputs(gy, g, n0, count, rows);
        for (int64_t group = 0; group < g.groups; ++group) {
          unfold_chunk(x, g, n0, count, group, col);
          // gw_g (Og x patch) += gy_g (Og x chunk pixels) col^T (chunk pixels x patch)
          gemm(output_dtype(0), Og, K, ld, 1.0, matrix(rows + group * Og * ld, Og, ld, ld, 1), matrix(col, ld, K, 1, ld),
               first ? 0.0 : 1.0, reinterpret_cast<std::byte*>(acc + group * Og * K), K, layout.product_of(mine));
        }
      });
      if (g.batch == 0) std::fill_n(gw, total, T(0));
      for (int thread = 1; thread < ran; ++thread) {
        const T* part = share(thread);
        for (int64_t i = 0; i < total; ++i) gw[i] += part[i];
      }
    });
  }
};

}  // namespace

void add_conv_kernels(KernelTable& table) {
  table.add<Conv2d, Conv2dKernel>();
  table.add<Conv2dGradInput, Conv2dGradInputKernel>();
  table.add<Conv2dGradFilters, Conv2dGradFiltersKernel>();
}

Var conv2d(const Var& input, const Var& filters, const Conv2dOptions& options, Loc loc) {
  if (!input.defined() || !filters.defined()) throw TypeError("conv2d: an empty Var given (at " + loc_str(loc) + ")");
  // Bounded so that no geometry computed from them wraps around (a dilation near INT64_MAX made a
  // 3-row kernel fit a 2-row input).
  constexpr int64_t kLargest = std::numeric_limits<int32_t>::max();
  auto in_range = [&](const std::array<int64_t, 2>& v, const char* what) {
    if (v[0] < 1 || v[1] < 1 || v[0] > kLargest || v[1] > kLargest)
      throw ShapeError(std::string("conv2d: ") + what + " must be from 1 to " + std::to_string(kLargest) + " on both axes, got " +
                       pair_str(v) + " (at " + loc_str(loc) + ")");
  };
  in_range(options.stride, "stride");
  in_range(options.dilation, "dilation");
  if (options.groups < 1) throw ShapeError("conv2d: groups must be at least 1, got " + std::to_string(options.groups) + " (at " + loc_str(loc) + ")");
  const Padding& p = options.padding;
  if (p.rule == Padding::explicit_sides &&
      (std::min({p.top, p.bottom, p.left, p.right}) < 0 || std::max({p.top, p.bottom, p.left, p.right}) > kLargest))
    throw ShapeError("conv2d: padding must be from 0 to " + std::to_string(kLargest) + ", got " + padding_str(p) + " (at " +
                     loc_str(loc) + ")");
  return apply1(std::make_shared<Conv2d>(options), {input, filters}, loc);
}

}  // namespace kiln

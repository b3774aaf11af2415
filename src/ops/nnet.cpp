#include "ops/nnet.hpp"

#include <cmath>
#include <cstring>
#include <limits>

#include "kiln/ops.hpp"
#include "ops/scalar_math.hpp"
#include "ops/stable_forms.hpp"
#include "tensor/dispatch.hpp"
#include "tensor/isa.hpp"
#include "tensor/nd_loop.hpp"
#include "tensor/parallel.hpp"

namespace kiln {

namespace {

// t's geometry with `axis` moved last.
struct AxisLast {
  Dims shape, strides;
  int64_t offset;
  std::span<const int64_t> outer_shape() const { return std::span<const int64_t>(shape).first(shape.size() - 1); }
  std::span<const int64_t> outer_strides() const { return std::span<const int64_t>(strides).first(strides.size() - 1); }
};
AxisLast axis_last(const Tensor& t, int64_t axis) {
  AxisLast g{{}, {}, t.offset()};
  for (int64_t d = 0; d < t.ndim(); ++d)
    if (d != axis) g.shape.push_back(t.shape()[d]), g.strides.push_back(t.strides()[d]);
  g.shape.push_back(t.shape()[axis]);
  g.strides.push_back(t.strides()[axis]);
  return g;
}

template <class T>
void softmax_row(const T* x, int64_t sx, T* y, int64_t sy, int64_t n, bool log) {
  T mx = -std::numeric_limits<T>::infinity();
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, x[i * sx]);
  if (!std::isfinite(mx)) mx = 0;
  // f32 rows sum in f64: a long row would otherwise lose digits.
  double total = 0;
  if (sx == 1 && sy == 1) {
    for (int64_t i = 0; i < n; ++i) y[i] = fastmath::exp(x[i] - mx);
    for (int64_t i = 0; i < n; ++i) total += y[i];
  } else {
    for (int64_t i = 0; i < n; ++i) total += (y[i * sy] = fastmath::exp(x[i * sx] - mx));
  }
  if (log) {
    const T log_total = static_cast<T>(std::log(total));
    for (int64_t i = 0; i < n; ++i) y[i * sy] = (x[i * sx] - mx) - log_total;
  } else {
    const T inv = static_cast<T>(1 / total);
    for (int64_t i = 0; i < n; ++i) y[i * sy] *= inv;
  }
}

}  // namespace

std::vector<Type> Softmax::infer_types(const std::vector<Type>& in) const {
  if (!is_float(in[0].dtype)) throw TypeError(name() + ": needs a float input, got " + in[0].str());
  if (axis_ >= in[0].ndim()) throw TypeError(name() + ": axis out of range for " + in[0].str());
  return {in[0]};
}

std::vector<Shape> Softmax::infer_shapes(const std::vector<Shape>& in, const std::vector<const Tensor*>&) const {
  return {in[0]};
}


std::vector<Var> Softmax::L_op(const Node& node, const std::vector<Var>& gouts) const {
  const Loc loc = node.loc;
  const Var y = node.output(0);
  const Var& g = gouts[0];
  if (log_) return {g - exp(y, loc) * sum(g, {axis_}, true, loc)};
  return {apply1(std::make_shared<SoftmaxGrad>(axis_), {g, y}, loc)};
}

std::vector<Type> SoftmaxGrad::infer_types(const std::vector<Type>& in) const {
  if (in[0].dtype != in[1].dtype || in[0].ndim() != in[1].ndim())
    throw TypeError(name() + ": gradient " + in[0].str() + " and softmax " + in[1].str() + " differ");
  return {in[1]};
}

std::vector<Shape> SoftmaxGrad::infer_shapes(const std::vector<Shape>& in, const std::vector<const Tensor*>&) const {
  if (in[0] != in[1]) throw ShapeError(name() + ": gradient " + shape_str(in[0]) + " and softmax " + shape_str(in[1]) + " differ");
  return {in[1]};
}


std::vector<Var> SoftmaxGrad::L_op(const Node& node, const std::vector<Var>& gouts) const {
  // out_j = (gy_j - s) y_j with s = sum_k gy_k y_k. For an output gradient G and t = sum_j G_j y_j:
  // d/dgy_i = y_i (G_i - t) = softmax_grad(G, y)_i;  d/dy_i = G_i (gy_i - s) - gy_i t.
  const Loc loc = node.loc;
  const Var &gy = node.inputs[0], &y = node.inputs[1], &G = gouts[0];
  Var s = sum(gy * y, {axis_}, true, loc), t = sum(G * y, {axis_}, true, loc);
  return {apply1(std::make_shared<SoftmaxGrad>(axis_), {G, y}, loc), G * (gy - s) - gy * t};
}

std::vector<Type> CrossEntropy::infer_types(const std::vector<Type>& in) const {
  const Type &p = in[0], &labels = in[1];
  if (!is_float(p.dtype) || p.ndim() != 2 || !is_integer(labels.dtype) || labels.ndim() != 1)
    throw TypeError("categorical_crossentropy: needs float probabilities N x C and integer labels of length N, got " +
                    p.str() + " and " + labels.str());
  return {Type{p.dtype, {p.broadcastable[0]}}};
}

std::vector<Shape> CrossEntropy::infer_shapes(const std::vector<Shape>& in, const std::vector<const Tensor*>&) const {
  if (in[1][0] != in[0][0])
    throw ShapeError("categorical_crossentropy: " + std::to_string(in[0][0]) + " rows of probabilities " + shape_str(in[0]) +
                     " but " + std::to_string(in[1][0]) + " labels");
  return {Shape{in[0][0]}};
}



std::vector<Var> CrossEntropy::L_op(const Node& node, const std::vector<Var>& gouts) const {
  return {apply1(std::make_shared<CrossEntropyGrad>(), {gouts[0], node.inputs[0], node.inputs[1]}, node.loc), Var()};
}

std::vector<Type> CrossEntropyGrad::infer_types(const std::vector<Type>& in) const {
  if (in[0].dtype != in[1].dtype)
    throw TypeError(name() + ": gradient " + in[0].str() + " and probabilities " + in[1].str() + " differ in dtype");
  return {in[1]};
}

std::vector<Shape> CrossEntropyGrad::infer_shapes(const std::vector<Shape>& in, const std::vector<const Tensor*>&) const {
  return {in[1]};
}


std::vector<Var> CrossEntropyGrad::L_op(const Node& node, const std::vector<Var>& gouts) const {
  // out_ij = -g_i h_ij / p_ij with h the one-hot labels. For an output gradient G:
  // d/dg_i = -sum_j G_ij h_ij / p_ij;  d/dp_ij = G_ij g_i h_ij / p_ij^2.
  const Loc loc = node.loc;
  const Var &g = node.inputs[0], &p = node.inputs[1], &G = gouts[0];
  Var h = apply1(std::make_shared<OneHot>(), {node.inputs[2], p}, loc);
  return {-sum(G * h / p, {1}, false, loc), G * dimshuffle(g, {0, -1}, loc) * h / (p * p), Var()};
}

std::vector<Type> OneHot::infer_types(const std::vector<Type>& in) const {
  if (!is_integer(in[0].dtype) || in[0].ndim() != 1 || in[1].ndim() != 2)
    throw TypeError("onehot: needs integer labels of length N and an N x C value, got " + in[0].str() + " and " + in[1].str());
  return {Type{in[1].dtype, in[1].broadcastable}};
}

std::vector<Shape> OneHot::infer_shapes(const std::vector<Shape>& in, const std::vector<const Tensor*>&) const {
  if (in[0][0] != in[1][0])
    throw ShapeError("onehot: " + std::to_string(in[0][0]) + " labels for " + std::to_string(in[1][0]) + " rows");
  return {in[1]};
}


std::vector<Type> CrossEntropySoftmax::infer_types(const std::vector<Type>& in) const {
  return CrossEntropy().infer_types(in);
}

std::vector<Shape> CrossEntropySoftmax::infer_shapes(const std::vector<Shape>& in, const std::vector<const Tensor*>& v) const {
  return CrossEntropy().infer_shapes(in, v);
}



std::vector<Var> CrossEntropySoftmax::L_op(const Node& node, const std::vector<Var>& gouts) const {
  return {apply1(std::make_shared<CrossEntropySoftmaxGrad>(), {gouts[0], node.inputs[0], node.inputs[1]}, node.loc), Var()};
}

std::vector<Type> CrossEntropySoftmaxGrad::infer_types(const std::vector<Type>& in) const {
  if (in[0].dtype != in[1].dtype)
    throw TypeError(name() + ": gradient " + in[0].str() + " and logits " + in[1].str() + " differ in dtype");
  return {in[1]};
}

std::vector<Shape> CrossEntropySoftmaxGrad::infer_shapes(const std::vector<Shape>& in, const std::vector<const Tensor*>&) const {
  return {in[1]};
}


std::vector<Var> CrossEntropySoftmaxGrad::L_op(const Node& node, const std::vector<Var>& gouts) const {
  // out_ij = g_i (softmax(x)_ij - h_ij) with h the one-hot labels. For an output gradient G:
  // d/dg_i = sum_j G_ij (softmax(x)_ij - h_ij);  d/dx = softmax_grad(G * g, softmax(x)).
  const Loc loc = node.loc;
  const Var &g = node.inputs[0], &x = node.inputs[1], &G = gouts[0];
  Var h = apply1(std::make_shared<OneHot>(), {node.inputs[2], x}, loc);
  Var sm = softmax(x, 1, loc);
  Var gx = apply1(std::make_shared<SoftmaxGrad>(1), {G * dimshuffle(g, {0, -1}, loc), sm}, loc);
  return {sum(G * (sm - h), {1}, false, loc), gx, Var()};
}

namespace {

// A 1-D integer tensor's labels, read in place, each checked on construction to name one of
// `classes` classes.
class CheckedLabels {
 public:
  CheckedLabels(const Tensor& labels, int64_t classes, const char* op) : labels_(labels) {
    for (int64_t i = 0; i < size(); ++i)
      if (const int64_t l = (*this)[i]; l < 0 || l >= classes)
        throw ShapeError(std::string(op) + ": label " + std::to_string(l) + " of row " + std::to_string(i) + " is not a class in [0, " +
                         std::to_string(classes) + ")");
  }
  int64_t size() const { return labels_.shape()[0]; }
  int64_t operator[](int64_t i) const {
    const int64_t at = labels_.offset() + i * labels_.strides()[0];
    const std::byte* base = labels_.storage()->data();
    switch (labels_.dtype()) {
      case DType::i64: return reinterpret_cast<const int64_t*>(base)[at];
      case DType::i32: return reinterpret_cast<const int32_t*>(base)[at];
      default: return static_cast<int64_t>(labels_.item_as_double(i));
    }
  }

 private:
  const Tensor& labels_;
};

// The softmax parts of every row of a 2-D x, for the fused cross-entropies: each row's maximum
// and the sum of exp(x - max) in f64, the exps computed many at a time in one vectorized loop
// (kiln's exp for f32, within an ulp or two; libm's for f64). With `exps` (row-major, x's shape; it
// may be x itself) they are kept there; without, they pass through a buffer on the stack. Rows go
// in groups, each row's maximum taken before its exps may overwrite it, and are split over
// threads when there are enough. row_fn(i, max, total) then finishes row i.
template <class T, class F> void for_each_softmax_row(const Tensor& x, T* exps, F row_fn) {
  const T* px = reinterpret_cast<const T*>(x.storage()->data()) + x.offset();
  const int64_t rows = x.shape()[0], n = x.shape()[1], rs = x.strides()[0], cs = x.strides()[1];
  constexpr int64_t kBuffer = 2048, kGroup = 64;
  auto exp_in_place = [](T* e, int64_t count) {
    if constexpr (std::is_same_v<T, float>) {
#pragma omp simd
      for (int64_t j = 0; j < count; ++j) e[j] = fastmath::exp_f32(e[j]);
    } else {
      for (int64_t j = 0; j < count; ++j) e[j] = std::exp(e[j]);
    }
  };
  auto run_rows = [&](int64_t first, int64_t last) {
    T maxima[kGroup];
    double totals[kGroup];
    alignas(64) T buffer[kBuffer];
    // Without `exps`, as many rows as fit in the buffer go at once; a row longer than the buffer
    // goes alone, a buffer's length at a time.
    const bool whole_rows = exps || n <= kBuffer;
    const int64_t group = exps ? kGroup : std::clamp<int64_t>(kBuffer / std::max<int64_t>(n, 1), 1, kGroup);
    for (int64_t g = first; g < last; g += group) {
      const int64_t group_end = std::min(last, g + group), count = group_end - g;
      for_this_cpu([&] {
        for (int64_t r = 0; r < count; ++r) {
          const T* row = px + (g + r) * rs;
          T mx = -std::numeric_limits<T>::infinity();
          for (int64_t j = 0; j < n; ++j) mx = std::max(mx, row[j * cs]);
          maxima[r] = mx;
          totals[r] = 0;
        }
        if (whole_rows) {
          T* e = exps ? exps + g * n : buffer;
          for (int64_t r = 0; r < count; ++r)
            for (int64_t j = 0; j < n; ++j) e[r * n + j] = px[(g + r) * rs + j * cs] - maxima[r];
          exp_in_place(e, count * n);
          for (int64_t r = 0; r < count; ++r)
            for (int64_t j = 0; j < n; ++j) totals[r] += e[r * n + j];
          return;
        }
        const T* row = px + g * rs;
        for (int64_t j0 = 0; j0 < n; j0 += kBuffer) {
          const int64_t len = std::min(kBuffer, n - j0);
          for (int64_t j = 0; j < len; ++j) buffer[j] = row[(j0 + j) * cs] - maxima[0];
          exp_in_place(buffer, len);
          for (int64_t j = 0; j < len; ++j) totals[0] += buffer[j];
        }
      });
      for (int64_t r = 0; r < count; ++r) row_fn(g + r, maxima[r], totals[r]);
    }
  };
  const int threads = rows * n >= (1 << 14) && !omp_in_parallel() ? static_cast<int>(std::min<int64_t>(num_threads(), rows)) : 1;
  if (threads <= 1) return run_rows(0, rows);
  parallel_region(threads, [&](int t, int nt) { run_rows(rows * t / nt, rows * (t + 1) / nt); });
}

class SoftmaxKernel final : public KernelOf<Softmax> {
 public:
  using KernelOf::KernelOf;
  void run(InputValues in, OutputValues out, std::span<std::byte>) const override {
    const bool log = op().is_log();
    const AxisLast x = axis_last(in[0], op().axis()), y = axis_last(out[0], op().axis());
    const int64_t n = x.shape.back();
    const int64_t sx = x.strides.back(), sy = y.strides.back();
    auto loop = collapse_loop<2>(x.outer_shape(), {y.outer_strides(), x.outer_strides()}, {y.offset, x.offset});
    dispatch_float(in[0].dtype(), "softmax", [&](auto tag) {
      using T = decltype(tag);
      const T* px = reinterpret_cast<const T*>(in[0].storage()->data());
      T* py = reinterpret_cast<T*>(out[0].storage()->data());
      run_loop(loop, [&](int64_t rows, std::array<int64_t, 2> off, std::array<int64_t, 2> st) {
        for (int64_t r = 0; r < rows; ++r) softmax_row<T>(px + off[1] + r * st[1], sx, py + off[0] + r * st[0], sy, n, log);
      }, std::max<int64_t>(1, (1 << 14) / std::max<int64_t>(n, 1)));
    });
  }
};

class SoftmaxGradKernel final : public KernelOf<SoftmaxGrad> {
 public:
  using KernelOf::KernelOf;
  void run(InputValues in, OutputValues out, std::span<std::byte>) const override {
    const int64_t axis = op().axis();
    const AxisLast g = axis_last(in[0], axis), y = axis_last(in[1], axis), o = axis_last(out[0], axis);
    const int64_t n = y.shape.back();
    auto loop = collapse_loop<3>(y.outer_shape(), {o.outer_strides(), g.outer_strides(), y.outer_strides()},
                                 {o.offset, g.offset, y.offset});
    const int64_t so = o.strides.back(), sg = g.strides.back(), sy = y.strides.back();
    dispatch_float(in[1].dtype(), "softmax_grad", [&](auto tag) {
      using T = decltype(tag);
      T* po = reinterpret_cast<T*>(out[0].storage()->data());
      const T* pg = reinterpret_cast<const T*>(in[0].storage()->data());
      const T* py = reinterpret_cast<const T*>(in[1].storage()->data());
      run_loop(loop, [&](int64_t rows, std::array<int64_t, 3> off, std::array<int64_t, 3> st) {
        for (int64_t r = 0; r < rows; ++r) {
          T* orow = po + off[0] + r * st[0];
          const T* grow = pg + off[1] + r * st[1];
          const T* yrow = py + off[2] + r * st[2];
          T dot = 0;
          for (int64_t i = 0; i < n; ++i) dot += grow[i * sg] * yrow[i * sy];
          for (int64_t i = 0; i < n; ++i) orow[i * so] = (grow[i * sg] - dot) * yrow[i * sy];
        }
      }, std::max<int64_t>(1, (1 << 14) / std::max<int64_t>(n, 1)));
    });
  }
};

class CrossEntropyKernel final : public KernelOf<CrossEntropy> {
 public:
  using KernelOf::KernelOf;
  void run(InputValues in, OutputValues out, std::span<std::byte>) const override {
    const Tensor& p = in[0];
    const CheckedLabels labels(in[1], p.shape()[1], "categorical_crossentropy");
    dispatch_float(p.dtype(), "categorical_crossentropy", [&](auto tag) {
      using T = decltype(tag);
      const T* pp = reinterpret_cast<const T*>(p.storage()->data());
      T* po = out[0].data<T>();
      for (int64_t i = 0; i < labels.size(); ++i) po[i] = -std::log(pp[p.offset() + i * p.strides()[0] + labels[i] * p.strides()[1]]);
    });
  }
};

class CrossEntropyGradKernel final : public KernelOf<CrossEntropyGrad> {
 public:
  using KernelOf::KernelOf;
  void run(InputValues in, OutputValues out, std::span<std::byte>) const override {
    const Tensor &g = in[0], &p = in[1];
    const CheckedLabels labels(in[2], p.shape()[1], "categorical_crossentropy_grad");
    Tensor& o = out[0];
    std::memset(o.raw_data(), 0, o.nbytes());
    dispatch_float(p.dtype(), "categorical_crossentropy_grad", [&](auto tag) {
      using T = decltype(tag);
      const T* pp = reinterpret_cast<const T*>(p.storage()->data());
      const T* pg = reinterpret_cast<const T*>(g.storage()->data());
      T* po = o.data<T>();
      const int64_t c = p.shape()[1];
      for (int64_t r = 0; r < labels.size(); ++r)
        po[r * c + labels[r]] = -pg[g.offset() + r * g.strides()[0]] / pp[p.offset() + r * p.strides()[0] + labels[r] * p.strides()[1]];
    });
  }
};

class OneHotKernel final : public KernelOf<OneHot> {
 public:
  using KernelOf::KernelOf;
  void run(InputValues in, OutputValues out, std::span<std::byte>) const override {
    const CheckedLabels labels(in[0], in[1].shape()[1], "onehot");
    Tensor& o = out[0];
    std::memset(o.raw_data(), 0, o.nbytes());
    dispatch_float(o.dtype(), "onehot", [&](auto tag) {
      using T = decltype(tag);
      T* p = o.data<T>();
      for (int64_t i = 0; i < labels.size(); ++i) p[i * o.shape()[1] + labels[i]] = T(1);
    });
  }
};

class CrossEntropySoftmaxKernel final : public KernelOf<CrossEntropySoftmax> {
 public:
  using KernelOf::KernelOf;
  void run(InputValues in, OutputValues out, std::span<std::byte>) const override {
    const Tensor& x = in[0];
    const CheckedLabels labels(in[1], x.shape()[1], "crossentropy_softmax");
    dispatch_float(x.dtype(), "crossentropy_softmax", [&](auto tag) {
      using T = decltype(tag);
      T* po = out[0].data<T>();
      const T* px = reinterpret_cast<const T*>(x.storage()->data()) + x.offset();
      // -log softmax(x)_label = (max - x_label) + log(total), the two parts kept apart: adding them
      // first would round the small second part to the precision of the large first one.
      for_each_softmax_row<T>(x, static_cast<T*>(nullptr), [&](int64_t i, T mx, double total) {
        const T label_value = px[i * x.strides()[0] + labels[i] * x.strides()[1]];
        po[i] = std::isfinite(mx) ? static_cast<T>(static_cast<double>(mx - label_value) + std::log(total))
                                  : static_cast<T>(mx - label_value);
      });
    });
  }
};

class CrossEntropySoftmaxGradKernel final : public KernelOf<CrossEntropySoftmaxGrad> {
 public:
  using KernelOf::KernelOf;
  void run(InputValues in, OutputValues out, std::span<std::byte>) const override {
    const Tensor &g = in[0], &x = in[1];
    const CheckedLabels labels(in[2], x.shape()[1], "crossentropy_softmax_grad");
    dispatch_float(x.dtype(), "crossentropy_softmax_grad", [&](auto tag) {
      using T = decltype(tag);
      T* po = out[0].data<T>();
      const T* pg = reinterpret_cast<const T*>(g.storage()->data());
      const int64_t n = x.shape()[1];
      // g_i (softmax(x)_i - onehot(label_i)), the exps computed in the output itself (a row whose
      // maximum is not finite: g_i exp(x - max), as its log-sum-exp is then the maximum).
      for_each_softmax_row<T>(x, po, [&](int64_t i, T mx, double total) {
        const T gi = pg[g.offset() + i * g.strides()[0]];
        const double divisor = std::isfinite(mx) ? total : 1.0;
        T* orow = po + i * n;
        for (int64_t j = 0; j < n; ++j) orow[j] = gi * static_cast<T>(orow[j] / divisor);
        orow[labels[i]] -= gi;
      });
    });
  }
};

}  // namespace

void add_nnet_kernels(KernelTable& table) {
  table.add<Softmax, SoftmaxKernel>();
  table.add<SoftmaxGrad, SoftmaxGradKernel>();
  table.add<CrossEntropy, CrossEntropyKernel>();
  table.add<CrossEntropyGrad, CrossEntropyGradKernel>();
  table.add<OneHot, OneHotKernel>();
  table.add<CrossEntropySoftmax, CrossEntropySoftmaxKernel>();
  table.add<CrossEntropySoftmaxGrad, CrossEntropySoftmaxGradKernel>();
}

namespace {
int64_t checked_axis(int64_t axis, const Var& x, const char* op, const Loc& loc) {
  const int64_t a = axis < 0 ? axis + x.ndim() : axis;
  if (a < 0 || a >= x.ndim())
    throw TypeError(std::string(op) + ": axis " + std::to_string(axis) + " is out of range for " + x.type().str() +
                    " (at " + loc_str(loc) + ")");
  return a;
}
}  // namespace

Var softmax(const Var& x, int64_t axis, Loc loc) {
  Var xf = is_float(x.dtype()) ? x : cast(x, DType::f64, loc);
  return apply1(std::make_shared<Softmax>(checked_axis(axis, x, "softmax", loc), false), {xf}, loc);
}

Var log_softmax(const Var& x, int64_t axis, Loc loc) {
  Var xf = is_float(x.dtype()) ? x : cast(x, DType::f64, loc);
  return apply1(std::make_shared<Softmax>(checked_axis(axis, x, "log_softmax", loc), true), {xf}, loc);
}

Var binary_crossentropy(const Var& output, const Var& target, Loc loc) {
  // Every node at the caller's line, so that a shape error names it.
  const auto at = [&](const Var& v) { return Operand(v, loc); };
  const Var log_p = stabilized(log(output, loc));
  const Var log_not_p = stabilized(log(Operand(1.0, loc) - at(output), loc));
  const Var not_target = Operand(1.0, loc) - at(target);
  return -at(at(at(target) * at(log_p)) + at(at(not_target) * at(log_not_p)));
}

Var categorical_crossentropy(const Var& probs, const Var& labels, Loc loc) {
  if (is_float(labels.dtype()) && labels.ndim() == probs.ndim())
    return -Operand(sum(Operand(labels, loc) * Operand(stabilized(log(probs, loc)), loc), {-1}, false, loc), loc);
  return stabilized(apply1(std::make_shared<CrossEntropy>(), {probs, labels}, loc));
}

}  // namespace kiln

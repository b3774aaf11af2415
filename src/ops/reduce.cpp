#include "ops/reduce.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kiln/ops.hpp"
#include "ops/elemwise.hpp"
#include "ops/scalar_ops.hpp"
#include "tensor/copy.hpp"
#include "tensor/dispatch.hpp"
#include "tensor/nd_loop.hpp"

namespace kiln {

namespace {

const char* kind_name(ReduceKind k) {
  switch (k) {
    case ReduceKind::sum: return "sum";
    case ReduceKind::prod: return "prod";
    case ReduceKind::max: return "max";
    case ReduceKind::min: return "min";
    case ReduceKind::mean: return "mean";
    case ReduceKind::argmax: return "argmax";
    case ReduceKind::argmin: return "argmin";
  }
  return "?";
}

bool contains(std::span<const int64_t> v, int64_t x) { return std::find(v.begin(), v.end(), x) != v.end(); }

// Sums a run of n elements pairwise (as NumPy does): blocks of 128 are summed in 8 lanes, and the
// block sums are combined as a balanced binary tree through a carry stack. The rounding error
// grows with log n instead of n; no recursion, so each instruction set gets its own copy inlined.
template <class Acc, class T> Acc pairwise_sum(const T* x, int64_t n, int64_t stride) {
  constexpr int64_t kBlock = 128;
  Acc stack[64];
  int depth = 0;
  for (int64_t start = 0, block = 0; start < n; start += kBlock, ++block) {
    const T* b = x + start * stride;
    const int64_t m = std::min(kBlock, n - start);
    Acc lanes[8] = {};
    int64_t i = 0;
    for (; i + 8 <= m; i += 8)
      for (int l = 0; l < 8; ++l) lanes[l] += static_cast<Acc>(b[(i + l) * stride]);
    Acc sum = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
    for (; i < m; ++i) sum += static_cast<Acc>(b[i * stride]);
    for (int64_t carry = block; carry & 1; carry >>= 1) sum = stack[--depth] + sum;
    stack[depth++] = sum;
  }
  Acc total = 0;
  while (depth > 0) total = stack[--depth] + total;
  return total;
}

// Combines runs element by element; the sum uses pairwise_sum instead.
template <class Acc, class T, class F> struct SequentialRun {
  F combine;
  Acc operator()(Acc acc, const T* x, int64_t n, int64_t stride) const {
    for (int64_t i = 0; i < n; ++i) acc = combine(acc, static_cast<Acc>(x[i * stride]));
    return acc;
  }
};

template <class Acc, class T, class F, class Run>
void reduce_loop(const Tensor& in, Acc* out, int64_t out_numel, std::span<const int64_t> axes, Acc init, F combine,
                 Run run) {
  // Walk the input in memory order; the output is seen through strides that are 0 on reduced axes.
  Dims out_strides(static_cast<size_t>(in.ndim()), 0);
  int64_t s = 1;
  for (int64_t d = in.ndim() - 1; d >= 0; --d) {
    if (contains(axes, d)) continue;
    out_strides[static_cast<size_t>(d)] = s;
    s *= in.shape()[d];
  }
  std::fill_n(out, out_numel, init);
  const T* pi = reinterpret_cast<const T*>(in.raw_data());
  auto loop = collapse_loop<2>(in.shape(), {out_strides, in.strides()});
  const int64_t inner = loop.shape.empty() ? 1 : loop.shape.back();
  run_loop_range(loop, 0, in.numel() / std::max<int64_t>(inner, 1), 0, inner,
                 [&](int64_t n, std::array<int64_t, 2> off, std::array<int64_t, 2> st) {
                   Acc* o = out + off[0];
                   const T* x = pi + off[1];
                   if (st[0] == 0) {
                     *o = st[1] == 1 ? run(*o, x, n, 1) : run(*o, x, n, st[1]);
                   } else {
                     for (int64_t i = 0; i < n; ++i) o[i * st[0]] = combine(o[i * st[0]], static_cast<Acc>(x[i * st[1]]));
                   }
                 });
}

// What a sum accumulates in: f64 for f32 (then narrowed), the output's own dtype otherwise.
template <class O> using SumAccumulator = std::conditional_t<std::is_same_v<O, float>, double, O>;

// out (contiguous, dtype O) = the sum of in (dtype T) over axes. An f32 sum accumulates in f64 in
// `scratch` (sum_scratch_bytes), then narrows.
template <class O, class T> void reduce_sum(const Tensor& in, O* out, int64_t out_numel, std::span<const int64_t> axes,
                                            std::span<std::byte> scratch) {
  using Acc = SumAccumulator<O>;
  // The rows of a contiguous matrix summed into one (a bias gradient): the order reduce_loop adds
  // them in, row after row, without its setup.
  if (in.ndim() == 2 && axes.size() == 1 && axes[0] == 0 && in.is_contiguous()) {
    const int64_t rows = in.shape()[0], cols = in.shape()[1];
    Acc* acc = std::is_same_v<Acc, O> ? reinterpret_cast<Acc*>(out) : reinterpret_cast<Acc*>(scratch.data());
    const T* x = reinterpret_cast<const T*>(in.raw_data());
    for_this_cpu([acc, x, rows, cols] {
      std::fill_n(acc, cols, Acc(0));
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) acc[c] = wrapping_add(acc[c], static_cast<Acc>(x[r * cols + c]));
    });
    if constexpr (!std::is_same_v<Acc, O>)
      for (int64_t c = 0; c < cols; ++c) out[c] = static_cast<O>(acc[c]);
    return;
  }
  auto add = [](Acc a, Acc b) { return wrapping_add(a, b); };
  auto run = [](Acc acc, const T* x, int64_t n, int64_t stride) {
    if constexpr (std::is_floating_point_v<Acc> && std::is_floating_point_v<T>) {
      return static_cast<Acc>(acc + pairwise_sum<Acc>(x, n, stride));
    } else {
      for (int64_t i = 0; i < n; ++i) acc = wrapping_add(acc, static_cast<Acc>(x[i * stride]));
      return acc;
    }
  };
  if constexpr (std::is_same_v<Acc, O>) {
    reduce_loop<O, T>(in, out, out_numel, axes, O(0), add, run);
  } else {
    Acc* wide = reinterpret_cast<Acc*>(scratch.data());
    reduce_loop<Acc, T>(in, wide, out_numel, axes, Acc(0), add, run);
    for (int64_t i = 0; i < out_numel; ++i) out[i] = static_cast<O>(wide[i]);
  }
}

template <class T> T lowest_of() {
  if constexpr (std::numeric_limits<T>::has_infinity) return -std::numeric_limits<T>::infinity();
  else return std::numeric_limits<T>::lowest();
}
template <class T> T highest_of() {
  if constexpr (std::numeric_limits<T>::has_infinity) return std::numeric_limits<T>::infinity();
  else return std::numeric_limits<T>::max();
}

// The scratch an f32 sum into an output of out_numel elements needs for its f64 accumulators.
int64_t sum_scratch_bytes(DType out_dtype, int64_t out_numel) {
  return out_dtype == DType::f32 ? out_numel * static_cast<int64_t>(sizeof(double)) : 0;
}

// out (contiguous) = the reduction of in over axes, converting in's dtype to out's on the fly.
void reduce_into(ReduceKind kind, const Tensor& in, const Tensor& out, std::span<const int64_t> axes,
                 std::span<std::byte> scratch) {
  const int64_t n_out = out.numel();
  dispatch_dtype(out.dtype(), [&](auto out_tag) {
    using O = decltype(out_tag);
    dispatch_dtype(in.dtype(), [&](auto in_tag) {
      using T = decltype(in_tag);
      O* po = reinterpret_cast<O*>(out.raw_data());
      if constexpr (std::is_same_v<O, bool>) {
        throw TypeError(std::string(kind_name(kind)) + ": no kernel for a b8 result");
      } else if (kind == ReduceKind::sum || kind == ReduceKind::mean) {
        reduce_sum<O, T>(in, po, n_out, axes, scratch);
        if (kind == ReduceKind::mean) {
          int64_t count = 1;
          for (int64_t a : axes) count *= in.shape()[a];
          // Divided, not multiplied by 1/count: the mean of equal values is that value exactly.
          for (int64_t i = 0; i < n_out; ++i) po[i] = static_cast<O>(po[i] / static_cast<O>(count));
        }
      } else {
        auto sequential = [](auto combine) { return SequentialRun<O, T, decltype(combine)>{combine}; };
        auto times = [](O a, O b) { return wrapping_mul(a, b); };
        // Floats start from -inf (+inf), so max({-inf}) is -inf; a NaN wins and stays.
        auto is_nan = [](O v) {
          if constexpr (std::is_floating_point_v<O>) return std::isnan(v);
          else return false;
        };
        auto larger = [is_nan](O a, O b) { return (b > a || is_nan(b)) ? b : a; };
        auto smaller = [is_nan](O a, O b) { return (b < a || is_nan(b)) ? b : a; };
        switch (kind) {
          case ReduceKind::prod: return reduce_loop<O, T>(in, po, n_out, axes, O(1), times, sequential(times));
          case ReduceKind::max: return reduce_loop<O, T>(in, po, n_out, axes, lowest_of<O>(), larger, sequential(larger));
          case ReduceKind::min: return reduce_loop<O, T>(in, po, n_out, axes, highest_of<O>(), smaller, sequential(smaller));
          default: throw Error("reduce: unexpected kind");
        }
      }
    });
  });
}

// The index of the first maximum (minimum with `smallest`; the first NaN, as NumPy says) along one
// axis, or over all axes in row-major order, read through the input's strides.
void argmax_into(const Tensor& in, const Tensor& out, const std::vector<int64_t>& axes, bool smallest) {
  int64_t* po = reinterpret_cast<int64_t*>(out.raw_data());
  dispatch_dtype(in.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* base = reinterpret_cast<const T*>(in.raw_data());
    auto better = [smallest](T candidate, T best) {
      return best == best && ((smallest ? candidate < best : candidate > best) || candidate != candidate);
    };
    if (axes.size() == static_cast<size_t>(in.ndim())) {
      int64_t index = 0, best = 0;
      const T* best_value = nullptr;
      auto loop = collapse_loop<1>(in.shape(), {in.strides()});
      const int64_t inner = loop.shape.empty() ? 1 : loop.shape.back();
      run_loop_range(loop, 0, in.numel() / std::max<int64_t>(inner, 1), 0, inner,
                     [&](int64_t n, std::array<int64_t, 1> off, std::array<int64_t, 1> st) {
                       for (int64_t i = 0; i < n; ++i, ++index) {
                         const T* x = base + off[0] + i * st[0];
                         if (!best_value || better(*x, *best_value)) best_value = x, best = index;
                       }
                     });
      po[0] = best;
      return;
    }
    const int64_t axis = axes[0], n = in.shape()[axis], step = in.strides()[axis];
    Dims rows_shape, rows_strides, out_strides;
    int64_t stride = 1;
    for (int64_t d = in.ndim() - 1; d >= 0; --d) {
      if (d == axis) continue;
      rows_shape.push_back(in.shape()[d]);
      rows_strides.push_back(in.strides()[d]);
      out_strides.push_back(stride);
      stride *= in.shape()[d];
    }
    std::reverse(rows_shape.begin(), rows_shape.end());
    std::reverse(rows_strides.begin(), rows_strides.end());
    std::reverse(out_strides.begin(), out_strides.end());
    auto loop = collapse_loop<2>(rows_shape, {out_strides, rows_strides});
    const int64_t inner = loop.shape.empty() ? 1 : loop.shape.back();
    run_loop_range(loop, 0, out.numel() / std::max<int64_t>(inner, 1), 0, inner,
                   [&](int64_t m, std::array<int64_t, 2> off, std::array<int64_t, 2> st) {
                     for (int64_t r = 0; r < m; ++r) {
                       const T* row = base + off[1] + r * st[1];
                       int64_t best = 0;
                       for (int64_t i = 1; i < n; ++i)
                         if (better(row[i * step], row[best * step])) best = i;
                       po[off[0] + r * st[0]] = best;
                     }
                   });
  });
}

class ReduceKernel final : public KernelOf<Reduce> {
 public:
  using KernelOf::KernelOf;
  int64_t scratch_bytes(const std::vector<Shape>&, const std::vector<Shape>& out) const override {
    if (op().kind() != ReduceKind::sum && op().kind() != ReduceKind::mean) return 0;
    return sum_scratch_bytes(output_dtype(0), shape_numel(out[0]));
  }
  void run(InputValues in, OutputValues out, std::span<std::byte> scratch) const override {
    if (op().kind() == ReduceKind::argmax || op().kind() == ReduceKind::argmin)
      return argmax_into(in[0], out[0], op().axes(), op().kind() == ReduceKind::argmin);
    reduce_into(op().kind(), in[0], out[0], op().axes(), scratch);
  }
};

// log(sum(exp(x - m))) + m with m the maximum over the axes (0 where it is not finite): scratch
// holds m and the f64 sums.
class LogSumExpKernel final : public KernelOf<LogSumExp> {
 public:
  using KernelOf::KernelOf;
  int64_t scratch_bytes(const std::vector<Shape>&, const std::vector<Shape>& out) const override {
    return shape_numel(out[0]) * static_cast<int64_t>(sizeof(double) * 2);
  }
  void run(InputValues in, OutputValues out, std::span<std::byte> scratch) const override {
    const Tensor& x = in[0];
    const Tensor& o = out[0];
    const int64_t n_out = o.numel();
    double* m = reinterpret_cast<double*>(scratch.data());
    double* acc = m + n_out;
    const std::vector<int64_t>& axes = op().axes();
    dispatch_float(x.dtype(), "logsumexp", [&](auto tag) {
      using T = decltype(tag);
      auto larger = [](double a, double b) { return (b > a || b != b) ? b : a; };
      reduce_loop<double, T>(x, m, n_out, axes, -std::numeric_limits<double>::infinity(), larger,
                             SequentialRun<double, T, decltype(larger)>{larger});
      for (int64_t i = 0; i < n_out; ++i)
        if (!std::isfinite(m[i])) m[i] = 0;  // all -inf (or inf/nan) rows: let the sum say so
      Dims out_strides(static_cast<size_t>(x.ndim()), 0);
      int64_t s = 1;
      for (int64_t d = x.ndim() - 1; d >= 0; --d) {
        if (contains(axes, d)) continue;
        out_strides[static_cast<size_t>(d)] = s;
        s *= x.shape()[d];
      }
      std::fill_n(acc, n_out, 0.0);
      const T* px = reinterpret_cast<const T*>(x.raw_data());
      auto loop = collapse_loop<2>(x.shape(), {out_strides, x.strides()});
      const int64_t inner = loop.shape.empty() ? 1 : loop.shape.back();
      run_loop_range(loop, 0, x.numel() / std::max<int64_t>(inner, 1), 0, inner,
                     [&](int64_t n, std::array<int64_t, 2> off, std::array<int64_t, 2> st) {
                       for (int64_t i = 0; i < n; ++i) {
                         const int64_t k = off[0] + i * st[0];
                         acc[k] += std::exp(static_cast<double>(px[off[1] + i * st[1]]) - m[k]);
                       }
                     });
      T* po = reinterpret_cast<T*>(o.raw_data());
      for (int64_t i = 0; i < n_out; ++i) po[i] = static_cast<T>(std::log(acc[i]) + m[i]);
    });
  }
};

// The sum over the axes the target shape has as 1 and g does not; where there are none, a copy,
// or nothing when the planner wrote the output over g (in place).
class SumToShapeKernel final : public KernelOf<SumToShape> {
 public:
  using KernelOf::KernelOf;
  int64_t scratch_bytes(const std::vector<Shape>&, const std::vector<Shape>& out) const override {
    return sum_scratch_bytes(output_dtype(0), shape_numel(out[0]));
  }
  void run(InputValues in, OutputValues out, std::span<std::byte> scratch) const override {
    const Tensor& g = in[0];
    const Tensor& o = out[0];
    if (g.shape() == o.shape()) return copy_broadcast(o, g);
    Dims axes;
    for (int64_t d = 0; d < g.ndim(); ++d)
      if (o.shape()[d] == 1 && g.shape()[d] != 1) axes.push_back(d);
    reduce_into(ReduceKind::sum, g, o, axes, scratch);
  }
};

}  // namespace

std::vector<int64_t> normalize_axes(const std::vector<int64_t>& axes, int64_t ndim, const std::string& op, const Loc& loc) {
  std::vector<int64_t> out;
  if (axes.empty()) {
    for (int64_t d = 0; d < ndim; ++d) out.push_back(d);
    return out;
  }
  for (int64_t a : axes) {
    int64_t n = a < 0 ? a + ndim : a;
    if (n < 0 || n >= ndim)
      throw TypeError(op + ": axis " + std::to_string(a) + " is out of range for an input with " + std::to_string(ndim) +
                      " dimensions (at " + loc_str(loc) + ")");
    if (contains(out, n)) throw TypeError(op + ": axis " + std::to_string(a) + " is repeated (at " + loc_str(loc) + ")");
    out.push_back(n);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string Reduce::name() const {
  std::string s = std::string(kind_name(kind_)) + "{axes=";
  for (size_t i = 0; i < axes_.size(); ++i) s += (i ? "," : "") + std::to_string(axes_[i]);
  return s + (keepdims_ ? ",keepdims}" : "}");
}

std::vector<Type> Reduce::infer_types(const std::vector<Type>& in) const {
  const Type& x = in.at(0);
  for (int64_t a : axes_)
    if (a >= x.ndim()) throw TypeError(name() + ": axis " + std::to_string(a) + " out of range for " + x.str());
  DType dtype = x.dtype;
  if (kind_ == ReduceKind::argmax || kind_ == ReduceKind::argmin) dtype = DType::i64;
  else if ((kind_ == ReduceKind::sum || kind_ == ReduceKind::prod) && !is_float(dtype)) dtype = DType::i64;
  else if (kind_ == ReduceKind::mean && !is_float(dtype)) dtype = DType::f64;
  else if ((kind_ == ReduceKind::max || kind_ == ReduceKind::min) && dtype == DType::b8) dtype = DType::i64;
  std::vector<bool> bc;
  for (int64_t d = 0; d < x.ndim(); ++d) {
    if (!contains(axes_, d)) bc.push_back(x.broadcastable[d]);
    else if (keepdims_) bc.push_back(true);
  }
  return {Type{dtype, bc}};
}

std::vector<Shape> Reduce::infer_shapes(const std::vector<Shape>& in, const std::vector<const Tensor*>&) const {
  Shape out;
  for (int64_t d = 0; d < static_cast<int64_t>(in[0].size()); ++d) {
    const bool reduced = contains(axes_, d);
    // max, min, argmax and argmin have no identity: an empty axis has no answer, kept or not (NumPy).
    if (reduced && in[0][d] == 0 &&
        (kind_ == ReduceKind::max || kind_ == ReduceKind::min || kind_ == ReduceKind::argmax || kind_ == ReduceKind::argmin))
      throw ShapeError(name() + ": cannot reduce the empty axis " + std::to_string(d) + " of shape " + shape_str(in[0]) +
                       " (max, min, argmax and argmin have no value for no elements)");
    if (!reduced) out.push_back(in[0][d]);
    else if (keepdims_) out.push_back(1);
  }
  return {out};
}

Var expand_reduced(const Var& v, const std::vector<int64_t>& axes, int64_t ndim, const Loc& loc) {
  if (v.ndim() == ndim) return v;
  std::vector<int64_t> pattern;
  int64_t next = 0;
  for (int64_t d = 0; d < ndim; ++d) pattern.push_back(contains(axes, d) ? -1 : next++);
  return dimshuffle(v, pattern, loc);
}

Var reduced_count(const Var& x, const std::vector<int64_t>& axes, const Loc& loc) {
  if (axes.empty()) return constant(Tensor::scalar<int64_t>(1));
  const Var sizes = take(shape_of(x, loc), constant(Tensor::from(axes, {static_cast<int64_t>(axes.size())})), 0, loc);
  return prod(sizes, {}, false, loc);
}

std::vector<Var> Reduce::L_op(const Node& node, const std::vector<Var>& gouts) const {
  const Loc loc = node.loc;
  const Var& x = node.inputs[0];
  if (!is_float(x.dtype())) return {Var()};
  const int64_t nd = x.ndim();
  Var y = expand_reduced(node.output(0), axes_, nd, loc);
  Var g = expand_reduced(gouts[0], axes_, nd, loc);
  switch (kind_) {
    case ReduceKind::sum: return {fill_like(x, g, loc)};
    case ReduceKind::mean: return {fill_like(x, g / cast(reduced_count(x, axes_, loc), x.dtype(), loc), loc)};
    case ReduceKind::prod: {
      // The product of the others, without dividing by zero: a group without zeros gives
      // prod / x; with one zero, that element gets the product of the rest and the others 0;
      // with more, every element 0. Built from differentiable ops, so it differentiates again.
      const Var zero = x == 0.0;
      const Var nonzero = where(zero, 1.0, x, loc);
      const Var rest = prod(nonzero, axes_, true, loc);
      const Var zeros = sum(cast(zero, x.dtype(), loc), axes_, true, loc);
      const Var others = where(zeros == 0.0, rest / nonzero, where(zero, where(zeros == 1.0, rest, 0.0, loc), 0.0, loc), loc);
      return {g * others};
    }
    case ReduceKind::max:
    case ReduceKind::min: return {cast(x == y, x.dtype(), loc) * g};
    case ReduceKind::argmax: case ReduceKind::argmin: return {Var()};
  }
  return {Var()};
}

std::string LogSumExp::name() const {
  std::string s = "logsumexp{axes=";
  for (size_t i = 0; i < axes_.size(); ++i) s += (i ? "," : "") + std::to_string(axes_[i]);
  return s + (keepdims_ ? ",keepdims}" : "}");
}

std::vector<Type> LogSumExp::infer_types(const std::vector<Type>& in) const {
  if (!is_float(in[0].dtype)) throw TypeError(name() + ": needs a float input, got " + in[0].str());
  return reduce_.infer_types(in);
}

std::vector<Shape> LogSumExp::infer_shapes(const std::vector<Shape>& in, const std::vector<const Tensor*>& v) const {
  return reduce_.infer_shapes(in, v);
}

std::vector<Var> LogSumExp::L_op(const Node& node, const std::vector<Var>& gouts) const {
  // softmax(x) over the axes, its maximum taken out first: exp(x - logsumexp(x)) would carry the
  // rounding of logsumexp(x) into every element (at |x| = 1e4 in f32, a relative error of 1e-3).
  const Var& x = node.inputs[0];
  Var g = expand_reduced(gouts[0], axes_, x.ndim(), node.loc);
  if (axes_.size() == 1) return {g * softmax(x, axes_[0], node.loc)};
  Var e = exp(x - max(x, axes_, true, node.loc), node.loc);
  return {g * (e / sum(e, axes_, true, node.loc))};
}

std::vector<Type> SumToShape::infer_types(const std::vector<Type>& in) const {
  if (in[0].ndim() != static_cast<int64_t>(broadcastable_.size()) || !is_integer(in[1].dtype) || in[1].ndim() != 1)
    throw TypeError(name() + ": cannot sum " + in[0].str() + " to a shape given as " + in[1].str());
  return {Type{in[0].dtype, broadcastable_}};
}

std::vector<Shape> SumToShape::infer_shapes(const std::vector<Shape>& in, const std::vector<const Tensor*>& values) const {
  if (!values.at(1)) throw ShapeError(name() + ": the target shape is only known at run time");
  Shape target = values[1]->to_vector<int64_t>();
  bool ok = target.size() == in[0].size();
  for (size_t d = 0; ok && d < target.size(); ++d) ok = in[0][d] == target[d] || target[d] == 1;
  if (!ok) throw ShapeError("sum_to_shape: cannot sum " + shape_str(in[0]) + " down to " + shape_str(target));
  return {target};
}

std::vector<Var> SumToShape::L_op(const Node& node, const std::vector<Var>& gouts) const {
  return {fill_like(node.inputs[0], gouts[0], node.loc), Var()};
}

void add_reduce_kernels(KernelTable& table) {
  table.add<Reduce, ReduceKernel>();
  table.add<LogSumExp, LogSumExpKernel>();
  table.add<SumToShape, SumToShapeKernel>();
}

Var sum_to_shape_of(const Var& g, const Var& like, const Loc& loc) {
  return apply1(std::make_shared<SumToShape>(like.type().broadcastable), {g, shape_of(like, loc)}, loc);
}

namespace {
Var reduce(ReduceKind kind, const Var& x, Axes axes, bool keepdims, const Loc& loc) {
  if ((kind == ReduceKind::max || kind == ReduceKind::min) && x.dtype() == DType::b8)  // any / all, as NumPy: b8
    return cast(reduce(kind, cast(x, DType::i64, loc), std::move(axes), keepdims, loc), DType::b8, loc);
  auto norm = normalize_axes(axes, x.ndim(), kind_name(kind), loc);
  if ((kind == ReduceKind::argmax || kind == ReduceKind::argmin) && norm.size() != 1 &&
      static_cast<int64_t>(norm.size()) != x.ndim())
    throw TypeError(std::string(kind_name(kind)) + ": takes one axis or all of them, got " + std::to_string(axes.size()) +
                    " axes (at " + loc_str(loc) + ")");
  return apply1(std::make_shared<Reduce>(kind, norm, keepdims), {x}, loc);
}
}  // namespace

Var sum(const Var& x, Axes axes, bool keepdims, Loc loc) { return reduce(ReduceKind::sum, x, axes, keepdims, loc); }
Var mean(const Var& x, Axes axes, bool keepdims, Loc loc) { return reduce(ReduceKind::mean, x, axes, keepdims, loc); }
Var max(const Var& x, Axes axes, bool keepdims, Loc loc) { return reduce(ReduceKind::max, x, axes, keepdims, loc); }
Var min(const Var& x, Axes axes, bool keepdims, Loc loc) { return reduce(ReduceKind::min, x, axes, keepdims, loc); }
Var prod(const Var& x, Axes axes, bool keepdims, Loc loc) { return reduce(ReduceKind::prod, x, axes, keepdims, loc); }
Var argmax(const Var& x, Axes axes, bool keepdims, Loc loc) { return reduce(ReduceKind::argmax, x, axes, keepdims, loc); }
Var argmin(const Var& x, Axes axes, bool keepdims, Loc loc) { return reduce(ReduceKind::argmin, x, axes, keepdims, loc); }

// The mean of the squared deviations from the mean, divided by max(N - ddof, 0) instead of N (N:
// the elements reduced), as NumPy's var: built from sum, mean and elementwise ops, so it fuses
// and differentiates (twice) like them. Integers and bools are taken as f64, as mean does.
Var var(const Var& x, Axes axes, bool keepdims, int64_t ddof, Loc loc) {
  if (!x.defined()) throw TypeError("var: x is an empty Var (at " + loc_str(loc) + ")");
  const auto norm = normalize_axes(axes, x.ndim(), "var", loc);
  const Var xf = is_float(x.dtype()) ? x : cast(x, DType::f64, loc);
  const Var deviation = xf - mean(xf, norm, true, loc);
  const Var divisor = cast(maximum(reduced_count(xf, norm, loc) - ddof, 0, loc), xf.dtype(), loc);
  return sum(deviation * deviation, norm, keepdims, loc) / divisor;
}

Var std(const Var& x, Axes axes, bool keepdims, int64_t ddof, Loc loc) {
  if (!x.defined()) throw TypeError("std: x is an empty Var (at " + loc_str(loc) + ")");
  return sqrt(var(x, std::move(axes), keepdims, ddof, loc), loc);
}

Var logsumexp(const Var& x, Axes axes, bool keepdims, Loc loc) {
  const Var xf = is_float(x.dtype()) ? x : cast(x, DType::f64, loc);
  return apply1(std::make_shared<LogSumExp>(normalize_axes(axes, x.ndim(), "logsumexp", loc), keepdims), {xf}, loc);
}

}  // namespace kiln

#include "ops/reduce.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kiln/ops.hpp"
#include "ops/elemwise.hpp"
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
  }
  return "?";
}

bool contains(const std::vector<int64_t>& v, int64_t x) { return std::find(v.begin(), v.end(), x) != v.end(); }

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
void reduce_loop(const Tensor& in, Tensor& out, const std::vector<int64_t>& axes, Acc init, F combine, Run run) {
  // Walk the input in memory order; the output is seen through strides that are 0 on reduced axes.
  Shape out_strides(in.ndim(), 0);
  int64_t s = 1;
  for (int64_t d = in.ndim() - 1; d >= 0; --d) {
    if (contains(axes, d)) continue;
    out_strides[d] = s;
    s *= in.shape()[d];
  }
  Acc* po = reinterpret_cast<Acc*>(out.raw_data());
  std::fill_n(po, out.numel(), init);
  const T* pi = reinterpret_cast<const T*>(in.raw_data());
  auto loop = collapse_loop<2>(in.shape(), {out_strides, in.strides()});
  run_loop_range(loop, 0, in.numel() / std::max<int64_t>(loop.shape.empty() ? 1 : loop.shape.back(), 1), 0,
                 loop.shape.empty() ? 1 : loop.shape.back(),
                 [&](int64_t n, std::array<int64_t, 2> off, std::array<int64_t, 2> st) {
                       Acc* o = po + off[0];
                       const T* x = pi + off[1];
                       if (st[0] == 0) {
                         *o = st[1] == 1 ? run(*o, x, n, 1) : run(*o, x, n, st[1]);
                       } else {
                         for (int64_t i = 0; i < n; ++i) o[i * st[0]] = combine(o[i * st[0]], static_cast<Acc>(x[i * st[1]]));
                       }
                     });
}

// Sum of f32 runs accumulates in f64 for accuracy, then narrows. The f64 accumulator is per-thread
// scratch reused across calls, so a steady loop allocates nothing here.
template <class T> void reduce_sum(const Tensor& in, Tensor& out, const std::vector<int64_t>& axes) {
  using Acc = std::conditional_t<std::is_same_v<T, float>, double, T>;
  auto add = [](Acc a, Acc b) { return static_cast<Acc>(a + b); };
  auto run = [](Acc acc, const T* x, int64_t n, int64_t stride) {
    if constexpr (std::is_floating_point_v<Acc>) {
      return static_cast<Acc>(acc + pairwise_sum<Acc>(x, n, stride));
    } else {
      for (int64_t i = 0; i < n; ++i) acc = static_cast<Acc>(acc + x[i * stride]);
      return acc;
    }
  };
  if constexpr (std::is_same_v<Acc, T>) {
    reduce_loop<T, T>(in, out, axes, T(0), add, run);
  } else {
    thread_local std::vector<Acc> scratch;
    if (scratch.size() < static_cast<size_t>(out.numel())) scratch.resize(static_cast<size_t>(out.numel()));
    Tensor wide = Tensor::wrap(scratch.data(), out.shape());
    reduce_loop<Acc, T>(in, wide, axes, Acc(0), add, run);
    out.copy_from(wide);
  }
}

template <class T, class F> void reduce_with(const Tensor& in, Tensor& out, const std::vector<int64_t>& axes, T init, F combine) {
  reduce_loop<T, T>(in, out, axes, init, combine, SequentialRun<T, T, F>{combine});
}

template <class T> T lowest_of() {
  if constexpr (std::numeric_limits<T>::has_infinity) return -std::numeric_limits<T>::infinity();
  else return std::numeric_limits<T>::lowest();
}
template <class T> T highest_of() {
  if constexpr (std::numeric_limits<T>::has_infinity) return std::numeric_limits<T>::infinity();
  else return std::numeric_limits<T>::max();
}

void reduce_into(ReduceKind kind, const Tensor& in, Tensor& out, const std::vector<int64_t>& axes) {
  if (kind == ReduceKind::sum || kind == ReduceKind::mean) {
    Tensor src = in;
    if (!is_float(in.dtype()) && out.dtype() != in.dtype()) src = in.to(out.dtype());
    dispatch_dtype(src.dtype(), [&](auto tag) {
      using T = decltype(tag);
      if constexpr (std::is_same_v<T, bool>) throw TypeError("sum: no kernel for b8");
      else reduce_sum<T>(src, out, axes);
    });
    if (kind == ReduceKind::mean) {
      int64_t count = 1;
      for (int64_t a : axes) count *= in.shape()[a];
      dispatch_float(out.dtype(), "mean", [&](auto tag) {
        using T = decltype(tag);
        T* p = reinterpret_cast<T*>(out.raw_data());
        // Divided, not multiplied by 1/count: the mean of equal values is that value exactly.
        for (int64_t i = 0; i < out.numel(); ++i) p[i] /= static_cast<T>(count);
      });
    }
    return;
  }
  Tensor src = in.dtype() == out.dtype() ? in : in.to(out.dtype());
  dispatch_dtype(src.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, bool>) {
      throw TypeError(std::string(kind_name(kind)) + ": no kernel for b8");
    } else {
      switch (kind) {
        case ReduceKind::prod: return reduce_with<T>(src, out, axes, T(1), [](T a, T b) { return static_cast<T>(a * b); });
        // Floats start from -inf (+inf), so max({-inf}) is -inf; a NaN wins and stays.
        case ReduceKind::max:
          return reduce_with<T>(src, out, axes, lowest_of<T>(), [](T a, T b) { return (b > a || b != b) ? b : a; });
        case ReduceKind::min:
          return reduce_with<T>(src, out, axes, highest_of<T>(), [](T a, T b) { return (b < a || b != b) ? b : a; });
        default: throw Error("reduce: unexpected kind");
      }
    }
  });
}

void argmax_into(const Tensor& in, Tensor& out, const std::vector<int64_t>& axes) {
  // Move the reduced axis last (or flatten everything), then one scan per row.
  Tensor rows;
  if (axes.size() == static_cast<size_t>(in.ndim())) {
    rows = in.contiguous().reshape({1, in.numel()});
  } else {
    int64_t axis = axes[0];
    Shape shape, strides;
    for (int64_t d = 0; d < in.ndim(); ++d)
      if (d != axis) shape.push_back(in.shape()[d]), strides.push_back(in.strides()[d]);
    shape.push_back(in.shape()[axis]);
    strides.push_back(in.strides()[axis]);
    Tensor moved = in.view(shape, strides, in.offset()).contiguous();
    rows = moved.reshape({moved.numel() / std::max<int64_t>(in.shape()[axis], 1), in.shape()[axis]});
  }
  const int64_t n_rows = rows.shape()[0], n = rows.shape()[1];
  if (n == 0) throw ShapeError("argmax: cannot take the argmax of an empty axis (input " + in.str() + ")");
  int64_t* po = out.data<int64_t>();
  dispatch_dtype(rows.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* p = reinterpret_cast<const T*>(rows.raw_data());
    for (int64_t r = 0; r < n_rows; ++r) {
      const T* row = p + r * n;
      // The first NaN is the maximum, as NumPy says (max returns NaN too).
      int64_t best = 0;
      for (int64_t i = 1; i < n && row[best] == row[best]; ++i)
        if (row[i] > row[best] || row[i] != row[i]) best = i;
      po[r] = best;
    }
  });
}

}  // namespace

std::vector<int64_t> normalize_axes(const std::vector<int64_t>& axes, int64_t ndim, const std::string& op) {
  std::vector<int64_t> out;
  if (axes.empty()) {
    for (int64_t d = 0; d < ndim; ++d) out.push_back(d);
    return out;
  }
  for (int64_t a : axes) {
    int64_t n = a < 0 ? a + ndim : a;
    if (n < 0 || n >= ndim)
      throw TypeError(op + ": axis " + std::to_string(a) + " is out of range for an input with " + std::to_string(ndim) +
                      " dimensions");
    if (contains(out, n)) throw TypeError(op + ": axis " + std::to_string(a) + " is repeated");
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
  if (kind_ == ReduceKind::argmax) dtype = DType::i64;
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
    // max, min and argmax have no identity: an empty axis has no answer, kept or not (NumPy).
    if (reduced && in[0][d] == 0 && (kind_ == ReduceKind::max || kind_ == ReduceKind::min || kind_ == ReduceKind::argmax))
      throw ShapeError(name() + ": cannot reduce the empty axis " + std::to_string(d) + " of shape " + shape_str(in[0]) +
                       " (max, min and argmax have no value for no elements)");
    if (!reduced) out.push_back(in[0][d]);
    else if (keepdims_) out.push_back(1);
  }
  return {out};
}

void Reduce::perform(const std::vector<Tensor>& in, std::vector<Tensor>& out) const {
  if (kind_ == ReduceKind::argmax) return argmax_into(in[0], out[0], axes_);
  reduce_into(kind_, in[0], out[0], axes_);
}

Var expand_reduced(const Var& v, const std::vector<int64_t>& axes, int64_t ndim, const Loc& loc) {
  if (v.ndim() == ndim) return v;
  std::vector<int64_t> pattern;
  int64_t next = 0;
  for (int64_t d = 0; d < ndim; ++d) pattern.push_back(contains(axes, d) ? -1 : next++);
  return dimshuffle(v, pattern, loc);
}

std::vector<Var> Reduce::L_op(const Node& node, const std::vector<Var>& gouts) const {
  const Loc loc = node.loc;
  const Var& x = node.inputs[0];
  if (!is_float(x.dtype())) return {Var()};
  const int64_t nd = x.ndim();
  Var y = expand_reduced(const_cast<Node&>(node).output(0), axes_, nd, loc);
  Var g = expand_reduced(gouts[0], axes_, nd, loc);
  switch (kind_) {
    case ReduceKind::sum: return {fill_like(x, g, loc)};
    case ReduceKind::mean: {
      std::vector<int64_t> idx(axes_.begin(), axes_.end());
      Var count = prod(take(shape_of(x, loc), constant(Tensor::from(idx, {static_cast<int64_t>(idx.size())})), 0, loc), {}, false, loc);
      return {fill_like(x, g / cast(count, x.dtype(), loc), loc)};
    }
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
    case ReduceKind::argmax: return {Var()};
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

void LogSumExp::perform(const std::vector<Tensor>& in, std::vector<Tensor>& out) const {
  const Tensor& x = in[0];
  Shape kept = x.shape();
  for (int64_t a : axes_) kept[a] = 1;
  Tensor m = Tensor::empty(kept, x.dtype());
  reduce_into(ReduceKind::max, x, m, axes_);
  dispatch_float(x.dtype(), "logsumexp", [&](auto tag) {
    using T = decltype(tag);
    T* pm = m.data<T>();
    for (int64_t i = 0; i < m.numel(); ++i)
      if (!std::isfinite(pm[i])) pm[i] = 0;  // all -inf (or inf/nan) rows: let the sum say so
    Tensor shifted = Tensor::empty(x.shape(), x.dtype());
    Shape mstrides = contiguous_strides(kept);
    for (int64_t d = 0; d < x.ndim(); ++d)
      if (kept[d] == 1) mstrides[d] = 0;
    auto loop = collapse_loop<3>(x.shape(), {shifted.strides(), x.strides(), mstrides}, {0, x.offset(), 0});
    T* ps = shifted.data<T>();
    const T* px = reinterpret_cast<const T*>(x.storage()->data());
    run_loop(loop, [&](int64_t n, std::array<int64_t, 3> off, std::array<int64_t, 3> st) {
      for (int64_t i = 0; i < n; ++i) ps[off[0] + i * st[0]] = std::exp(px[off[1] + i * st[1]] - pm[off[2] + i * st[2]]);
    });
    reduce_into(ReduceKind::sum, shifted, out[0], axes_);
    T* po = out[0].data<T>();
    for (int64_t i = 0; i < out[0].numel(); ++i) po[i] = std::log(po[i]) + pm[i];
  });
}

std::vector<Var> LogSumExp::L_op(const Node& node, const std::vector<Var>& gouts) const {
  const Var& x = node.inputs[0];
  Var y = expand_reduced(const_cast<Node&>(node).output(0), axes_, x.ndim(), node.loc);
  Var g = expand_reduced(gouts[0], axes_, x.ndim(), node.loc);
  return {g * exp(x - y)};
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

void SumToShape::perform(const std::vector<Tensor>& in, std::vector<Tensor>& out) const {
  const Tensor& g = in[0];
  const Shape target = infer_shapes({g.shape(), in[1].shape()}, {&g, &in[1]})[0];
  if (g.shape() == target) {
    out[0] = g;
    return;
  }
  std::vector<int64_t> axes;
  for (int64_t d = 0; d < g.ndim(); ++d)
    if (target[d] == 1 && g.shape()[d] != 1) axes.push_back(d);
  out[0] = Tensor::empty(target, g.dtype());
  reduce_into(ReduceKind::sum, g, out[0], axes);
}

std::vector<Var> SumToShape::L_op(const Node& node, const std::vector<Var>& gouts) const {
  return {fill_like(node.inputs[0], gouts[0], node.loc), Var()};
}

Var sum_to_shape_of(const Var& g, const Var& like, const Loc& loc) {
  return apply1(std::make_shared<SumToShape>(like.type().broadcastable), {g, shape_of(like, loc)}, loc);
}

namespace {
Var reduce(ReduceKind kind, const Var& x, Axes axes, bool keepdims, const Loc& loc) {
  auto norm = normalize_axes(axes, x.ndim(), kind_name(kind));
  if (kind == ReduceKind::argmax && norm.size() != 1 && static_cast<int64_t>(norm.size()) != x.ndim())
    throw TypeError("argmax: takes one axis or all of them, got " + std::to_string(axes.size()) + " axes (at " +
                    loc_str(loc) + ")");
  return apply1(std::make_shared<Reduce>(kind, norm, keepdims), {x}, loc);
}
}  // namespace

Var sum(const Var& x, Axes axes, bool keepdims, Loc loc) { return reduce(ReduceKind::sum, x, axes, keepdims, loc); }
Var mean(const Var& x, Axes axes, bool keepdims, Loc loc) { return reduce(ReduceKind::mean, x, axes, keepdims, loc); }
Var max(const Var& x, Axes axes, bool keepdims, Loc loc) { return reduce(ReduceKind::max, x, axes, keepdims, loc); }
Var min(const Var& x, Axes axes, bool keepdims, Loc loc) { return reduce(ReduceKind::min, x, axes, keepdims, loc); }
Var prod(const Var& x, Axes axes, bool keepdims, Loc loc) { return reduce(ReduceKind::prod, x, axes, keepdims, loc); }
Var argmax(const Var& x, Axes axes, bool keepdims, Loc loc) { return reduce(ReduceKind::argmax, x, axes, keepdims, loc); }
Var logsumexp(const Var& x, Axes axes, bool keepdims, Loc loc) {
  const Var xf = is_float(x.dtype()) ? x : cast(x, DType::f64, loc);
  return apply1(std::make_shared<LogSumExp>(normalize_axes(axes, x.ndim(), "logsumexp"), keepdims), {xf}, loc);
}

}  // namespace kiln

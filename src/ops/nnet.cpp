#include "ops/nnet.hpp"

#include <cmath>
#include <cstring>
#include <limits>

#include "kiln/ops.hpp"
#include "ops/scalar_math.hpp"
#include "tensor/dispatch.hpp"
#include "tensor/nd_loop.hpp"

namespace kiln {

namespace {

// The view of t with `axis` moved last.
Tensor axis_last(const Tensor& t, int64_t axis) {
  Shape shape, strides;
  for (int64_t d = 0; d < t.ndim(); ++d)
    if (d != axis) shape.push_back(t.shape()[d]), strides.push_back(t.strides()[d]);
  shape.push_back(t.shape()[axis]);
  strides.push_back(t.strides()[axis]);
  return t.view(shape, strides, t.offset());
}

template <class T>
void softmax_row(const T* x, int64_t sx, T* y, int64_t sy, int64_t n, bool log) {
  T mx = -std::numeric_limits<T>::infinity();
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, x[i * sx]);
  if (!std::isfinite(mx)) mx = 0;
  T total = 0;
  if (sx == 1 && sy == 1) {
    for (int64_t i = 0; i < n; ++i) y[i] = fastmath::exp(x[i] - mx);
    for (int64_t i = 0; i < n; ++i) total += y[i];
  } else {
    for (int64_t i = 0; i < n; ++i) total += (y[i * sy] = fastmath::exp(x[i * sx] - mx));
  }
  if (log) {
    const T log_total = std::log(total);
    for (int64_t i = 0; i < n; ++i) y[i * sy] = (x[i * sx] - mx) - log_total;
  } else {
    const T inv = T(1) / total;
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

void Softmax::perform(const std::vector<Tensor>& in, std::vector<Tensor>& out) const {
  Tensor x = axis_last(in[0], axis_);
  Tensor y = axis_last(out[0], axis_);
  const int64_t n = x.shape().back();
  const int64_t sx = x.strides().back(), sy = y.strides().back();
  Shape outer(x.shape().begin(), x.shape().end() - 1);
  Shape ox(x.strides().begin(), x.strides().end() - 1), oy(y.strides().begin(), y.strides().end() - 1);
  auto loop = collapse_loop<2>(outer, {oy, ox}, {y.offset(), x.offset()});
  dispatch_float(x.dtype(), "softmax", [&](auto tag) {
    using T = decltype(tag);
    const T* px = reinterpret_cast<const T*>(x.storage()->data());
    T* py = reinterpret_cast<T*>(y.storage()->data());
    run_loop(loop, [&](int64_t rows, std::array<int64_t, 2> off, std::array<int64_t, 2> st) {
      for (int64_t r = 0; r < rows; ++r) softmax_row<T>(px + off[1] + r * st[1], sx, py + off[0] + r * st[0], sy, n, log_);
    }, std::max<int64_t>(1, (1 << 14) / std::max<int64_t>(n, 1)));
  });
}

std::vector<Var> Softmax::L_op(const Node& node, const std::vector<Var>& gouts) const {
  const Loc loc = node.loc;
  const Var y = const_cast<Node&>(node).output(0);
  const Var& g = gouts[0];
  if (log_) return {g - exp(y, loc) * sum(g, {axis_}, true, loc)};
  return {(g - sum(g * y, {axis_}, true, loc)) * y};
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

namespace {
std::vector<int64_t> checked_labels(const Tensor& labels, int64_t classes, const char* op) {
  std::vector<int64_t> l = labels.to_vector<int64_t>();
  for (size_t i = 0; i < l.size(); ++i)
    if (l[i] < 0 || l[i] >= classes)
      throw ShapeError(std::string(op) + ": label " + std::to_string(l[i]) + " of row " + std::to_string(i) +
                       " is not a class in [0, " + std::to_string(classes) + ")");
  return l;
}
}  // namespace

void CrossEntropy::perform(const std::vector<Tensor>& in, std::vector<Tensor>& out) const {
  const Tensor& p = in[0];
  const auto labels = checked_labels(in[1], p.shape()[1], "categorical_crossentropy");
  dispatch_float(p.dtype(), "categorical_crossentropy", [&](auto tag) {
    using T = decltype(tag);
    const T* pp = reinterpret_cast<const T*>(p.storage()->data());
    T* po = out[0].data<T>();
    for (size_t i = 0; i < labels.size(); ++i)
      po[i] = -std::log(pp[p.offset() + static_cast<int64_t>(i) * p.strides()[0] + labels[i] * p.strides()[1]]);
  });
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

void CrossEntropyGrad::perform(const std::vector<Tensor>& in, std::vector<Tensor>& out) const {
  const Tensor &g = in[0], &p = in[1];
  const auto labels = checked_labels(in[2], p.shape()[1], "categorical_crossentropy_grad");
  Tensor& o = out[0];
  std::memset(o.raw_data(), 0, o.nbytes());
  dispatch_float(p.dtype(), name().c_str(), [&](auto tag) {
    using T = decltype(tag);
    const T* pp = reinterpret_cast<const T*>(p.storage()->data());
    const T* pg = reinterpret_cast<const T*>(g.storage()->data());
    T* po = o.data<T>();
    const int64_t c = p.shape()[1];
    for (size_t i = 0; i < labels.size(); ++i) {
      const int64_t r = static_cast<int64_t>(i);
      po[r * c + labels[i]] = -pg[g.offset() + r * g.strides()[0]] / pp[p.offset() + r * p.strides()[0] + labels[i] * p.strides()[1]];
    }
  });
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

Var categorical_crossentropy(const Var& probs, const Var& labels, Loc loc) {
  if (is_float(labels.dtype()) && labels.ndim() == probs.ndim())
    return -sum(labels * log(probs, loc), {-1}, false, loc);
  return apply1(std::make_shared<CrossEntropy>(), {probs, labels}, loc);
}

}  // namespace kiln

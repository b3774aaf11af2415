#include "ops/shape.hpp"

#include <algorithm>
#include <cmath>

#include "kiln/ops.hpp"
#include "ops/join.hpp"
#include "tensor/copy.hpp"

namespace kiln {

std::string DimShuffle::name() const {
  std::string s = "dimshuffle{";
  for (size_t i = 0; i < pattern_.size(); ++i) s += (i ? "," : "") + (pattern_[i] < 0 ? std::string("x") : std::to_string(pattern_[i]));
  return s + "}";
}

std::vector<Type> DimShuffle::infer_types(const std::vector<Type>& in) const {
  const Type& x = in[0];
  std::vector<bool> used(x.ndim(), false);
  std::vector<bool> bc;
  for (int64_t p : pattern_) {
    if (p < 0) {
      bc.push_back(true);
      continue;
    }
    if (p >= x.ndim()) throw TypeError(name() + ": axis " + std::to_string(p) + " does not exist in " + x.str());
    if (used[p]) throw TypeError(name() + ": axis " + std::to_string(p) + " appears twice");
    used[p] = true;
    bc.push_back(x.broadcastable[p]);
  }
  for (int64_t d = 0; d < x.ndim(); ++d)
    if (!used[d] && !x.broadcastable[d])
      throw TypeError(name() + ": drops axis " + std::to_string(d) + " of " + x.str() +
                      ", which is not broadcastable (only axes known to have size 1 can be dropped)");
  return {Type{x.dtype, bc}};
}

std::vector<Shape> DimShuffle::infer_shapes(const std::vector<Shape>& in, const std::vector<const Tensor*>&) const {
  Shape out;
  for (int64_t p : pattern_) out.push_back(p < 0 ? 1 : in[0][p]);
  return {out};
}

std::vector<Var> DimShuffle::L_op(const Node& node, const std::vector<Var>& gouts) const {
  const Var& x = node.inputs[0];
  Var g = gouts[0];
  std::vector<int64_t> inserted;
  for (size_t i = 0; i < pattern_.size(); ++i)
    if (pattern_[i] < 0 && !g.type().broadcastable[i]) inserted.push_back(static_cast<int64_t>(i));
  if (!inserted.empty()) g = sum(g, inserted, true, node.loc);
  std::vector<int64_t> inverse;
  for (int64_t d = 0; d < x.ndim(); ++d) {
    auto it = std::find(pattern_.begin(), pattern_.end(), d);
    inverse.push_back(it == pattern_.end() ? -1 : it - pattern_.begin());
  }
  return {dimshuffle(g, inverse, node.loc)};
}

std::string Reshape::name() const {
  if (flatten_to_ > 0) return "flatten{" + std::to_string(flatten_to_) + "}";
  if (target_is_input_) return "reshape{ndim=" + std::to_string(ndim_) + "}";
  return "reshape" + shape_str(target_);
}

std::vector<Type> Reshape::infer_types(const std::vector<Type>& in) const {
  const Type& x = in[0];
  std::vector<bool> bc;
  if (flatten_to_ > 0) {
    if (flatten_to_ > std::max<int64_t>(x.ndim(), 1))
      throw TypeError(name() + ": cannot flatten " + x.str() + " to " + std::to_string(flatten_to_) + " dimensions");
    for (int64_t d = 0; d + 1 < flatten_to_; ++d) bc.push_back(x.broadcastable[d]);
    bool rest = true;
    for (int64_t d = flatten_to_ - 1; d < x.ndim(); ++d) rest = rest && x.broadcastable[d];
    bc.push_back(rest);
  } else if (in.size() == 2) {
    if (!is_integer(in[1].dtype) || in[1].ndim() != 1)
      throw TypeError("reshape: the shape must be a 1-D integer vector, got " + in[1].str());
    bc.assign(ndim_, false);
  } else {
    if (std::count(target_.begin(), target_.end(), -1) > 1)
      throw TypeError(name() + ": at most one dimension can be -1");
    for (int64_t d : target_) {
      if (d < -1) throw TypeError(name() + ": negative dimension " + std::to_string(d));
      bc.push_back(d == 1);
    }
  }
  return {Type{x.dtype, bc}};
}

std::vector<Shape> Reshape::infer_shapes(const std::vector<Shape>& in, const std::vector<const Tensor*>& values) const {
  if (in.size() == 2 && !values.at(1)) throw ShapeError("reshape: the target shape is only known at run time");
  const Dims out = resolve(in[0], in.size() == 2 ? values[1] : nullptr);
  return {Shape(out.begin(), out.end())};
}

Dims Reshape::resolve(std::span<const int64_t> xs, const Tensor* target_value) const {
  int64_t n = 1;
  for (int64_t d : xs) n *= d;  // the input's dimensions were checked when it was made
  Dims out;
  if (flatten_to_ > 0) {
    for (int64_t d = 0; d + 1 < flatten_to_; ++d) out.push_back(xs[d]);
    int64_t rest = 1;
    for (int64_t d = flatten_to_ - 1; d < static_cast<int64_t>(xs.size()); ++d) rest *= xs[d];
    out.push_back(rest);
    return out;
  }
  if (target_value) {
    const Tensor& t = *target_value;
    const int64_t count = t.numel();
    if (count != ndim_)
      throw ShapeError(name() + ": the shape value " + shape_str(t.to_vector<int64_t>()) + " has " + std::to_string(count) +
                       " entries, expected " + std::to_string(ndim_));
    for (int64_t i = 0; i < count; ++i) out.push_back(static_cast<int64_t>(t.item_as_double(i)));
  } else {
    out.assign(target_.begin(), target_.end());
  }
  auto refuse = [&](const std::string& why) {
    throw ShapeError(name() + ": cannot reshape " + shape_str(Shape(xs.begin(), xs.end())) + " (" + std::to_string(n) +
                     " elements) to " + shape_str(Shape(out.begin(), out.end())) + why);
  };
  int64_t known = 1, unknown = -1;
  for (size_t d = 0; d < out.size(); ++d) {
    if (out[d] == -1 && unknown < 0) unknown = static_cast<int64_t>(d);
    else if (out[d] < 0) refuse(": a dimension is negative (only one -1 may stand for the rest)");
    else if (__builtin_mul_overflow(known, out[d], &known)) refuse(": the product of its dimensions overflows");
  }
  if (unknown >= 0) {
    if (known == 0 || n % known != 0) refuse("");
    out[unknown] = n / known;
  }
  int64_t total = 1;
  for (int64_t d : out) total *= d;
  if (total != n) refuse("");
  return out;
}

std::vector<Var> Reshape::L_op(const Node& node, const std::vector<Var>& gouts) const {
  const Var& x = node.inputs[0];
  std::vector<Var> g{reshape(gouts[0], shape_of(x, node.loc), x.ndim(), node.loc)};
  if (node.inputs.size() == 2) g.push_back(Var());
  return g;
}

std::vector<Type> ShapeOf::infer_types(const std::vector<Type>&) const { return {Type{DType::i64, {false}}}; }

std::vector<Shape> ShapeOf::infer_shapes(const std::vector<Shape>& in, const std::vector<const Tensor*>&) const {
  return {Shape{static_cast<int64_t>(in[0].size())}};
}

namespace {

class DimShuffleKernel final : public KernelOf<DimShuffle> {
 public:
  DimShuffleKernel(std::shared_ptr<const DimShuffle> op, const Node& node)
      : KernelOf(std::move(op), node), pattern_(std::span<const int64_t>(this->op().pattern())) {}
  void run(InputValues in, OutputValues out, std::span<std::byte>) const override {
    const Tensor& x = in[0];
    const auto& pattern = pattern_;
    for (int64_t d = 0; d < x.ndim(); ++d)
      if (std::find(pattern.begin(), pattern.end(), d) == pattern.end() && x.shape()[d] != 1)
        throw ShapeError(op().name() + ": dropped axis " + std::to_string(d) + " has size " + std::to_string(x.shape()[d]) +
                         " in " + x.str() + "; only size-1 axes can be dropped");
    Dims shape, strides;
    for (int64_t p : pattern) {
      shape.push_back(p < 0 ? 1 : x.shape()[p]);
      strides.push_back(p < 0 ? 0 : x.strides()[p]);
    }
    set_view(out[0], x, shape, strides, x.offset());
  }

 private:
  SmallVector<int64_t, 6> pattern_;  // the op's, kept here: each run reads it
};

// A view of a contiguous input; an input it cannot view is copied into a buffer of the output's
// own, allocated as it runs.
class ReshapeKernel final : public KernelOf<Reshape> {
 public:
  using KernelOf::KernelOf;
  void run(InputValues in, OutputValues out, std::span<std::byte>) const override {
    const Tensor& x = in[0];
    const Dims shape = op().resolve(x.shape(), in.size() == 2 ? &in[1] : nullptr);
    if (x.is_contiguous()) return set_view(out[0], x, shape, contiguous_dims(shape), x.offset());
    Tensor& o = out[0];
    o = Tensor::empty(Shape(shape.begin(), shape.end()), x.dtype());
    copy_to_contiguous(o.raw_data(), x);
  }
};

class ShapedLikeKernel final : public KernelOf<ShapedLike> {
 public:
  using KernelOf::KernelOf;
  void run(InputValues in, OutputValues out, std::span<std::byte>) const override {
    op().check(in[0].shape(), in[1]);
    set_view(out[0], in[0], in[0].shape(), in[0].strides(), in[0].offset());
  }
};

class ShapeOfKernel final : public KernelOf<ShapeOf> {
 public:
  using KernelOf::KernelOf;
  void run(InputValues in, OutputValues out, std::span<std::byte>) const override {
    int64_t* p = out[0].data<int64_t>();
    for (int64_t d = 0; d < in[0].ndim(); ++d) p[d] = in[0].shape()[d];
  }
};

class InferredShapeKernel final : public KernelOf<InferredShape> {
 public:
  using KernelOf::KernelOf;
  void run(InputValues inputs, OutputValues outputs, std::span<std::byte>) const override {
    const InferredShape& inferred = op();
    std::vector<Shape> shapes;
    std::vector<const Tensor*> values;
    for (size_t i = 0; i < inputs.size(); ++i) {
      shapes.push_back(inferred.value_input(i) ? inputs[i].shape() : inputs[i].to_vector<int64_t>());
      values.push_back(inferred.value_input(i) ? &inputs[i] : nullptr);
    }
    const Shape shape = inferred.op().infer_shapes(shapes, values).at(inferred.index());
    std::copy(shape.begin(), shape.end(), outputs[0].data<int64_t>());
  }
};

}  // namespace

void add_shape_kernels(KernelTable& table) {
  table.add<DimShuffle, DimShuffleKernel>();
  table.add<Reshape, ReshapeKernel>();
  table.add<ShapeOf, ShapeOfKernel>();
  table.add<ShapedLike, ShapedLikeKernel>();
  table.add<InferredShape, InferredShapeKernel>();
}

std::vector<Type> ShapedLike::infer_types(const std::vector<Type>& in) const {
  if (like_is_shape_) {
    if (in[1].dtype != DType::i64 || in[1].ndim() != 1)
      throw TypeError("shaped_like: the shape of " + what_ + " must be a 1-D i64 vector, not " + in[1].str());
  } else if (in[0].ndim() != in[1].ndim()) {
    throw TypeError(what_ + " is " + in[0].str() + " but must have the rank of " + in[1].str());
  }
  return {in[0]};
}

void ShapedLike::check(const Shape& x, const Tensor& like) const {
  if (!like_is_shape_) {
    if (x != like.shape()) throw ShapeError(what_ + " has shape " + shape_str(x) + " but must have shape " + shape_str(like.shape()));
    return;
  }
  const int64_t* dims = like.data<int64_t>();
  const int64_t stride = like.strides()[0];
  bool same = static_cast<int64_t>(x.size()) == like.numel();
  for (size_t d = 0; same && d < x.size(); ++d) same = x[d] == dims[static_cast<int64_t>(d) * stride];
  if (!same) throw ShapeError(what_ + " has shape " + shape_str(x) + " but must have shape " + shape_str(like.to_vector<int64_t>()));
}

std::vector<Shape> ShapedLike::infer_shapes(const std::vector<Shape>& in, const std::vector<const Tensor*>& values) const {
  if (!like_is_shape_) {
    if (in[0] != in[1]) throw ShapeError(what_ + " has shape " + shape_str(in[0]) + " but must have shape " + shape_str(in[1]));
  } else if (values.size() > 1 && values[1]) {
    check(in[0], *values[1]);
  }
  return {in[0]};
}

std::vector<bool> value_inputs(const Node& n) {
  std::vector<bool> read(n.inputs.size(), false);
  for (int i : n.op->needs_input_values())
    if (i < static_cast<int>(read.size())) read[static_cast<size_t>(i)] = true;
  return read;
}

Var shaped_like(const Var& x, const Var& like, const std::string& what, const Loc& loc) {
  return apply1(std::make_shared<ShapedLike>(what, false), {x, like}, loc);
}

Var shaped_as(const Var& x, const Var& shape, const std::string& what, const Loc& loc) {
  return apply1(std::make_shared<ShapedLike>(what, true), {x, shape}, loc);
}

Var pad_left(const Var& v, int64_t ndim, const Loc& loc) {
  if (v.ndim() >= ndim) return v;
  if (const Variable* var = v.get(); var->constant) {
    Shape shape(ndim - v.ndim(), 1);
    shape.insert(shape.end(), var->constant->shape().begin(), var->constant->shape().end());
    Var c = constant(var->constant->reshape(shape));
    c.get()->weak = var->weak;
    return c;
  }
  std::vector<int64_t> pattern(ndim - v.ndim(), -1);
  for (int64_t i = 0; i < v.ndim(); ++i) pattern.push_back(i);
  return dimshuffle(v, pattern, loc);
}

Var dimshuffle(const Var& x, std::vector<int64_t> pattern, Loc loc) {
  return apply1(std::make_shared<DimShuffle>(std::move(pattern)), {x}, loc);
}

Var transpose(const Var& x, Loc loc) {
  std::vector<int64_t> pattern;
  for (int64_t d = x.ndim() - 1; d >= 0; --d) pattern.push_back(d);
  return dimshuffle(x, pattern, loc);
}

Var reshape(const Var& x, Shape shape, Loc loc) {
  return apply1(std::make_shared<Reshape>(std::move(shape), 0, 0, false), {x}, loc);
}

Var reshape(const Var& x, std::initializer_list<int64_t> shape, Loc loc) { return reshape(x, Shape(shape), loc); }

Var reshape(const Var& x, const Var& shape, std::optional<int64_t> ndim, Loc loc) {
  if (!ndim) {
    const Variable* v = shape.get();
    if (v->constant) return reshape(x, v->constant->to_vector<int64_t>(), loc);
    if (v->owner && dynamic_cast<const ShapeOf*>(v->owner->op.get())) ndim = v->owner->inputs[0].ndim();
    else if (auto n = stacked_length(shape)) ndim = *n;
    else
      throw TypeError("reshape: cannot tell how many dimensions the symbolic shape " + shape.type().str() +
                      " has; pass ndim (at " + loc_str(loc) + ")");
  }
  return apply1(std::make_shared<Reshape>(Shape{}, *ndim, 0, true), {x, shape}, loc);
}

Var flatten(const Var& x, int64_t outdim, Loc loc) {
  if (outdim < 1) throw TypeError("flatten: outdim must be at least 1, got " + std::to_string(outdim) + " (at " + loc_str(loc) + ")");
  return apply1(std::make_shared<Reshape>(Shape{}, 0, outdim, false), {x}, loc);
}

Var arange(RangeValue stop, Loc loc) { return arange(0, stop, 1, loc); }

Var arange(RangeValue start, RangeValue stop, RangeValue step, Loc loc) {
  auto at = [&] { return " (at " + loc_str(loc) + ")"; };
  for (const RangeValue* v : {&start, &stop, &step})
    if (!v->fits_i64)
      throw TypeError("arange: " + std::to_string(static_cast<uint64_t>(v->value)) +
                      " is above the largest i64 (kiln's integers are signed); give a smaller bound or a float" + at());
  if (start.is_integer && stop.is_integer && step.is_integer) {
    const int64_t a = start.integer, b = stop.integer, s = step.integer;
    if (s == 0) throw TypeError("arange: step cannot be zero" + at());
    // ceil((b - a) / s) without overflow in b - a: in 128 bits.
    const __int128 span = static_cast<__int128>(b) - a;
    __int128 count = span / s + ((span % s != 0 && ((span < 0) == (s < 0))) ? 1 : 0);
    if (count < 0) count = 0;
    if (count > static_cast<__int128>(1e12))
      throw TypeError("arange: from " + std::to_string(a) + " to " + std::to_string(b) + " by " + std::to_string(s) +
                      " is too many values" + at());
    std::vector<int64_t> values(static_cast<size_t>(count));
    for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<int64_t>(a + static_cast<__int128>(i) * s);
    return constant(Tensor::from(values, Shape{static_cast<int64_t>(values.size())}));
  }
  const double a = start.value, b = stop.value, s = step.value;
  if (s == 0) throw TypeError("arange: step cannot be zero" + at());
  if (!std::isfinite(a) || !std::isfinite(b) || !std::isfinite(s))
    throw TypeError("arange: start, stop and step must be finite, got " + std::to_string(a) + ", " + std::to_string(b) +
                    ", " + std::to_string(s) + at());
  const double length = std::ceil((b - a) / s);
  if (length > 1e12)
    throw TypeError("arange: " + std::to_string(length) + " values from " + std::to_string(a) + " to " + std::to_string(b) +
                    " by " + std::to_string(s) + " are too many" + at());
  const int64_t count = length > 0 ? static_cast<int64_t>(length) : 0;
  std::vector<double> values(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) values[static_cast<size_t>(i)] = a + static_cast<double>(i) * s;
  return constant(Tensor::from(values, Shape{count}));
}

Var shape_of(const Var& x, Loc loc) { return apply1(std::make_shared<ShapeOf>(), {x}, loc); }

}  // namespace kiln

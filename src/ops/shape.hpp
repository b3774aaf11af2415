#pragma once
#include "graph/executable.hpp"
#include "graph/op.hpp"
#include "tensor/small_vector.hpp"

namespace kiln {

// Reorders, inserts (-1) and drops (broadcastable) axes: always a view.
class DimShuffle final : public Op {
 public:
  explicit DimShuffle(std::vector<int64_t> pattern) : pattern_(std::move(pattern)) {}
  const std::vector<int64_t>& pattern() const { return pattern_; }
  void params(OpParams& out) const override { out << pattern_; }
  std::string name() const override;
  std::vector<Type> infer_types(const std::vector<Type>& inputs) const override;
  std::vector<Shape> infer_shapes(const std::vector<Shape>& inputs, const std::vector<const Tensor*>&) const override;
  std::vector<Var> L_op(const Node& node, const std::vector<Var>& output_grads) const override;
  std::vector<std::pair<int, int>> view_map() const override { return {{0, 0}}; }
  bool may_fail_on_values() const override { return false; }

 private:
  std::vector<int64_t> pattern_;
};

// x reshaped to a constant shape (one -1 allowed), to the value of a 1-D integer input of ndim
// entries (target_is_input: the node's second input), or with its trailing axes flattened
// (flatten_to > 0). A view when x is contiguous, else a copy.
class Reshape final : public Op {
 public:
  Reshape(Shape target, int64_t ndim, int64_t flatten_to, bool target_is_input)
      : target_(std::move(target)), ndim_(ndim), flatten_to_(flatten_to), target_is_input_(target_is_input) {}
  bool flattens() const { return flatten_to_ > 0; }  // its target depends on the input's shape
  const Shape& target() const { return target_; }     // the constant form's target
  int64_t flatten_to() const { return flatten_to_; }
  void params(OpParams& out) const override { out << target_ << ndim_ << flatten_to_ << target_is_input_; }
  std::string name() const override;
  std::vector<Type> infer_types(const std::vector<Type>& inputs) const override;
  std::vector<Shape> infer_shapes(const std::vector<Shape>& inputs, const std::vector<const Tensor*>& values) const override;
  std::vector<int> needs_input_values() const override {
    if (target_is_input_) return {1};
    return {};
  }
  // The output's shape for an input of shape x (and the target's value, for the two-input form).
  Dims resolve(std::span<const int64_t> x, const Tensor* target_value) const;
  std::vector<Var> L_op(const Node& node, const std::vector<Var>& output_grads) const override;
  std::vector<std::pair<int, int>> view_map() const override { return {{0, 0}}; }
  bool may_fail_on_values() const override { return false; }

 private:
  Shape target_;
  int64_t ndim_;
  int64_t flatten_to_;
  bool target_is_input_;
};

// x, checked to have the shape of `like` (read for its shape alone), or, with like_is_shape, the
// shape that `like`, a 1-D i64 shape vector, holds: a ShapeError naming `what` when they differ.
// Planning hands x on, so it costs nothing; it guards values that must match another's shape where
// broadcasting would silently accept them (Rop's eval points against their wrt; Lop's against
// shape_of(f), which the shape rewrites resolve without computing f).
class ShapedLike final : public Op {
 public:
  ShapedLike(std::string what, bool like_is_shape) : what_(std::move(what)), like_is_shape_(like_is_shape) {}
  void params(OpParams& out) const override { out << std::vector<char>(what_.begin(), what_.end()) << like_is_shape_; }
  std::string name() const override { return "shaped_like"; }
  std::vector<Type> infer_types(const std::vector<Type>& inputs) const override;
  std::vector<Shape> infer_shapes(const std::vector<Shape>& inputs, const std::vector<const Tensor*>& values) const override;
  std::vector<Var> L_op(const Node&, const std::vector<Var>& output_grads) const override { return {output_grads[0], Var()}; }
  std::vector<std::pair<int, int>> view_map() const override { return {{0, 0}}; }
  std::vector<int> shape_only_inputs() const override {
    if (like_is_shape_) return {};
    return {1};
  }
  std::vector<int> needs_input_values() const override {
    if (like_is_shape_) return {1};
    return {};
  }
  std::optional<int> forwards_input(const std::vector<Shape>&, const std::vector<Shape>&) const override { return 0; }
  bool may_fail_on_values() const override { return false; }
  // The ShapeError when x's shape is not the required one.
  // The ShapeError when a value of shape x does not have like's shape (or the shape like holds).
  void check(const Shape& x, const Tensor& like) const;

 private:
  std::string what_;
  bool like_is_shape_;
};
Var shaped_like(const Var& x, const Var& like, const std::string& what, const Loc& loc);
// x, checked to have the shape that the 1-D i64 vector `shape` holds.
Var shaped_as(const Var& x, const Var& shape, const std::string& what, const Loc& loc);

class ShapeOf final : public Op {
 public:
  void params(OpParams&) const override {}
  std::string name() const override { return "shape"; }
  std::vector<Type> infer_types(const std::vector<Type>& inputs) const override;
  std::vector<Shape> infer_shapes(const std::vector<Shape>& inputs, const std::vector<const Tensor*>&) const override;
  std::vector<Var> L_op(const Node&, const std::vector<Var>&) const override { return {Var()}; }
  bool may_fail_on_values() const override { return false; }
};

// Per input of n: whether n's shape inference reads its value (reshape's target) rather than only
// its shape; an InferredShape of n takes those inputs themselves and the others' shape vectors.
std::vector<bool> value_inputs(const Node& n);

// The shape of output `index` of `op`, computed by the op's shape inference alone: the op's kernel
// never runs. Input i is the shape vector of the op's input i, or, where the op's shape inference
// reads an input's value (reshape's target), that input itself. canonicalize turns shape(f(x))
// into this, recursively, so only shape arithmetic remains.
class InferredShape final : public Op {
 public:
  InferredShape(std::shared_ptr<const Op> op, int index, int64_t ndim, std::vector<bool> value_inputs)
      : op_(std::move(op)), index_(index), ndim_(ndim), value_inputs_(std::move(value_inputs)) {}
  void params(OpParams& out) const override { out << *op_ << index_ << ndim_ << value_inputs_; }
  std::string name() const override { return "inferred_shape{" + op_->name() + "," + std::to_string(index_) + "}"; }
  std::vector<Type> infer_types(const std::vector<Type>&) const override { return {Type{DType::i64, {false}}}; }
  std::vector<Shape> infer_shapes(const std::vector<Shape>&, const std::vector<const Tensor*>&) const override {
    return {Shape{ndim_}};
  }
  std::vector<Var> L_op(const Node& node, const std::vector<Var>&) const override {
    return std::vector<Var>(node.inputs.size());
  }
  bool may_fail_on_values() const override { return false; }
  const Op& op() const { return *op_; }
  int index() const { return index_; }
  bool value_input(size_t i) const { return value_inputs_[i]; }

 private:
  std::shared_ptr<const Op> op_;
  int index_;
  int64_t ndim_;
  std::vector<bool> value_inputs_;
};

// v with broadcastable axes inserted on the left up to ndim (NumPy's alignment of lower-rank
// operands); a constant is reshaped directly instead of growing the graph.
Var pad_left(const Var& v, int64_t ndim, const Loc& loc);

void add_shape_kernels(KernelTable& table);

}  // namespace kiln

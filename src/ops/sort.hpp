#pragma once
#include "graph/executable.hpp"
#include "graph/op.hpp"

namespace kiln {

// The i64 indices that sort x along axis: ascending, NaN last, equal values in their order
// (NumPy's argsort with kind="stable").
class Argsort final : public Op {
 public:
  explicit Argsort(int64_t axis) : axis_(axis) {}
  int64_t axis() const { return axis_; }
  void params(OpParams& out) const override { out << axis_; }
  std::string name() const override { return "argsort{axis=" + std::to_string(axis_) + "}"; }
  std::vector<Type> infer_types(const std::vector<Type>& inputs) const override;
  std::vector<Shape> infer_shapes(const std::vector<Shape>& inputs, const std::vector<const Tensor*>&) const override;
  std::vector<Var> L_op(const Node&, const std::vector<Var>&) const override { return {Var()}; }
  bool may_fail_on_values() const override { return false; }

 private:
  int64_t axis_;
};

// take_along(x, indices): out[..., i, ...] = x[..., indices[..., i, ...], ...] along axis, indices
// of x's shape (NumPy's take_along_axis); an index out of range is a ShapeError when it runs.
class TakeAlong final : public Op {
 public:
  explicit TakeAlong(int64_t axis) : axis_(axis) {}
  int64_t axis() const { return axis_; }
  void params(OpParams& out) const override { out << axis_; }
  std::string name() const override { return "take_along{axis=" + std::to_string(axis_) + "}"; }
  std::vector<Type> infer_types(const std::vector<Type>& inputs) const override;
  std::vector<Shape> infer_shapes(const std::vector<Shape>& inputs, const std::vector<const Tensor*>&) const override;
  std::vector<Var> L_op(const Node& node, const std::vector<Var>& output_grads) const override;
  bool checks_values_before_writing() const override { return true; }

 private:
  int64_t axis_;
};

// The gradient of take_along: zeros of g's shape with g[..., i, ...] added at [..., indices[..., i, ...], ...].
class TakeAlongGrad final : public Op {
 public:
  explicit TakeAlongGrad(int64_t axis) : axis_(axis) {}
  int64_t axis() const { return axis_; }
  void params(OpParams& out) const override { out << axis_; }
  std::string name() const override { return "take_along_grad{axis=" + std::to_string(axis_) + "}"; }
  std::vector<Type> infer_types(const std::vector<Type>& inputs) const override;
  std::vector<Shape> infer_shapes(const std::vector<Shape>& inputs, const std::vector<const Tensor*>&) const override;
  std::vector<Var> L_op(const Node& node, const std::vector<Var>& output_grads) const override;
  bool checks_values_before_writing() const override { return true; }

 private:
  int64_t axis_;
};

void add_sort_kernels(KernelTable& table);

}  // namespace kiln

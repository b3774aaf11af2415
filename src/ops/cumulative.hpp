#pragma once
#include "graph/executable.hpp"
#include "graph/op.hpp"

namespace kiln {

// Running sums along one axis (NumPy's cumsum): out[..., i, ...] = x[..., 0, ...] + ... + x[..., i, ...],
// added in order in x's dtype (the builder widens integers and bools to i64 first, as NumPy).
class CumSum final : public Op {
 public:
  explicit CumSum(int64_t axis) : axis_(axis) {}
  int64_t axis() const { return axis_; }
  void params(OpParams& out) const override { out << axis_; }
  std::string name() const override { return "cumsum{axis=" + std::to_string(axis_) + "}"; }
  std::vector<Type> infer_types(const std::vector<Type>& inputs) const override;
  std::vector<Shape> infer_shapes(const std::vector<Shape>& inputs, const std::vector<const Tensor*>&) const override;
  // The reverse running sum of the output's gradient: each input element reaches every later output.
  std::vector<Var> L_op(const Node& node, const std::vector<Var>& output_grads) const override;
  // Linear: the running sum of the tangent.
  std::optional<std::vector<Var>> R_op(const Node& node, const std::vector<Var>& input_tangents) const override;
  bool may_fail_on_values() const override { return false; }

 private:
  int64_t axis_;
};

void add_cumulative_kernels(KernelTable& table);

}  // namespace kiln

#pragma once
#include <optional>

#include "graph/executable.hpp"
#include "graph/op.hpp"

namespace kiln {

class Join final : public Op {
 public:
  explicit Join(int64_t axis) : axis_(axis) {}
  int64_t axis() const { return axis_; }
  void params(OpParams& out) const override { out << axis_; }
  std::string name() const override { return "join{axis=" + std::to_string(axis_) + "}"; }
  std::vector<Type> infer_types(const std::vector<Type>& inputs) const override;
  std::vector<Shape> infer_shapes(const std::vector<Shape>& inputs, const std::vector<const Tensor*>&) const override;
  std::vector<Var> L_op(const Node& node, const std::vector<Var>& output_grads) const override;
  bool may_fail_on_values() const override { return false; }

 private:
  int64_t axis_;
};

// The gradient of Join: g cut into pieces shaped like the joined inputs (inputs 1..n give shapes).
class JoinSplit final : public Op {
 public:
  explicit JoinSplit(int64_t axis) : axis_(axis) {}
  int64_t axis() const { return axis_; }
  void params(OpParams& out) const override { out << axis_; }
  std::string name() const override { return "join_split{axis=" + std::to_string(axis_) + "}"; }
  std::vector<Type> infer_types(const std::vector<Type>& inputs) const override;
  std::vector<Shape> infer_shapes(const std::vector<Shape>& inputs, const std::vector<const Tensor*>&) const override;
  std::vector<Var> L_op(const Node& node, const std::vector<Var>& output_grads) const override;
  bool may_fail_on_values() const override { return false; }

 private:
  int64_t axis_;
};

// The static length of a 1-D vector built by stack() of scalars, when it can be told.
std::optional<int64_t> stacked_length(const Var& v);

void add_join_kernels(KernelTable& table);

}  // namespace kiln

#pragma once
#include "graph/executable.hpp"
#include "graph/op.hpp"

namespace kiln {

enum class ReduceKind { sum, prod, max, min, mean, argmax, argmin };

class Reduce final : public Op {
 public:
  Reduce(ReduceKind kind, std::vector<int64_t> axes, bool keepdims) : kind_(kind), axes_(std::move(axes)), keepdims_(keepdims) {}
  ReduceKind kind() const { return kind_; }
  const std::vector<int64_t>& axes() const { return axes_; }
  bool keepdims() const { return keepdims_; }
  void params(OpParams& out) const override { out << kind_ << axes_ << keepdims_; }
  std::string name() const override;
  std::vector<Type> infer_types(const std::vector<Type>& inputs) const override;
  std::vector<Shape> infer_shapes(const std::vector<Shape>& inputs, const std::vector<const Tensor*>&) const override;
  std::vector<Var> L_op(const Node& node, const std::vector<Var>& output_grads) const override;
  bool may_fail_on_values() const override { return false; }

 private:
  ReduceKind kind_;
  std::vector<int64_t> axes_;  // sorted, non-negative
  bool keepdims_;
};

// log(sum(exp(x), axes)) computed stably: the maximum over the axes is taken out first.
class LogSumExp final : public Op {
 public:
  LogSumExp(std::vector<int64_t> axes, bool keepdims) : reduce_(ReduceKind::sum, axes, keepdims), axes_(std::move(axes)), keepdims_(keepdims) {}
  const std::vector<int64_t>& axes() const { return axes_; }
  bool keepdims() const { return keepdims_; }
  void params(OpParams& out) const override { out << axes_ << keepdims_; }
  std::string name() const override;
  std::vector<Type> infer_types(const std::vector<Type>& inputs) const override;
  std::vector<Shape> infer_shapes(const std::vector<Shape>& inputs, const std::vector<const Tensor*>& values) const override;
  std::vector<Var> L_op(const Node& node, const std::vector<Var>& output_grads) const override;
  bool may_fail_on_values() const override { return false; }

 private:
  Reduce reduce_;
  std::vector<int64_t> axes_;
  bool keepdims_;
};

// sum_to_shape(g, shape): sums g over the axes where `shape` (a 1-D i64 value) has size 1, so that
// the result has that shape: the gradient of broadcasting. Where nothing was broadcast the planner
// hands g on (forwards_input), so it costs nothing. It takes a shape, not the value whose shape it
// is, so that value need not be kept for it.
class SumToShape final : public Op {
 public:
  explicit SumToShape(std::vector<bool> broadcastable) : broadcastable_(std::move(broadcastable)) {}
  void params(OpParams& out) const override { out << broadcastable_; }
  std::string name() const override {
    std::string s = "sum_to_shape{";
    for (bool b : broadcastable_) s += b ? "1" : "?";
    return s + "}";
  }
  std::vector<int> needs_input_values() const override { return {1}; }
  std::vector<Type> infer_types(const std::vector<Type>& inputs) const override;
  std::vector<Shape> infer_shapes(const std::vector<Shape>& inputs, const std::vector<const Tensor*>&) const override;
  std::vector<Var> L_op(const Node& node, const std::vector<Var>& output_grads) const override;
  std::vector<std::pair<int, int>> inplace_options() const override { return {{0, 0}}; }
  // Nothing to sum: the gradient itself (the common case of a bias added to a matrix product).
  std::optional<int> forwards_input(const std::vector<Shape>& inputs, const std::vector<Shape>& outputs) const override {
    if (inputs[0] == outputs[0]) return 0;
    return std::nullopt;
  }
  bool may_fail_on_values() const override { return false; }

 private:
  std::vector<bool> broadcastable_;
};

Var sum_to_shape_of(const Var& g, const Var& like, const Loc& loc);
// Inserts broadcastable axes where a reduction without keepdims removed them.
Var expand_reduced(const Var& v, const std::vector<int64_t>& axes, int64_t ndim, const Loc& loc);
// The number of elements a reduction of x over `axes` (sorted, non-negative) combines: an i64 scalar.
Var reduced_count(const Var& x, const std::vector<int64_t>& axes, const Loc& loc);
std::vector<int64_t> normalize_axes(const std::vector<int64_t>& axes, int64_t ndim, const std::string& op, const Loc& loc);

void add_reduce_kernels(KernelTable& table);

}  // namespace kiln

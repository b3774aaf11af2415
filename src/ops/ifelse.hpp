#pragma once
#include <unordered_set>

#include "graph/executable.hpp"
#include "graph/op.hpp"

namespace kiln {

// ifelse(cond, then..., else...): n outputs, each a copy of the branch cond selects. The op only
// selects; laziness comes from the program, which jumps over the nodes only the other branch
// needs (compile/runtime.cpp), so their inputs arrive undefined.
class IfElse final : public Op {
 public:
  explicit IfElse(int n) : n_(n) {}
  int n() const { return n_; }
  void params(OpParams& out) const override { out << n_; }
  std::string name() const override { return "ifelse{" + std::to_string(n_) + "}"; }
  std::vector<Type> infer_types(const std::vector<Type>& inputs) const override;
  std::vector<Shape> infer_shapes(const std::vector<Shape>& inputs, const std::vector<const Tensor*>& values) const override;
  std::vector<int> needs_input_values() const override { return {0}; }
  bool infers_shapes_without_values() const override { return true; }
  std::vector<Tensor> values_from_known_inputs(const std::vector<const Tensor*>& values) const override;
  std::vector<Var> L_op(const Node& node, const std::vector<Var>& output_grads) const override;
  bool may_fail_on_values() const override { return false; }

 private:
  int n_;
};

bool truth_of(const Tensor& cond);

// The nodes whose values the roots read: through shape_of's operand only with `shape_reads`
// (a value read for its shape alone), through an ifelse's branches only with `branches` (without,
// the nodes every run computes, not those that run only when a branch is taken).
std::unordered_set<const Node*> nodes_read(const std::vector<Var>& roots, bool shape_reads, bool branches);

void add_ifelse_kernels(KernelTable& table);

}  // namespace kiln

#include "ops/ifelse.hpp"

#include "kiln/ops.hpp"
#include "ops/elemwise.hpp"
#include "ops/shape.hpp"

#include "tensor/copy.hpp"

namespace kiln {

bool truth_of(const Tensor& cond) {
  if (cond.numel() != 1) throw ShapeError("ifelse: the condition must hold one value, got " + cond.str());
  return cond.item<double>() != 0.0;
}

std::vector<Type> IfElse::infer_types(const std::vector<Type>& in) const {
  if (static_cast<int>(in.size()) != 1 + 2 * n_) throw TypeError(name() + ": takes a condition and " + std::to_string(n_) + " pairs");
  if (in[0].ndim() != 0) throw TypeError("ifelse: the condition must be a scalar (0-d), got " + in[0].str());
  std::vector<Type> out;
  for (int i = 0; i < n_; ++i) {
    const Type &a = in[1 + i], &b = in[1 + n_ + i];
    if (a.dtype != b.dtype || a.ndim() != b.ndim())
      throw TypeError("ifelse: branch values " + std::to_string(i) + " differ: " + a.str() + " and " + b.str() +
                      "; cast them to one dtype and number of dimensions");
    std::vector<bool> bc(a.ndim());
    for (int64_t d = 0; d < a.ndim(); ++d) bc[d] = a.broadcastable[d] && b.broadcastable[d];
    out.push_back(Type{a.dtype, bc});
  }
  return out;
}

std::vector<Shape> IfElse::infer_shapes(const std::vector<Shape>& in, const std::vector<const Tensor*>& values) const {
  if (!values.at(0)) {
    if (!std::equal(in.begin() + 1, in.begin() + 1 + n_, in.begin() + 1 + n_))
      throw ShapeError(name() + ": which branch runs is only known at run time, and the branches' shapes differ");
    return std::vector<Shape>(in.begin() + 1, in.begin() + 1 + n_);
  }
  const int first = truth_of(*values[0]) ? 1 : 1 + n_;
  return std::vector<Shape>(in.begin() + first, in.begin() + first + n_);
}

std::vector<Tensor> IfElse::values_from_known_inputs(const std::vector<const Tensor*>& values) const {
  std::vector<Tensor> known;
  for (int i = 0; i < n_; ++i) {
    const Tensor *then_value = values.at(static_cast<size_t>(1 + i)), *else_value = values.at(static_cast<size_t>(1 + n_ + i));
    if (!then_value || !else_value || then_value->dtype() != else_value->dtype() ||
        then_value->shape() != else_value->shape() || then_value->to_vector<double>() != else_value->to_vector<double>())
      return {};
    known.push_back(*then_value);
  }
  return known;
}

std::unordered_set<const Node*> nodes_read(const std::vector<Var>& roots, bool shape_reads, bool branches) {
  std::unordered_set<const Node*> read;
  std::vector<const Node*> stack;
  auto reach = [&](const Var& v) {
    if (const Node* n = v.get()->owner; n && read.insert(n).second) stack.push_back(n);
  };
  for (const Var& r : roots) reach(r);
  while (!stack.empty()) {
    const Node* n = stack.back();
    stack.pop_back();
    if (!shape_reads && dynamic_cast<const ShapeOf*>(n->op.get())) continue;
    if (!branches && dynamic_cast<const IfElse*>(n->op.get())) {
      reach(n->inputs[0]);
      continue;
    }
    for (const Var& in : n->inputs) reach(in);
  }
  return read;
}

namespace {

class IfElseKernel final : public KernelOf<IfElse> {
 public:
  using KernelOf::KernelOf;
  void run(InputValues in, OutputValues out, std::span<std::byte>) const override {
    const int n = op().n();
    const int first = truth_of(in[0]) ? 1 : 1 + n;
    for (int i = 0; i < n; ++i) copy_broadcast(out[i], in[first + i]);
  }
};

}  // namespace

void add_ifelse_kernels(KernelTable& table) { table.add<IfElse, IfElseKernel>(); }

std::vector<Var> IfElse::L_op(const Node& node, const std::vector<Var>& gouts) const {
  const Var& c = node.inputs[0];
  std::vector<Var> g(node.inputs.size());
  for (int i = 0; i < n_; ++i) {
    if (!gouts[i].defined()) continue;
    const Var &a = node.inputs[1 + i], &b = node.inputs[1 + n_ + i];
    if (is_float(a.dtype())) g[1 + i] = ifelse(c, gouts[i], zeros_like(a, node.loc), node.loc);
    if (is_float(b.dtype())) g[1 + n_ + i] = ifelse(c, zeros_like(b, node.loc), gouts[i], node.loc);
  }
  return g;
}

std::vector<Var> ifelse(const Var& cond, const std::vector<Var>& then_values, const std::vector<Var>& else_values, Loc loc) {
  if (then_values.size() != else_values.size() || then_values.empty())
    throw TypeError("ifelse: needs as many values for each branch (got " + std::to_string(then_values.size()) + " and " +
                    std::to_string(else_values.size()) + ") (at " + loc_str(loc) + ")");
  std::vector<Var> in{cond};
  for (size_t i = 0; i < then_values.size(); ++i) {
    DType d = result_dtype({then_values[i], else_values[i]});
    in.push_back(cast(then_values[i], d, loc));
  }
  for (size_t i = 0; i < else_values.size(); ++i) in.push_back(cast(else_values[i], in[1 + i].dtype(), loc));
  return apply(std::make_shared<IfElse>(static_cast<int>(then_values.size())), in, loc);
}

Var ifelse(const Var& cond, const Var& then_value, const Var& else_value, Loc loc) {
  return ifelse(cond, std::vector<Var>{then_value}, std::vector<Var>{else_value}, loc)[0];
}

}  // namespace kiln

#include "compile/reference.hpp"

#include <cmath>
#include <unordered_map>
#include <unordered_set>

#include "graph/function_graph.hpp"
#include "ops/elemwise.hpp"
#include "tensor/dispatch.hpp"

namespace kiln {

namespace {

const Elemwise* elementwise_op(const Variable* v) {
  return v->owner ? dynamic_cast<const Elemwise*>(v->owner->op.get()) : nullptr;
}

// The elementwise nodes of root's expression in topological order.
std::vector<const Node*> elementwise_nodes(const Var& root) {
  std::vector<const Node*> order;
  std::unordered_set<const Node*> seen;
  std::vector<std::pair<const Node*, bool>> stack;
  if (elementwise_op(root.get())) stack.push_back({root.get()->owner, false});
  while (!stack.empty()) {
    auto [n, expanded] = stack.back();
    stack.pop_back();
    if (expanded) {
      order.push_back(n);
      continue;
    }
    if (!seen.insert(n).second) continue;
    stack.push_back({n, true});
    for (const Var& in : n->inputs)
      if (elementwise_op(in.get()) && !seen.count(in.get()->owner)) stack.push_back({in.get()->owner, false});
  }
  return order;
}

// v's values stretched to shape (v has shape's ndim or fewer dimensions, NumPy-aligned).
std::vector<long double> stretched(const Tensor& v, const Shape& shape) {
  Shape strides(shape.size(), 0);
  const size_t pad = shape.size() - static_cast<size_t>(v.ndim());
  for (size_t d = 0; d < static_cast<size_t>(v.ndim()); ++d) strides[pad + d] = v.shape()[d] == 1 ? 0 : v.strides()[d];
  const std::vector<double> values = v.view(shape, strides, v.offset()).to_vector<double>();
  return std::vector<long double>(values.begin(), values.end());
}

long double rounded_to(DType dtype, long double x) {
  switch (dtype) {
    case DType::f32: return static_cast<float>(x);
    case DType::f64: return static_cast<double>(x);
    case DType::i32: return static_cast<int32_t>(x);
    case DType::i64: return static_cast<int64_t>(x);
    case DType::b8: return x != 0;
  }
  return x;
}

}  // namespace

std::vector<Var> elementwise_boundary(const Var& root) {
  std::vector<Var> boundary;
  std::unordered_set<const Variable*> seen;
  for (const Node* n : elementwise_nodes(root))
    for (const Var& in : n->inputs)
      if (!elementwise_op(in.get()) && seen.insert(in.get()).second) boundary.push_back(in);
  return boundary;
}

std::vector<long double> long_double_value(const Var& root, const std::vector<Var>& boundary,
                                           const std::vector<Tensor>& boundary_values, const Shape& shape) {
  std::unordered_map<const Variable*, std::vector<long double>> value;
  for (size_t i = 0; i < boundary.size(); ++i) value[boundary[i].get()] = stretched(boundary_values[i], shape);
  const size_t n = static_cast<size_t>(shape_numel(shape));
  for (const Node* node : elementwise_nodes(root)) {
    const ScalarOp op = static_cast<const Elemwise&>(*node->op).scalar_op();
    std::vector<const std::vector<long double>*> args;
    for (const Var& in : node->inputs) args.push_back(&value.at(in.get()));
    std::vector<long double> out(n);
    const DType dtype = node->outputs[0]->type.dtype;
    if (op == ScalarOp::cast || op == ScalarOp::fill) {
      for (size_t i = 0; i < n; ++i) out[i] = (*args.back())[i];
    } else if (op == ScalarOp::where) {
      for (size_t i = 0; i < n; ++i) out[i] = (*args[0])[i] != 0 ? (*args[1])[i] : (*args[2])[i];
    } else if (args.size() == 1) {
      visit_unary<long double>(op, [&](auto f, bool) {
        for (size_t i = 0; i < n; ++i) out[i] = f((*args[0])[i]);
      });
    } else {
      visit_binary<long double>(op, [&](auto f, bool) {
        for (size_t i = 0; i < n; ++i) {
          long double acc = f((*args[0])[i], (*args[1])[i]);
          for (size_t k = 2; k < args.size(); ++k) acc = f(acc, (*args[k])[i]);
          out[i] = acc;
        }
      });
    }
    // Casts to narrower types, comparisons and integer arithmetic keep their meaning.
    if (!is_float(dtype) || op == ScalarOp::cast)
      for (long double& x : out) x = rounded_to(dtype, x);
    value[node->outputs[0].get()] = std::move(out);
  }
  return value.at(root.get());
}

}  // namespace kiln

#pragma once
#include <optional>

#include "graph/function_graph.hpp"
#include "ops/elemwise.hpp"

namespace kiln::pattern {

// The node computing v when it is an op of class T (else null).
template <class T> const T* op_of(const Var& v) {
  const Node* n = v.defined() ? v.get()->owner : nullptr;
  return n ? dynamic_cast<const T*>(n->op.get()) : nullptr;
}

inline const Node* node_of(const Var& v) { return v.defined() ? v.get()->owner : nullptr; }

// v = scalar_op(...) : its inputs; nullopt otherwise.
inline std::optional<std::vector<Var>> match(const Var& v, ScalarOp op) {
  const Elemwise* e = op_of<Elemwise>(v);
  if (!e || e->scalar_op() != op) return std::nullopt;
  return v.get()->owner->inputs;
}

// Whether two constants are one value: dtype, shape and bytes (NaN payloads and the sign of zero
// included).
bool same_constant(const Tensor& a, const Tensor& b);
// The value of a constant whose elements are all equal.
std::optional<double> uniform_constant(const Var& v);
// True when v is a constant equal to x everywhere and every dimension has size 1, so that combining
// it elementwise with a value cannot change that value's shape.
bool is_scalar_constant(const Var& v, double x);
// A 0-d Var with the value of v when v is a scalar in disguise: 0-d, a dimshuffle of a 0-d value,
// or a constant of size-1 dimensions.
std::optional<Var> as_scalar(const Var& v);
// x when v is fill(x, 0): zeros shaped like x.
std::optional<Var> zeros_like_of(const Var& v);
// Readers of v that the outputs still depend on.
size_t live_clients(const FunctionGraph& graph, const Var& v);

}  // namespace kiln::pattern

#include "ops/patterns.hpp"

#include <cstring>

#include "kiln/ops.hpp"
#include "ops/shape.hpp"

namespace kiln::pattern {

bool same_constant(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  const Tensor ca = a.contiguous(), cb = b.contiguous();
  return std::memcmp(ca.raw_data(), cb.raw_data(), ca.nbytes()) == 0;
}

std::optional<double> uniform_constant(const Var& v) {
  const Variable* var = v.get();
  if (!var || !var->constant || var->constant->numel() == 0) return std::nullopt;
  const Tensor& t = *var->constant;
  const double first = t.item_as_double(0);
  for (int64_t i = 1; i < t.numel(); ++i)
    if (t.item_as_double(i) != first) return std::nullopt;
  return first;
}

bool is_scalar_constant(const Var& v, double x) {
  auto c = uniform_constant(v);
  if (!c || *c != x) return false;
  for (int64_t d : v.get()->constant->shape())
    if (d != 1) return false;
  return true;
}

std::optional<Var> zeros_like_of(const Var& v) {
  const Elemwise* fill = op_of<Elemwise>(v);
  if (!fill || fill->scalar_op() != ScalarOp::fill) return std::nullopt;
  const Node* n = v.get()->owner;
  if (!is_scalar_constant(n->inputs[1], 0.0)) return std::nullopt;
  return n->inputs[0];
}

std::optional<Var> as_scalar(const Var& v) {
  if (v.ndim() == 0) return v;
  if (const Variable* var = v.get(); var->constant) {
    if (var->constant->numel() != 1) return std::nullopt;
    return constant(var->constant->reshape({}));
  }
  if (const auto* ds = op_of<DimShuffle>(v)) {
    const Var& in = v.get()->owner->inputs[0];
    bool only_inserted = in.ndim() == 0;
    for (int64_t p : ds->pattern()) only_inserted = only_inserted && p < 0;
    if (only_inserted) return in;
  }
  return std::nullopt;
}

size_t live_clients(const FunctionGraph& graph, const Var& v) {
  size_t n = 0;
  for (auto [node, i] : graph.clients(v.get())) {
    if (!node) {
      ++n;
      continue;
    }
    for (const auto& out : node->outputs)
      if (!graph.clients(out.get()).empty()) {
        ++n;
        break;
      }
  }
  return n;
}

}  // namespace kiln::pattern

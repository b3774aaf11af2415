// specialize: replace general patterns by the special ops that compute them in one step.
#include "kiln/ops.hpp"
#include "ops/blas.hpp"
#include "rewrite/catalogue.hpp"
#include "ops/patterns.hpp"
#include "ops/subtensor.hpp"

namespace kiln {

namespace {

using pattern::as_scalar;
using pattern::is_scalar_constant;
using pattern::match;
using pattern::op_of;

ScalarOp scalar_op(const Node& n) { return static_cast<const Elemwise&>(*n.op).scalar_op(); }

// A term of a sum that is alpha * dot(a, b) for 2-D a, b (alpha possibly 1).
struct ScaledProduct {
  Var alpha;
  Var dot;
};

std::optional<ScaledProduct> scaled_product(FunctionGraph& graph, const Var& term) {
  auto is_matrix_product = [&](const Var& v) {
    const Node* n = pattern::node_of(v);
    return op_of<Dot>(v) && n->inputs[0].ndim() == 2 && n->inputs[1].ndim() == 2 && pattern::live_clients(graph, v) == 1;
  };
  if (is_matrix_product(term)) return ScaledProduct{constant(Tensor::full({}, 1.0, term.dtype())), term};
  auto factors = match(term, ScalarOp::mul);
  if (!factors || factors->size() != 2 || pattern::live_clients(graph, term) != 1) return std::nullopt;
  for (int i = 0; i < 2; ++i) {
    auto s = as_scalar((*factors)[i]);
    if (s && is_matrix_product((*factors)[1 - i])) return ScaledProduct{*s, (*factors)[1 - i]};
  }
  return std::nullopt;
}

// c + alpha * dot(a, b), c - alpha * dot(a, b) -> gemm(c, a, b, +-alpha, 1), when c cannot make the
// result larger than the product
std::vector<Var> gemm_from_sum(FunctionGraph& graph, Node& n) {
  const ScalarOp op = scalar_op(n);
  if ((op != ScalarOp::add && op != ScalarOp::sub) || n.inputs.size() != 2 || n.outputs[0]->type.ndim() != 2) return {};
  for (int i = 0; i < 2; ++i) {
    if (op == ScalarOp::sub && i == 0) continue;  // only c - product
    auto product = scaled_product(graph, n.inputs[i]);
    if (!product) continue;
    const Var& c = n.inputs[1 - i];
    const Type& dot_type = product->dot.type();
    bool c_fits = c.ndim() == 2 && c.dtype() == dot_type.dtype;
    for (int64_t d = 0; c_fits && d < 2; ++d) c_fits = !dot_type.broadcastable[d] || c.type().broadcastable[d];
    if (!c_fits) continue;
    const Node& dot_node = *product->dot.get()->owner;
    Var alpha = cast(op == ScalarOp::sub ? -product->alpha : product->alpha, c.dtype(), n.loc);
    Var beta = constant(Tensor::full({}, 1.0, c.dtype()));
    return {apply1(std::make_shared<Gemm>(), {c, dot_node.inputs[0], dot_node.inputs[1], alpha, beta}, n.loc)};
  }
  return {};
}

// c - alpha * u, where u sums into zeros shaped like c (u = gemm(fill(c, 0), a, b, s, t) or
// inc_take(fill(c, 0), v, i)) -> the same sum into c itself, one op that may write in place: the
// SGD update of a weight whose gradient a loop's accumulation summed from zeros.
std::vector<Var> update_from_zeros(FunctionGraph& graph, Node& n) {
  if (scalar_op(n) != ScalarOp::sub || n.inputs.size() != 2) return {};
  const Var& c = n.inputs[0];
  Var alpha = constant(Tensor::full({}, 1.0, c.dtype()));
  Var u = n.inputs[1];
  if (auto factors = match(u, ScalarOp::mul); factors && factors->size() == 2 && pattern::live_clients(graph, u) == 1)
    for (int i = 0; i < 2; ++i)
      if (auto s = as_scalar((*factors)[i]); s && (op_of<Gemm>((*factors)[1 - i]) || op_of<TakeInc>((*factors)[1 - i]))) {
        alpha = *s;
        u = (*factors)[1 - i];
        break;
      }
  const Node* sum = pattern::node_of(u);
  if (!sum || pattern::live_clients(graph, u) != 1 || c.dtype() != u.dtype()) return {};
  auto zeros_like_c = [&](const Var& z) {
    const Node* fill = pattern::node_of(z);
    const auto* ew = fill ? dynamic_cast<const Elemwise*>(fill->op.get()) : nullptr;
    return ew && ew->scalar_op() == ScalarOp::fill && fill->inputs[0].same(c) && is_scalar_constant(fill->inputs[1], 0.0);
  };
  if (!zeros_like_c(sum->inputs[0])) return {};
  const Var minus_alpha = cast(-alpha, c.dtype(), n.loc);
  if (op_of<Gemm>(u))
    return {apply1(std::make_shared<Gemm>(), {c, sum->inputs[1], sum->inputs[2], minus_alpha * sum->inputs[3],
                                              constant(Tensor::full({}, 1.0, c.dtype()))}, n.loc)};
  const auto* inc = op_of<TakeInc>(u);
  if (inc && !inc->set()) return {apply1(sum->op, {c, minus_alpha * sum->inputs[1], sum->inputs[2]}, n.loc)};
  return {};
}

// x ** 2 -> sqr(x), x ** 0.5 -> sqrt(x), x ** 1 -> x
std::vector<Var> special_powers(FunctionGraph&, Node& n) {
  if (scalar_op(n) != ScalarOp::pow) return {};
  const Var &x = n.inputs[0], &e = n.inputs[1];
  if (is_scalar_constant(e, 2.0)) return {sqr(x, n.loc)};
  if (is_scalar_constant(e, 0.5)) return {sqrt(x, n.loc)};
  if (is_scalar_constant(e, 1.0)) return {x};
  return {};
}

}  // namespace

RewriteGroup specialize_group() {
  return {"specialize",
          {},
          {{"gemm_from_sum", {op_class<Elemwise>()}, gemm_from_sum},
           {"update_from_zeros", {op_class<Elemwise>()}, update_from_zeros},
           {"special_powers", {op_class<Elemwise>()}, special_powers}}};
}

}  // namespace kiln

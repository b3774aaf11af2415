// specialize: replace general patterns by the special ops that compute them in one step.
#include <cmath>
#include <functional>

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

// A term of a sum that is alpha * v, alpha a scalar (possibly 1) and v a value `wanted` accepts,
// read by that term alone.
struct ScaledTerm {
  Var alpha;
  Var value;
};

std::optional<ScaledTerm> scaled_term(FunctionGraph& graph, const Var& term, const std::function<bool(const Var&)>& wanted) {
  auto accepted = [&](const Var& v) { return pattern::node_of(v) && wanted(v) && pattern::live_clients(graph, v) == 1; };
  if (accepted(term)) return ScaledTerm{constant(Tensor::full({}, 1.0, term.dtype())), term};
  auto factors = match(term, ScalarOp::mul);
  if (!factors || factors->size() != 2 || pattern::live_clients(graph, term) != 1) return std::nullopt;
  for (int i = 0; i < 2; ++i) {
    auto s = as_scalar((*factors)[i]);
    if (s && accepted((*factors)[1 - i])) return ScaledTerm{*s, (*factors)[1 - i]};
  }
  return std::nullopt;
}

// A term that is alpha * dot(a, b) for 2-D a, b.
std::optional<ScaledTerm> scaled_product(FunctionGraph& graph, const Var& term) {
  return scaled_term(graph, term, [](const Var& v) {
    const Node* n = pattern::node_of(v);
    return op_of<Dot>(v) && n->inputs[0].ndim() == 2 && n->inputs[1].ndim() == 2;
  });
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
    const Type& dot_type = product->value.type();
    bool c_fits = c.ndim() == 2 && c.dtype() == dot_type.dtype;
    for (int64_t d = 0; c_fits && d < 2; ++d) c_fits = !dot_type.broadcastable[d] || c.type().broadcastable[d];
    if (!c_fits) continue;
    const Node& dot_node = *product->value.get()->owner;
    Var alpha = cast(op == ScalarOp::sub ? -product->alpha : product->alpha, c.dtype(), n.loc);
    Var beta = constant(Tensor::full({}, 1.0, c.dtype()));
    return {apply1(std::make_shared<Gemm>(), {c, dot_node.inputs[0], dot_node.inputs[1], alpha, beta}, n.loc)};
  }
  return {};
}

// A constant whose every value is finite.
bool finite_constant(const Var& v) {
  const std::optional<Tensor>& c = v.get()->constant;
  if (!c) return false;
  for (double x : c->to_vector<double>())
    if (!std::isfinite(x)) return false;
  return true;
}

// c - alpha * u, where u sums into zeros shaped like c (u = gemm(fill(c, 0), a, b, s, t) or
// inc_take(fill(c, 0), v, i)) -> the same sum into c itself, one op that may write in place: the
// SGD update of a weight whose gradient a loop's accumulation summed from zeros.
std::vector<Var> update_from_zeros(FunctionGraph& graph, Node& n) {
  if (scalar_op(n) != ScalarOp::sub || n.inputs.size() != 2) return {};
  const Var& c = n.inputs[0];
  const auto term = scaled_term(graph, n.inputs[1], [&](const Var& v) {
    const auto* inc = op_of<TakeInc>(v);
    if (!op_of<Gemm>(v) && !(inc && !inc->set())) return false;
    const auto zeros = pattern::zeros_like_of(v.get()->owner->inputs[0]);
    return v.dtype() == c.dtype() && zeros && zeros->same(c);
  });
  if (!term) return {};
  // Summed into c, the rows inc_take does not reach no longer see alpha * 0: only a finite alpha
  // leaves them as they were (a NaN or infinite one made them NaN).
  if (op_of<TakeInc>(term->value) && !finite_constant(term->alpha)) return {};
  const Node& sum = *term->value.get()->owner;
  const Var minus_alpha = cast(-term->alpha, c.dtype(), n.loc);
  if (op_of<Gemm>(term->value))
    return {apply1(std::make_shared<Gemm>(), {c, sum.inputs[1], sum.inputs[2], minus_alpha * sum.inputs[3],
                                              constant(Tensor::full({}, 1.0, c.dtype()))}, n.loc)};
  return {apply1(sum.op, {c, minus_alpha * sum.inputs[1], sum.inputs[2]}, n.loc)};
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

// stabilize: rewrite expressions that lose precision or overflow into their stable forms.
#include "kiln/ops.hpp"
#include "ops/nnet.hpp"
#include "ops/reduce.hpp"
#include "rewrite/catalogue.hpp"
#include "rewrite/patterns.hpp"

namespace kiln {

namespace {

using pattern::is_scalar_constant;
using pattern::match;
using pattern::op_of;

ScalarOp scalar_op(const Node& n) { return static_cast<const Elemwise&>(*n.op).scalar_op(); }

// The other operand of a two-input add that has the constant `value` as one operand.
std::optional<Var> added_to(const Var& v, double value) {
  auto terms = match(v, ScalarOp::add);
  if (!terms || terms->size() != 2) return std::nullopt;
  if (is_scalar_constant((*terms)[0], value)) return (*terms)[1];
  if (is_scalar_constant((*terms)[1], value)) return (*terms)[0];
  return std::nullopt;
}

// log(1 + x) -> log1p(x); log(1 + exp(x)) and log1p(exp(x)) -> softplus(x);
// log(sigmoid(x)) -> -softplus(-x); log(1 - sigmoid(x)) -> -softplus(x);
// log(softmax(x)) -> log_softmax(x); log(sum(exp(x))) -> logsumexp(x)
std::vector<Var> stable_log(FunctionGraph&, Node& n) {
  const ScalarOp op = scalar_op(n);
  if (op != ScalarOp::log && op != ScalarOp::log1p) return {};
  const Var& in = n.inputs[0];
  const Loc loc = n.loc;
  std::optional<Var> one_plus = op == ScalarOp::log1p ? std::optional<Var>(in) : added_to(in, 1.0);
  if (one_plus) {
    if (auto e = match(*one_plus, ScalarOp::exp)) return {softplus((*e)[0], loc)};
    if (op == ScalarOp::log) return {log1p(*one_plus, loc)};
    return {};
  }
  if (auto s = match(in, ScalarOp::sigmoid)) return {-softplus(-(*s)[0], loc)};
  if (auto d = match(in, ScalarOp::sub); d && is_scalar_constant((*d)[0], 1.0))
    if (auto s = match((*d)[1], ScalarOp::sigmoid)) return {-softplus((*s)[0], loc)};
  if (const auto* sm = op_of<Softmax>(in); sm && !sm->is_log())
    return {log_softmax(in.get()->owner->inputs[0], sm->axis(), loc)};
  if (const auto* r = op_of<Reduce>(in); r && r->kind() == ReduceKind::sum)
    if (auto e = match(in.get()->owner->inputs[0], ScalarOp::exp))
      return {apply1(std::make_shared<LogSumExp>(r->axes(), r->keepdims()), {(*e)[0]}, loc)};
  return {};
}

// exp(x) - 1 -> expm1(x)
std::vector<Var> stable_expm1(FunctionGraph&, Node& n) {
  if (scalar_op(n) != ScalarOp::sub || !is_scalar_constant(n.inputs[1], 1.0)) return {};
  auto e = match(n.inputs[0], ScalarOp::exp);
  return e ? std::vector<Var>{expm1((*e)[0], n.loc)} : std::vector<Var>{};
}

// categorical_crossentropy(softmax(x), labels) -> one op computing logsumexp(x) - x[label]
std::vector<Var> crossentropy_of_softmax(FunctionGraph&, Node& n) {
  const auto* sm = op_of<Softmax>(n.inputs[0]);
  if (!sm || sm->is_log() || sm->axis() != 1) return {};
  return {apply1(std::make_shared<CrossEntropySoftmax>(), {n.inputs[0].get()->owner->inputs[0], n.inputs[1]}, n.loc)};
}

// Its gradient as the chain rule built it, softmax_grad(crossentropy_grad(g, softmax(x), labels),
// softmax(x)) -> g * (softmax(x) - onehot(labels)) in one op
std::vector<Var> crossentropy_softmax_grad(FunctionGraph&, Node& n) {
  const auto& sg = static_cast<const SoftmaxGrad&>(*n.op);
  const Var &gy = n.inputs[0], &y = n.inputs[1];
  const auto* sm = op_of<Softmax>(y);
  if (sg.axis() != 1 || !sm || sm->is_log() || !op_of<CrossEntropyGrad>(gy)) return {};
  const Node& ce = *gy.get()->owner;
  if (!ce.inputs[1].same(y)) return {};
  return {apply1(std::make_shared<CrossEntropySoftmaxGrad>(), {ce.inputs[0], y.get()->owner->inputs[0], ce.inputs[2]}, n.loc)};
}

}  // namespace

RewriteGroup stabilize_group() {
  return {"stabilize",
          {},
          {{"stable_log", {op_class<Elemwise>()}, stable_log},
           {"stable_expm1", {op_class<Elemwise>()}, stable_expm1},
           {"crossentropy_of_softmax", {op_class<CrossEntropy>()}, crossentropy_of_softmax},
           {"crossentropy_softmax_grad", {op_class<SoftmaxGrad>()}, crossentropy_softmax_grad}}};
}

}  // namespace kiln

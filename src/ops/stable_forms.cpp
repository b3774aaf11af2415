#include "ops/stable_forms.hpp"

#include "kiln/ops.hpp"
#include "ops/nnet.hpp"
#include "ops/patterns.hpp"
#include "ops/reduce.hpp"

namespace kiln {

namespace {

using pattern::is_scalar_constant;
using pattern::match;
using pattern::op_of;

// The other operand of a two-input add that has the constant `value` as one operand.
std::optional<Var> added_to(const Var& v, double value) {
  auto terms = match(v, ScalarOp::add);
  if (!terms || terms->size() != 2) return std::nullopt;
  if (is_scalar_constant((*terms)[0], value)) return (*terms)[1];
  if (is_scalar_constant((*terms)[1], value)) return (*terms)[0];
  return std::nullopt;
}

StableForm form(Var value, std::vector<Var> reads, std::vector<Var> skipped) {
  StableForm f{std::move(value), std::move(reads), {}};
  for (const Var& v : skipped) f.skipped.push_back(v.get());
  return f;
}

std::optional<StableForm> stable_log(const Node& n, ScalarOp op) {
  const Var& in = n.inputs[0];
  const Loc loc = n.loc;
  std::optional<Var> one_plus = op == ScalarOp::log1p ? std::optional<Var>(in) : added_to(in, 1.0);
  if (one_plus) {
    std::vector<Var> skipped;
    if (op == ScalarOp::log) skipped.push_back(in);
    if (auto e = match(*one_plus, ScalarOp::exp)) {
      skipped.push_back(*one_plus);
      return form(softplus((*e)[0], loc), {(*e)[0]}, skipped);
    }
    if (op == ScalarOp::log) return form(log1p(*one_plus, loc), {*one_plus}, skipped);
    return std::nullopt;
  }
  if (op != ScalarOp::log) return std::nullopt;
  if (auto s = match(in, ScalarOp::sigmoid)) return form(-softplus(-(*s)[0], loc), {(*s)[0]}, {in});
  if (auto d = match(in, ScalarOp::sub); d && is_scalar_constant((*d)[0], 1.0))
    if (auto s = match((*d)[1], ScalarOp::sigmoid)) return form(-softplus((*s)[0], loc), {(*s)[0]}, {in, (*d)[1]});
  if (const auto* sm = op_of<Softmax>(in); sm && !sm->is_log()) {
    const Var& x = in.get()->owner->inputs[0];
    return form(log_softmax(x, sm->axis(), loc), {x}, {in});
  }
  if (const auto* r = op_of<Reduce>(in); r && r->kind() == ReduceKind::sum)
    if (auto e = match(in.get()->owner->inputs[0], ScalarOp::exp))
      return form(apply1(std::make_shared<LogSumExp>(r->axes(), r->keepdims()), {(*e)[0]}, loc), {(*e)[0]},
                  {in, in.get()->owner->inputs[0]});
  return std::nullopt;
}

}  // namespace

std::optional<StableForm> stable_form(const Node& n) {
  if (const auto* e = dynamic_cast<const Elemwise*>(n.op.get())) {
    const ScalarOp op = e->scalar_op();
    if (op == ScalarOp::log || op == ScalarOp::log1p) return stable_log(n, op);
    if (op == ScalarOp::sub && is_scalar_constant(n.inputs[1], 1.0))
      if (auto x = match(n.inputs[0], ScalarOp::exp)) return form(expm1((*x)[0], n.loc), {(*x)[0]}, {n.inputs[0]});
    return std::nullopt;
  }
  if (dynamic_cast<const CrossEntropy*>(n.op.get())) {
    const auto* sm = op_of<Softmax>(n.inputs[0]);
    if (!sm || sm->is_log() || sm->axis() != 1) return std::nullopt;
    const Var& x = n.inputs[0].get()->owner->inputs[0];
    return form(apply1(std::make_shared<CrossEntropySoftmax>(), {x, n.inputs[1]}, n.loc), {x, n.inputs[1]}, {n.inputs[0]});
  }
  return std::nullopt;
}

Var stabilized(const Var& v) {
  const Node* n = v.get()->owner;
  if (!n) return v;
  auto f = stable_form(*n);
  return f ? f->value : v;
}

}  // namespace kiln

// canonicalize: algebraic identities and useless movement, so that later groups see one form.
#include <unordered_map>

#include "graph/op.hpp"
#include "kiln/ops.hpp"
#include "ops/ifelse.hpp"
#include "ops/reduce.hpp"
#include "ops/shape.hpp"
#include "rewrite/catalogue.hpp"
#include "ops/patterns.hpp"
#include "tensor/convert.hpp"

namespace kiln {

namespace {

using pattern::is_scalar_constant;
using pattern::match;
using pattern::op_of;

const Elemwise& elemwise(const Node& n) { return static_cast<const Elemwise&>(*n.op); }
Var out0(Node& n) { return n.output(0); }
bool same_type(const Var& a, const Var& b) { return a.type() == b.type(); }

// x - x -> 0, x / x -> 1
std::vector<Var> self_inverse(FunctionGraph&, Node& n) {
  const ScalarOp op = elemwise(n).scalar_op();
  if ((op != ScalarOp::sub && op != ScalarOp::div) || !n.inputs[0].same(n.inputs[1])) return {};
  const Var& x = n.inputs[0];
  return {op == ScalarOp::sub ? zeros_like(x, n.loc) : ones_like(x, n.loc)};
}

// x + 0, 0 + x, x - 0, x * 1, 1 * x, x / 1 -> x (when the constant cannot broadcast x larger)
std::vector<Var> neutral_element(FunctionGraph&, Node& n) {
  const ScalarOp op = elemwise(n).scalar_op();
  const Var y = out0(n);
  std::vector<Var> kept;
  const double neutral = (op == ScalarOp::add || op == ScalarOp::sub) ? 0.0 : 1.0;
  if (op != ScalarOp::add && op != ScalarOp::mul && op != ScalarOp::sub && op != ScalarOp::div) return {};
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    const bool removable = is_scalar_constant(n.inputs[i], neutral) && (i > 0 || is_variadic(op));
    if (!removable) kept.push_back(n.inputs[i]);
  }
  if (kept.size() == n.inputs.size() || kept.empty()) return {};
  if (kept.size() == 1) return same_type(kept[0], y) ? std::vector<Var>{kept[0]} : std::vector<Var>{};
  return {apply1(std::make_shared<Elemwise>(op, DType::f32, static_cast<int>(kept.size())), kept, n.loc)};
}

// (x * y) / x -> y, broadcast as the quotient was
std::vector<Var> cancel_factor(FunctionGraph&, Node& n) {
  if (elemwise(n).scalar_op() != ScalarOp::div) return {};
  auto product = match(n.inputs[0], ScalarOp::mul);
  if (!product) return {};
  const Var& x = n.inputs[1];
  std::vector<Var> rest;
  bool removed = false;
  for (const Var& f : *product) {
    if (!removed && f.same(x)) removed = true;
    else rest.push_back(f);
  }
  if (!removed) return {};
  Var y = rest.size() == 1 ? rest[0] : apply1(std::make_shared<Elemwise>(ScalarOp::mul, DType::f32, static_cast<int>(rest.size())), rest, n.loc);
  Var filled = apply1(std::make_shared<Elemwise>(ScalarOp::fill), {x, y}, n.loc);
  return same_type(filled, out0(n)) ? std::vector<Var>{filled} : std::vector<Var>{};
}

// -(-x) -> x
std::vector<Var> double_negation(FunctionGraph&, Node& n) {
  if (elemwise(n).scalar_op() != ScalarOp::neg) return {};
  auto inner = match(n.inputs[0], ScalarOp::neg);
  return inner ? std::vector<Var>{(*inner)[0]} : std::vector<Var>{};
}

// (a + b) + c -> add(a, b, c), likewise mul, when the inner result has no other reader. Only the
// first operand is opened: a variadic op computes from left to right, so the rounding is the same;
// a + (b + c) is another sum in floating point (1 + (1e16 - 1e16) is 1, (1 + 1e16) - 1e16 is 0).
std::vector<Var> flatten_chain(FunctionGraph& graph, Node& n) {
  const ScalarOp op = elemwise(n).scalar_op();
  if (!is_variadic(op)) return {};
  const Var& first = n.inputs[0];
  auto inner = match(first, op);
  if (!inner || pattern::live_clients(graph, first) != 1 || first.type() != out0(n).type()) return {};
  std::vector<Var> flat = *inner;
  flat.insert(flat.end(), n.inputs.begin() + 1, n.inputs.end());
  return {apply1(std::make_shared<Elemwise>(op, DType::f32, static_cast<int>(flat.size())), flat, n.loc)};
}

// cast(cast(x, a), b) -> cast(x, b) when the first cast loses nothing; cast(x, x.dtype) -> x
std::vector<Var> cast_of_cast(FunctionGraph&, Node& n) {
  if (elemwise(n).scalar_op() != ScalarOp::cast) return {};
  const Var& x = n.inputs[0];
  if (x.dtype() == out0(n).dtype()) return {x};
  auto inner = match(x, ScalarOp::cast);
  if (!inner || !converts_losslessly((*inner)[0].dtype(), x.dtype())) return {};
  return {cast((*inner)[0], out0(n).dtype(), n.loc)};
}

// fill(x, x) -> x; fill(c, y) -> y for a constant c of size-1 dimensions
std::vector<Var> useless_fill(FunctionGraph&, Node& n) {
  if (elemwise(n).scalar_op() != ScalarOp::fill) return {};
  const Var &like = n.inputs[0], &value = n.inputs[1];
  const bool like_cannot_grow =
      like.same(value) || like.ndim() == 0 || (like.get()->constant && shape_numel(like.get()->constant->shape()) == 1);
  if (!like_cannot_grow || !same_type(value, out0(n))) return {};
  return {value};
}

// dimshuffle with the identity pattern -> x; dimshuffle of dimshuffle -> one dimshuffle
std::vector<Var> useless_dimshuffle(FunctionGraph&, Node& n) {
  const auto& ds = static_cast<const DimShuffle&>(*n.op);
  const Var& x = n.inputs[0];
  bool identity = static_cast<int64_t>(ds.pattern().size()) == x.ndim();
  for (size_t i = 0; identity && i < ds.pattern().size(); ++i) identity = ds.pattern()[i] == static_cast<int64_t>(i);
  if (identity) return {x};
  if (const auto* inner = op_of<DimShuffle>(x)) {
    std::vector<int64_t> composed;
    for (int64_t p : ds.pattern()) composed.push_back(p < 0 ? -1 : inner->pattern()[p]);
    const Var& source = x.get()->owner->inputs[0];
    Var combined = dimshuffle(source, composed, n.loc);
    return same_type(combined, out0(n)) ? std::vector<Var>{combined} : std::vector<Var>{};
  }
  return {};
}

// reshape(x, shape(x)) -> x; reshape(reshape(x, a), b) -> reshape(x, b)
std::vector<Var> useless_reshape(FunctionGraph&, Node& n) {
  const Var& x = n.inputs[0];
  if (n.inputs.size() == 2 && op_of<ShapeOf>(n.inputs[1]) && n.inputs[1].get()->owner->inputs[0].same(x) &&
      same_type(x, out0(n)))
    return {x};
  if (op_of<Reshape>(x) && !static_cast<const Reshape&>(*n.op).flattens()) {
    std::vector<Var> inputs = n.inputs;
    inputs[0] = x.get()->owner->inputs[0];
    return {apply1(n.op, inputs, n.loc)};
  }
  return {};
}

// shape(f(x)) -> f's shape inference applied to shape(x), down to the leaves, so only shape
// arithmetic remains and f itself need not run. One sweep with a memo resolves every shape_of of
// the graph: deep chains settle at once and share their common parts.
int64_t shape_without_value(FunctionGraph& graph) {
  std::unordered_map<const Variable*, Var> memo;
  auto symbolic_shape = [&](const Var& root, const Loc& loc) {
    std::vector<std::pair<Var, bool>> stack{{root, false}};
    while (!stack.empty()) {
      auto [v, expanded] = stack.back();
      stack.pop_back();
      if (memo.count(v.get())) continue;
      const Node* producer = v.get()->owner;
      // An op with an inner graph (a scan) tells its shapes fully only once that graph is
      // compiled: the shape arithmetic of a body is worked out by the body's plan. Its outputs
      // keep shape_of, which planning answers from the compiled node.
      if (!producer || producer->op->inner_graph()) {
        memo.emplace(v.get(), shape_of(v, loc));
        continue;
      }
      // An ifelse's shape is the taken branch's: chosen by an ifelse too, so that the shape work
      // of the branch not taken is as lazy as its values (a product whose shapes do not align
      // there fails only if it runs).
      if (const auto* branches = dynamic_cast<const IfElse*>(producer->op.get())) {
        const Var &then_value = producer->inputs[1 + v.get()->index],
                  &else_value = producer->inputs[1 + static_cast<size_t>(branches->n()) + v.get()->index];
        if (!expanded) {
          stack.push_back({v, true});
          stack.push_back({then_value, false});
          stack.push_back({else_value, false});
          continue;
        }
        memo.emplace(v.get(), ifelse(producer->inputs[0], memo.at(then_value.get()), memo.at(else_value.get()), loc));
        continue;
      }
      const std::vector<bool> read_values = value_inputs(*producer);
      if (!expanded) {
        stack.push_back({v, true});
        for (size_t i = 0; i < producer->inputs.size(); ++i)
          if (!read_values[i]) stack.push_back({producer->inputs[i], false});
        continue;
      }
      std::vector<Var> operands;
      for (size_t i = 0; i < producer->inputs.size(); ++i)
        operands.push_back(read_values[i] ? producer->inputs[i] : memo.at(producer->inputs[i].get()));
      auto op = std::make_shared<InferredShape>(producer->op, v.get()->index, v.ndim(), read_values);
      memo.emplace(v.get(), apply1(op, operands, loc));
    }
    return memo.at(root.get());
  };
  int64_t rewritten = 0;
  for (Node* n : graph.toposort()) {
    if (!dynamic_cast<const ShapeOf*>(n->op.get()) || !n->inputs[0].get()->owner) continue;
    graph.replace(n->output(0), symbolic_shape(n->inputs[0], n->loc), "shape_without_value");
    ++rewritten;
  }
  return rewritten;
}

}  // namespace

RewriteGroup canonicalize_group() {
  return {"canonicalize",
          {{"shape_without_value", shape_without_value}},
          {{"self_inverse", {op_class<Elemwise>()}, self_inverse},
           {"neutral_element", {op_class<Elemwise>()}, neutral_element},
           {"cancel_factor", {op_class<Elemwise>()}, cancel_factor},
           {"double_negation", {op_class<Elemwise>()}, double_negation},
           {"flatten_chain", {op_class<Elemwise>()}, flatten_chain},
           {"cast_of_cast", {op_class<Elemwise>()}, cast_of_cast},
           {"useless_fill", {op_class<Elemwise>()}, useless_fill},
           {"useless_dimshuffle", {op_class<DimShuffle>()}, useless_dimshuffle},
           {"useless_reshape", {op_class<Reshape>()}, useless_reshape}}};
}

}  // namespace kiln

// A graph rebuilt for a batch of values of some of its inputs (grad/vectorize.hpp): per op family,
// a rule that rewrites one node whose inputs gained a leading batch axis; every other op loops.
#include "grad/vectorize.hpp"

#include <algorithm>
#include <functional>
#include <optional>
#include <typeindex>
#include <unordered_map>

#include "graph/function_graph.hpp"
#include "graph/op.hpp"
#include "kiln/ops.hpp"
#include "kiln/scan.hpp"
#include "ops/blas.hpp"
#include "ops/elemwise.hpp"
#include "ops/nnet.hpp"
#include "ops/reduce.hpp"
#include "ops/scan.hpp"
#include "ops/shape.hpp"
#include "ops/subtensor.hpp"

namespace kiln {
namespace {

// A value of the rebuilt graph: batched when it has the leading batch axis.
struct Value {
  Var var;
  bool batched = false;
};

// A rule gives the node's outputs from its rebuilt inputs (at least one batched), or nothing where
// it does not apply to these inputs (then the node loops).
using Rule = std::function<std::optional<std::vector<Value>>(const Node&, const std::vector<Value>&)>;

std::vector<Value> all_batched(const std::vector<Var>& vars) {
  std::vector<Value> out;
  for (const Var& v : vars) out.push_back({v, true});
  return out;
}

// An unbatched value gets a leading axis of length one, which broadcasting stretches to the batch.
Var with_batch_axis(const Value& v, const Loc& loc) { return v.batched ? v.var : pad_left(v.var, v.var.ndim() + 1, loc); }

std::vector<int64_t> shifted(const std::vector<int64_t>& axes) {
  std::vector<int64_t> out;
  for (int64_t a : axes) out.push_back(a + 1);
  return out;
}

// The batch's length followed by `shape` (a 1-D i64 value): the target of a batched reshape.
Var batch_then(const Var& batched, const Var& shape, const Loc& loc) {
  return concatenate({slice(shape_of(batched, loc), 0, 0, 1, 1, loc), shape}, 0, loc);
}

std::optional<std::vector<Value>> elemwise_rule(const Node& node, const std::vector<Value>& in) {
  std::vector<Var> inputs;
  for (const Value& v : in) inputs.push_back(with_batch_axis(v, node.loc));
  return all_batched(apply(node.op, inputs, node.loc));
}

std::optional<std::vector<Value>> reduce_rule(const Node& node, const std::vector<Value>& in) {
  const auto& op = static_cast<const Reduce&>(*node.op);
  const bool arg = op.kind() == ReduceKind::argmax || op.kind() == ReduceKind::argmin;
  if (arg && op.axes().size() != 1) return std::nullopt;  // its kernel takes one axis or all of them
  return all_batched({apply1(std::make_shared<Reduce>(op.kind(), shifted(op.axes()), op.keepdims()), {in[0].var}, node.loc)});
}

std::optional<std::vector<Value>> logsumexp_rule(const Node& node, const std::vector<Value>& in) {
  const auto& op = static_cast<const LogSumExp&>(*node.op);
  return all_batched({apply1(std::make_shared<LogSumExp>(shifted(op.axes()), op.keepdims()), {in[0].var}, node.loc)});
}

std::optional<std::vector<Value>> dimshuffle_rule(const Node& node, const std::vector<Value>& in) {
  std::vector<int64_t> pattern{0};
  for (int64_t p : static_cast<const DimShuffle&>(*node.op).pattern()) pattern.push_back(p < 0 ? p : p + 1);
  return all_batched({dimshuffle(in[0].var, pattern, node.loc)});
}

std::optional<std::vector<Value>> reshape_rule(const Node& node, const std::vector<Value>& in) {
  const auto& op = static_cast<const Reshape&>(*node.op);
  const Loc& loc = node.loc;
  if (!in[0].batched) return std::nullopt;  // only the target is batched: a shape per element
  const Var& x = in[0].var;
  if (op.flattens()) return all_batched({flatten(x, op.flatten_to() + 1, loc)});
  const int64_t ndim = node.outputs[0]->type.ndim() + 1;
  if (in.size() == 2) {
    if (in[1].batched) return std::nullopt;
    return all_batched({reshape(x, batch_then(x, in[1].var, loc), ndim, loc)});
  }
  Shape target = op.target();
  if (std::find(target.begin(), target.end(), -1) == target.end()) {  // the one -1 stands for the batch
    target.insert(target.begin(), -1);
    return all_batched({reshape(x, target, loc)});
  }
  const Var known = constant(Tensor::from(op.target(), {static_cast<int64_t>(op.target().size())}));
  return all_batched({reshape(x, batch_then(x, known, loc), ndim, loc)});
}

// The shape of one element: the same for every element, so not batched.
std::optional<std::vector<Value>> shape_rule(const Node& node, const std::vector<Value>& in) {
  return std::vector<Value>{{slice(shape_of(in[0].var, node.loc), 0, 1, std::nullopt, 1, node.loc), false}};
}

std::optional<std::vector<Value>> sum_to_shape_rule(const Node& node, const std::vector<Value>& in) {
  if (!in[0].batched || in[1].batched) return std::nullopt;
  std::vector<bool> broadcastable = node.outputs[0]->type.broadcastable;
  broadcastable.insert(broadcastable.begin(), false);
  const Var& g = in[0].var;
  return all_batched({apply1(std::make_shared<SumToShape>(broadcastable), {g, batch_then(g, in[1].var, node.loc)}, node.loc)});
}

// dot of up to 2-D operands. Where only the left side is batched, or only a right-hand vector, the
// batch joins the rows of one matrix product (B*m rows on the left, or the B vectors as rows
// against the transposed matrix); otherwise a batched matmul (measured faster than one product
// after a transposing copy, above all for the outer products of gradients), a vector taken as a
// one-row (left) or one-column (right) matrix and that axis dropped afterwards.
std::optional<std::vector<Value>> dot_rule(const Node& node, const std::vector<Value>& in) {
  const Loc& loc = node.loc;
  const Value &a = in[0], &b = in[1];
  const int64_t a_nd = node.inputs[0].ndim(), b_nd = node.inputs[1].ndim();
  if (!b.batched && a_nd == 1) return all_batched({dot(a.var, b.var, loc)});
  if (!b.batched) {
    const Var shape = shape_of(a.var, loc);
    const Var rows = reshape(a.var, concatenate({constant(Tensor::from(std::vector<int64_t>{-1}, {1})), slice(shape, 0, 2, 3, 1, loc)}, 0, loc), 2, loc);
    const Var product = dot(rows, b.var, loc);
    const Var out_shape = concatenate({slice(shape, 0, 0, 2, 1, loc), slice(shape_of(product, loc), 0, 1, std::nullopt, 1, loc)}, 0, loc);
    return all_batched({reshape(product, out_shape, 1 + product.ndim(), loc)});
  }
  if (!a.batched && b_nd == 1) return all_batched({dot(b.var, a_nd == 2 ? transpose(a.var, loc) : a.var, loc)});
  const Var a3 = a_nd == 1 ? dimshuffle(a.var, a.batched ? std::vector<int64_t>{0, -1, 1} : std::vector<int64_t>{-1, 0}, loc) : a.var;
  const Var b3 = b_nd == 1 ? dimshuffle(b.var, {0, 1, -1}, loc) : b.var;
  std::vector<int64_t> keep{0};
  if (a_nd == 2) keep.push_back(1);
  if (b_nd == 2) keep.push_back(2);
  return all_batched({dimshuffle(matmul(a3, b3, loc), keep, loc)});
}

std::optional<std::vector<Value>> batched_matmul_rule(const Node& node, const std::vector<Value>& in) {
  return all_batched({apply1(node.op, {with_batch_axis(in[0], node.loc), with_batch_axis(in[1], node.loc)}, node.loc)});
}

std::optional<std::vector<Value>> softmax_rule(const Node& node, const std::vector<Value>& in) {
  const auto& op = static_cast<const Softmax&>(*node.op);
  return all_batched({apply1(std::make_shared<Softmax>(op.axis() + 1, op.is_log()), {in[0].var}, node.loc)});
}

// The op itself on the axis after the batch; an unbatched operand is copied for every element
// first (its kernel takes operands of one shape).
std::optional<std::vector<Value>> softmax_grad_rule(const Node& node, const std::vector<Value>& in) {
  const Loc& loc = node.loc;
  const Var& batched = in[0].batched ? in[0].var : in[1].var;
  std::vector<Var> inputs;
  for (const Value& v : in) inputs.push_back(v.batched ? v.var : fill_like(batched, pad_left(v.var, batched.ndim(), loc), loc));
  const int64_t axis = static_cast<const SoftmaxGrad&>(*node.op).axis() + 1;
  return all_batched({apply1(std::make_shared<SoftmaxGrad>(axis), inputs, loc)});
}

// The same entries after a full slice over the batch.
std::vector<IndexEntry> batch_then_entries(const std::vector<IndexEntry>& entries) {
  std::vector<IndexEntry> out{IndexEntry{}};
  out.insert(out.end(), entries.begin(), entries.end());
  return out;
}

std::optional<std::vector<Value>> subtensor_rule(const Node& node, const std::vector<Value>& in) {
  const auto& op = static_cast<const Subtensor&>(*node.op);
  return all_batched({apply1(std::make_shared<Subtensor>(batch_then_entries(op.entries())), {in[0].var}, node.loc)});
}

// A batched value gets axes after its batch axis up to the region's rank, where broadcasting would
// otherwise align its batch with an axis of the region; an unbatched x is copied for every element
// (broadcast against zeros of the batch's length).
std::optional<std::vector<Value>> inc_subtensor_rule(const Node& node, const std::vector<Value>& in) {
  const auto& op = static_cast<const IncSubtensor&>(*node.op);
  const Loc& loc = node.loc;
  const int64_t x_nd = node.inputs[0].ndim(), y_nd = node.inputs[1].ndim();
  int64_t region_nd = x_nd;
  for (const IndexEntry& e : op.entries()) region_nd -= e.is_integer ? 1 : 0;
  Var y = in[1].var;
  if (in[1].batched) {
    std::vector<int64_t> pattern{0};
    pattern.resize(region_nd - y_nd + 1, -1);
    for (int64_t d = 1; d <= y_nd; ++d) pattern.push_back(d);
    y = dimshuffle(y, pattern, loc);
  }
  Var x = in[0].var;
  if (!in[0].batched) {
    std::vector<int64_t> all_but_batch;
    for (int64_t d = 1; d < y.ndim(); ++d) all_but_batch.push_back(d);
    Var zeros = zeros_like(y, loc);
    if (!all_but_batch.empty()) zeros = sum(zeros, all_but_batch, false, loc);
    std::vector<int64_t> column{0};
    column.resize(x_nd + 1, -1);
    x = with_batch_axis(in[0], loc) + dimshuffle(zeros, column, loc);
  }
  return all_batched({apply1(std::make_shared<IncSubtensor>(batch_then_entries(op.entries()), op.set()), {x, y}, loc)});
}

// Rows of each element: the rows are axis 1 of the batch, brought in front for the op and back.
std::optional<std::vector<Value>> row_range_rule(const Node& node, const std::vector<Value>& in) {
  if (in[1].batched || in[2].batched) return std::nullopt;
  std::vector<int64_t> swap{1, 0};
  for (int64_t d = 2; d < in[0].var.ndim(); ++d) swap.push_back(d);
  const Var rows = apply1(node.op, {dimshuffle(in[0].var, swap, node.loc), in[1].var, in[2].var}, node.loc);
  return all_batched({dimshuffle(rows, swap, node.loc)});
}

const std::unordered_map<std::type_index, Rule>& rules() {
  static const std::unordered_map<std::type_index, Rule> table{
      {typeid(Elemwise), elemwise_rule},
      {typeid(Reduce), reduce_rule},
      {typeid(LogSumExp), logsumexp_rule},
      {typeid(DimShuffle), dimshuffle_rule},
      {typeid(Reshape), reshape_rule},
      {typeid(ShapeOf), shape_rule},
      {typeid(SumToShape), sum_to_shape_rule},
      {typeid(Dot), dot_rule},
      {typeid(BatchedMatmul), batched_matmul_rule},
      {typeid(Softmax), softmax_rule},
      {typeid(SoftmaxGrad), softmax_grad_rule},
      {typeid(RowRange), row_range_rule},
      {typeid(Subtensor), subtensor_rule},
      {typeid(IncSubtensor), inc_subtensor_rule},
  };
  return table;
}

// Any op: a scan over the batch applies the node to one element of each batched input per step.
// The body reads the other inputs as captured values, so that shape arithmetic the op reads for
// its shapes (a loop's length) is computed in the body and its shapes are known before it runs.
std::vector<Value> loop_rule(const Node& node, const std::vector<Value>& in) {
  ScanArgs args;
  for (const Value& v : in)
    if (v.batched) args.sequences.emplace_back(v.var);
  args.outputs_info.assign(node.outputs.size(), std::nullopt);
  auto step = [&](const std::vector<Var>& elements) {
    std::vector<Var> inputs;
    size_t next = 0;
    for (const Value& v : in) inputs.push_back(v.batched ? elements[next++] : v.var);
    return apply(node.op, inputs, node.loc);
  };
  return all_batched(scan(step, std::move(args), node.loc).outputs);
}

// A rule may lose the knowledge that an axis has size 1 (a reshape to a symbolic shape): the
// original's broadcastable axes are restored, by views (the axis indexed away and inserted again),
// so that readers that drop them still can.
Var keep_broadcastable(Var v, const Type& original, const Loc& loc) {
  const int64_t nd = v.ndim();
  for (int64_t d = 0; d < original.ndim(); ++d) {
    if (!original.broadcastable[d] || v.type().broadcastable[d + 1]) continue;
    std::vector<int64_t> to_front{d + 1}, back;
    for (int64_t e = 0, kept = 0; e < nd; ++e) {
      if (e != d + 1) to_front.push_back(e);
      back.push_back(e == d + 1 ? -1 : kept++);
    }
    v = dimshuffle(dimshuffle(v, to_front, loc)[VarIndex(0, loc)], back, loc);
  }
  return v;
}

std::vector<Value> vectorize_node(const Node& node, const std::vector<Value>& in) {
  bool any_batched = false;
  for (const Value& v : in) any_batched |= v.batched;
  if (!any_batched) {  // only rebuilt on replaced values that are not batched (an element's shape)
    std::vector<Var> inputs;
    for (const Value& v : in) inputs.push_back(v.var);
    std::vector<Value> out;
    for (const Var& v : apply(node.op, inputs, node.loc)) out.push_back({v, false});
    return out;
  }
  const auto& table = rules();
  std::optional<std::vector<Value>> out;
  if (auto rule = table.find(typeid(*node.op)); rule != table.end()) out = rule->second(node, in);
  if (!out) out = loop_rule(node, in);
  for (size_t i = 0; i < out->size(); ++i)
    if ((*out)[i].batched) (*out)[i].var = keep_broadcastable((*out)[i].var, node.outputs[i]->type, node.loc);
  return *out;
}

}  // namespace

std::vector<Var> vectorize_graph(const std::vector<Var>& outputs, const std::vector<std::pair<Var, Var>>& replacements) {
  std::unordered_map<const Variable*, Value> rebuilt;
  for (const auto& [from, to] : replacements) {
    if (!from.defined() || !to.defined()) throw TypeError("vectorize_graph: a replacement names an empty Var");
    if (to.dtype() != from.dtype() || to.ndim() != from.ndim() + 1)
      throw TypeError("vectorize_graph: the batch of '" + from.get()->label() + "' " + from.type().str() + " must have dtype " +
                      dtype_name(from.dtype()) + " and " + std::to_string(from.ndim() + 1) + " dimensions (a leading batch axis), got " +
                      to.type().str());
    rebuilt[from.get()] = {keep_broadcastable(to, from.type(), Loc::current()), true};
  }
  for (Node* node : topological_order(outputs)) {
    std::vector<Value> in;
    bool any_rebuilt = false;
    for (const Var& v : node->inputs) {
      auto it = rebuilt.find(v.get());
      any_rebuilt |= it != rebuilt.end();
      in.push_back(it != rebuilt.end() ? it->second : Value{v, false});
    }
    if (!any_rebuilt) continue;
    const DerivedFrom derived(*node, Derivation::rewrite);
    const std::vector<Value> out = vectorize_node(*node, in);
    for (size_t i = 0; i < out.size(); ++i) rebuilt[node->outputs[i].get()] = out[i];
  }
  std::vector<Var> result;
  for (const Var& v : outputs) {
    auto it = rebuilt.find(v.get());
    result.push_back(it != rebuilt.end() ? it->second.var : v);
  }
  return result;
}

}  // namespace kiln

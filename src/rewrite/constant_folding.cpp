// constant folding: a node whose inputs are all constants is computed once, at compile time.
#include "exec/run_node.hpp"
#include "graph/op.hpp"
#include "rewrite/catalogue.hpp"

namespace kiln {

namespace {

// Folding these would only move work or memory from the run to the compile (a broadcast fill of
// a large shape, say) without saving any: they are left to run.
bool worth_folding(const Node& n, const std::vector<Shape>& out_shapes) {
  int64_t in_elements = 0, out_elements = 0;
  for (const Var& in : n.inputs) in_elements += in.get()->constant->numel();
  for (const Shape& s : out_shapes) out_elements += shape_numel(s);
  return out_elements <= std::max<int64_t>(in_elements, 1 << 16);
}

std::vector<Var> fold(FunctionGraph&, Node& n) {
  if (n.inputs.empty()) return {};
  for (const Var& in : n.inputs)
    if (!in.get()->constant) return {};
  std::vector<Tensor> inputs;
  std::vector<Shape> shapes;
  std::vector<const Tensor*> values;
  for (const Var& in : n.inputs) inputs.push_back(*in.get()->constant);
  for (const Tensor& t : inputs) {
    shapes.push_back(t.shape());
    values.push_back(&t);
  }
  // A node that fails on its constants is left to the run: it may sit in a branch that never runs,
  // and where it does run, its error then names the call that ran it.
  std::vector<Tensor> outputs;
  try {
    if (!worth_folding(n, n.op->infer_shapes(shapes, values))) return {};
    outputs = evaluate_node(n, *cpu_backend().executable(n), inputs, cpu_backend());
  } catch (const Error&) {
    return {};
  }
  std::vector<Var> folded;
  for (size_t o = 0; o < outputs.size(); ++o) {
    Var c = constant(outputs[o]);
    // Keep the node's declared type where the value alone would say more (a size-1 axis).
    c.get()->type.broadcastable = n.outputs[o]->type.broadcastable;
    for (size_t d = 0; d < outputs[o].shape().size(); ++d)
      if (outputs[o].shape()[d] == 1) c.get()->type.broadcastable[d] = true;
    folded.push_back(c);
  }
  return folded;
}

}  // namespace

RewriteGroup constant_folding_group() { return {"constant_folding", {}, {{"constant_folding", {}, fold}}}; }

}  // namespace kiln

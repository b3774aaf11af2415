// Forward mode: Jacobian-vector products carried from the wrt to the outputs, one node at a time.
#include <algorithm>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "grad/backprop.hpp"
#include "graph/function_graph.hpp"
#include "graph/inner_gradient.hpp"
#include "graph/op.hpp"
#include "kiln/grad.hpp"
#include "kiln/ops.hpp"
#include "ops/shape.hpp"
#include "ops/stable_forms.hpp"

namespace kiln {

namespace {

// The tangents of n's outputs from its inputs' (undefined: zero). An op without an R_op of its
// own gets the transpose of its L_op: with stand-ins u for its outputs' gradients, the scalar
// sum_i <L_op(u)_i, dx_i> = <u, J dx> is linear in u, and its gradient in u is J dx. That
// gradient does not depend on u's value, so u becomes the node's own output (same type, same
// shape) and no stand-in is left in the graph.
std::vector<Var> node_tangents(const Node& n, const std::vector<Var>& tangents) {
  if (std::optional<std::vector<Var>> own = n.op->R_op(n, tangents)) return *own;
  std::vector<Var> stand_ins, wrt;
  for (const auto& out : n.outputs) {
    stand_ins.push_back(is_float(out->type.dtype) ? tensor(out->type.dtype, out->type.broadcastable, "u") : Var());
    if (stand_ins.back().defined()) wrt.push_back(stand_ins.back());
  }
  if (wrt.empty()) return std::vector<Var>(n.outputs.size());  // integer outputs carry no tangent (argmax)
  std::vector<Var> gins;
  try {
    gins = n.op->L_op(n, stand_ins);
  } catch (const GradError& e) {
    throw GradError("Rop: " + n.op->name() + " (" + n.origin() + ") has no Jacobian-vector product: " + e.what());
  }
  // Each L_op result seeded with its input's tangent: the gradient of the sum of <L_op(u)_i,
  // dx_i> without the sum, whose gradient would broadcast through L_op(u)_i's value and so
  // compute it for its shape alone.
  std::vector<std::pair<Var, Var>> seeds;
  for (size_t i = 0; i < n.inputs.size() && i < gins.size(); ++i)
    if (tangents[i].defined() && gins[i].defined()) seeds.push_back({gins[i], cast(tangents[i], gins[i].dtype())});
  std::vector<Var> out(n.outputs.size());
  if (seeds.empty()) return out;
  const std::vector<Var> jv = backprop(seeds, wrt);
  std::unordered_map<const Variable*, Var> own_outputs;
  std::vector<Var> defined;
  for (size_t o = 0; o < n.outputs.size(); ++o)
    if (stand_ins[o].defined()) own_outputs[stand_ins[o].get()] = n.output(o);
  for (const Var& v : jv)
    if (v.defined()) defined.push_back(v);
  const std::vector<Var> rebuilt = rebuild(defined, own_outputs);
  size_t next = 0, k = 0;
  for (size_t o = 0; o < n.outputs.size(); ++o) {
    if (!stand_ins[o].defined()) continue;
    if (jv[k++].defined()) out[o] = cast(rebuilt[next++], n.outputs[o]->type.dtype);
  }
  return out;
}

// Carries the tangents of `tangent` forward through the graph of `roots`, node by node. A chain
// with a stable form (log(1 + exp(x)), ...) is carried through that form, from the values it
// reads: the chain's own tangent overflows where its value did (exp(x) at x = 1000). Not when a
// seeded value lies inside the chain: its tangent is given.
void carry(std::unordered_map<const Variable*, Var>& tangent, const std::vector<Var>& roots, const std::unordered_set<const Variable*>& seeded) {
  for (Node* n : topological_order(roots)) {
    std::vector<Var> in(n->inputs.size());
    bool any = false;
    for (size_t i = 0; i < n->inputs.size(); ++i)
      if (auto it = tangent.find(n->inputs[i].get()); it != tangent.end() && is_float(n->inputs[i].dtype())) {
        in[i] = it->second;
        any = true;
      }
    if (!any) continue;
    const DerivedFrom derived(*n, Derivation::gradient);
    if (auto stable = stable_form(*n); stable && std::none_of(stable->skipped.begin(), stable->skipped.end(), [&](const Variable* v) { return seeded.count(v); })) {
      std::unordered_map<const Variable*, Var> through;
      for (const Var& r : stable->reads)
        if (auto it = tangent.find(r.get()); it != tangent.end()) through[r.get()] = it->second;
      carry(through, {stable->value}, seeded);
      if (auto it = through.find(stable->value.get()); it != through.end()) tangent[n->outputs[0].get()] = cast(it->second, n->outputs[0]->type.dtype);
      continue;
    }
    const std::vector<Var> out = node_tangents(*n, in);
    for (size_t o = 0; o < n->outputs.size() && o < out.size(); ++o) {
      if (!out[o].defined() || !is_float(n->outputs[o]->type.dtype)) continue;
      if (out[o].ndim() != n->outputs[o]->type.ndim())
        throw GradError(n->op->name() + ": R_op returned a tangent " + out[o].type().str() + " for output " +
                        n->outputs[o]->type.str() + " (node " + n->origin() + ")");
      tangent[n->outputs[o].get()] = out[o];
    }
  }
}

// For the ops that carry tangents through an inner graph (graph/inner_gradient.hpp).
std::vector<Var> inner_graph_jvp(const std::vector<Var>& f, const std::vector<Var>& wrt, const std::vector<Var>& eval_points) {
  return Rop(f, wrt, eval_points, {.disconnected_inputs = DisconnectedInputs::zero}, Loc::current());
}

}  // namespace

std::vector<Var> Rop(const std::vector<Var>& f, const std::vector<Var>& wrt, const std::vector<Var>& eval_points, GradOptions options, Loc loc) {
  provide_vjp_of_inner_graphs();
  provide_inner_jvp(inner_graph_jvp);
  if (wrt.size() != eval_points.size())
    throw GradError("Rop: " + std::to_string(wrt.size()) + " wrt but " + std::to_string(eval_points.size()) +
                    " eval points; give one per wrt (the direction each moves in)");
  std::unordered_map<const Variable*, Var> tangent;
  std::unordered_set<const Variable*> seeded;
  for (size_t i = 0; i < wrt.size(); ++i) {
    if (!wrt[i].defined() || !eval_points[i].defined()) throw GradError("Rop: wrt[" + std::to_string(i) + "] or its eval point is an empty Var");
    if (!is_float(wrt[i].dtype()))
      throw GradError("Rop: wrt[" + std::to_string(i) + "] '" + wrt[i].get()->label() + "' is " + wrt[i].type().str() +
                      "; integer and boolean values have no derivative");
    if (eval_points[i].ndim() != wrt[i].ndim() || !is_float(eval_points[i].dtype()))
      throw GradError("Rop: eval point " + std::to_string(i) + " " + eval_points[i].type().str() + " does not match wrt[" +
                      std::to_string(i) + "] '" + wrt[i].get()->label() + "' " + wrt[i].type().str() +
                      "; it must be a float value of the same rank (and shape when it runs)");
    // Broadcasting would take an eval point of another shape silently: it must have wrt's own.
    tangent[wrt[i].get()] = shaped_like(cast(eval_points[i], wrt[i].dtype()), wrt[i],
                                        "Rop: eval point " + std::to_string(i) + " (for wrt[" + std::to_string(i) + "] '" + wrt[i].get()->label() + "')",
                                        loc);
    seeded.insert(wrt[i].get());
  }
  for (size_t i = 0; i < f.size(); ++i)
    if (!f[i].defined()) throw GradError("Rop: f[" + std::to_string(i) + "] is an empty Var");
  carry(tangent, f, seeded);
  std::vector<Var> result;
  for (size_t i = 0; i < f.size(); ++i) {
    if (auto it = tangent.find(f[i].get()); it != tangent.end()) {
      result.push_back(it->second);
    } else if (options.disconnected_inputs == DisconnectedInputs::zero || !is_float(f[i].dtype())) {
      result.push_back(zeros_like(f[i]));
    } else {
      throw GradError("Rop: f[" + std::to_string(i) + "] '" + f[i].get()->label() + "' " + f[i].type().str() +
                      " does not depend on any wrt (it is disconnected); pass GradOptions{.disconnected_inputs = "
                      "DisconnectedInputs::zero} to get a zero product instead");
    }
  }
  return result;
}

}  // namespace kiln

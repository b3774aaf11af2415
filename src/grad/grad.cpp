#include <algorithm>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "grad/backprop.hpp"
#include "graph/function_graph.hpp"
#include "graph/inner_gradient.hpp"
#include "graph/op.hpp"
#include "kiln/grad.hpp"
#include "kiln/ops.hpp"
#include "ops/ifelse.hpp"
#include "ops/stable_forms.hpp"

namespace kiln {

namespace {

using NodeSet = std::unordered_set<Node*>;

// Where each node of a backprop's order stands in it, and how many times the nodes in it read each
// value (a root once more: the caller reads it, so it is never only a branch's).
struct OrderFacts {
  std::unordered_map<const Node*, size_t> place;
  std::unordered_map<const Variable*, int> readers;
  OrderFacts(const std::vector<Node*>& order, const std::vector<Var>& roots) {
    for (size_t k = 0; k < order.size(); ++k) {
      place.emplace(order[k], k);
      for (const Var& in : order[k]->inputs) ++readers[in.get()];
    }
    for (const Var& r : roots) ++readers[r.get()];
  }
};

// The nodes of the order whose every path to the roots enters `branch` (n's inputs at these
// positions): the work only that branch of an ifelse reads.
NodeSet branch_only(const Node& n, const std::vector<size_t>& branch, OrderFacts& facts) {
  std::unordered_map<const Node*, int> reached;
  auto needed = [&](const Node* m) {
    int edges = 0;
    for (const auto& out : m->outputs) edges += facts.readers[out.get()];
    return edges;
  };
  NodeSet only;
  std::vector<Node*> ready;
  auto reach = [&](const Var& v) {
    if (Node* m = v.get()->owner; m && facts.place.count(m) && ++reached[m] == needed(m)) ready.push_back(m);
  };
  for (size_t p : branch) reach(n.inputs[p]);
  while (!ready.empty()) {
    Node* m = ready.back();
    ready.pop_back();
    only.insert(m);
    for (const Var& in : m->inputs) reach(in);
  }
  return only;
}

// backprop differentiating only the nodes of `order` (a topological order): the values they read
// from other nodes are where the gradient stops.
std::vector<Var> backprop_in_order(const std::vector<std::pair<Var, Var>>& seeds, const std::vector<Var>& wrt,
                                   const std::vector<Node*>& order);

}  // namespace

std::vector<Var> backprop(const std::vector<std::pair<Var, Var>>& seeds, const std::vector<Var>& wrt) {
  std::vector<Var> roots;
  for (const auto& s : seeds) roots.push_back(s.first);
  return backprop_in_order(seeds, wrt, topological_order(roots));
}

namespace {

std::vector<Var> backprop_in_order(const std::vector<std::pair<Var, Var>>& seeds, const std::vector<Var>& wrt,
                                   const std::vector<Node*>& order) {
  std::vector<Var> roots;
  for (const auto& s : seeds) roots.push_back(s.first);

  // Only nodes between a wrt and a root need their L_op.
  std::unordered_set<const Variable*> depends, asked;
  for (const Var& w : wrt) depends.insert(w.get()), asked.insert(w.get());
  for (Node* n : order) {
    bool any = false;
    for (const Var& in : n->inputs) any |= depends.count(in.get()) > 0;
    if (any)
      for (auto& out : n->outputs) depends.insert(out.get());
  }

  std::unordered_map<const Variable*, Var> grads;
  auto accumulate = [&](const Var& v, const Var& g) {
    auto it = grads.find(v.get());
    if (it == grads.end()) grads.emplace(v.get(), g);
    else it->second = it->second + g;
  };
  for (const auto& [root, seed] : seeds)
    if (depends.count(root.get())) accumulate(root, seed);

  NodeSet differentiated_in_a_branch;
  std::optional<OrderFacts> facts;  // found at the first ifelse
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    Node* n = *it;
    if (differentiated_in_a_branch.count(n)) continue;
    std::vector<Var> gouts;
    bool any_grad = false;
    for (auto& out : n->outputs) {
      auto g = grads.find(out.get());
      gouts.push_back(g == grads.end() ? Var() : g->second);
      any_grad |= g != grads.end();
    }
    bool any_input_depends = false;
    for (const Var& in : n->inputs) any_input_depends |= depends.count(in.get()) > 0;
    if (!any_grad || !any_input_depends) continue;
    const DerivedFrom derived(*n, Derivation::gradient);
    // A chain with a stable form (log(1 + exp(x)), ...) is differentiated in that form, straight to
    // the values it reads: the chain's own gradient overflows where its value did. Not when a wrt
    // lies inside the chain: its gradient is asked for.
    if (auto stable = stable_form(*n); stable && std::none_of(stable->skipped.begin(), stable->skipped.end(),
                                                              [&](const Variable* v) { return asked.count(v); })) {
      const std::vector<Var> through = backprop({{stable->value, gouts[0]}}, stable->reads);
      for (size_t i = 0; i < through.size(); ++i)
        if (through[i].defined() && depends.count(stable->reads[i].get()) && is_float(stable->reads[i].dtype()))
          accumulate(stable->reads[i], through[i]);
      continue;
    }
    if (const auto* branches = dynamic_cast<const IfElse*>(n->op.get())) {
      // The work only one branch reads is differentiated as a branch of an ifelse too: where the
      // branch is not taken its gradient is zero, not a zero cotangent times a derivative that may
      // be infinite there (ifelse(x > 0, sqrt(x), 0) at x = -1 gives 0, not NaN).
      const Var& c = n->inputs[0];
      for (bool then_side : {true, false}) {
        std::vector<size_t> branch;
        for (int i = 0; i < branches->n(); ++i) branch.push_back(static_cast<size_t>(1 + i + (then_side ? 0 : branches->n())));
        if (!facts) facts.emplace(order, roots);
        NodeSet only = branch_only(*n, branch, *facts);
        auto taken = [&](const Var& g, const Var& like) {
          return then_side ? ifelse(c, g, zeros_like(like, n->loc), n->loc) : ifelse(c, zeros_like(like, n->loc), g, n->loc);
        };
        std::vector<std::pair<Var, Var>> inner_seeds;
        for (size_t k = 0; k < branch.size(); ++k) {
          const Var& in = n->inputs[branch[k]];
          if (!gouts[k].defined() || !depends.count(in.get()) || !is_float(in.dtype())) continue;
          if (in.get()->owner && only.count(in.get()->owner)) inner_seeds.push_back({in, gouts[k]});
          else accumulate(in, taken(gouts[k], in));
        }
        if (inner_seeds.empty()) continue;
        std::vector<Var> ends;
        std::unordered_set<const Variable*> listed;
        for (Node* m : only) {
          differentiated_in_a_branch.insert(m);
          for (const Var& in : m->inputs)
            if ((!in.get()->owner || !only.count(in.get()->owner)) && depends.count(in.get()) && is_float(in.dtype()) &&
                listed.insert(in.get()).second)
              ends.push_back(in);
          for (const auto& out : m->outputs)
            if (asked.count(out.get()) && listed.insert(out.get()).second) ends.push_back(m->output(static_cast<size_t>(out->index)));
        }
        std::vector<Node*> branch_order(only.begin(), only.end());
        std::sort(branch_order.begin(), branch_order.end(),
                  [&](const Node* a, const Node* b) { return facts->place.at(a) < facts->place.at(b); });
        const std::vector<Var> through = backprop_in_order(inner_seeds, ends, branch_order);
        for (size_t k = 0; k < ends.size(); ++k)
          if (through[k].defined()) accumulate(ends[k], taken(through[k], ends[k]));
      }
      continue;
    }
    std::vector<Var> gins = n->op->L_op(*n, gouts);
    for (size_t i = 0; i < n->inputs.size(); ++i) {
      const Var& in = n->inputs[i];
      if (i < gins.size() && gins[i].defined() && depends.count(in.get()) && is_float(in.dtype())) {
        if (gins[i].ndim() != in.ndim())
          throw GradError(n->op->name() + ": L_op returned a gradient " + gins[i].type().str() + " for input " +
                          in.type().str() + " (node " + n->origin() + ")");
        accumulate(in, gins[i]);
      }
    }
  }
  std::vector<Var> out;
  for (const Var& w : wrt) {
    auto g = grads.find(w.get());
    out.push_back(g == grads.end() ? Var() : g->second);
  }
  return out;
}

}  // namespace

namespace {

std::vector<Var> finish(std::vector<Var> grads, const std::vector<Var>& wrt, const GradOptions& options, const char* who) {
  for (size_t i = 0; i < wrt.size(); ++i) {
    if (grads[i].defined()) {
      if (grads[i].dtype() != wrt[i].dtype()) grads[i] = cast(grads[i], wrt[i].dtype());
      continue;
    }
    if (options.disconnected_inputs == DisconnectedInputs::zero) {
      grads[i] = zeros_like(wrt[i]);
      continue;
    }
    const std::string name = wrt[i].get()->label();
    if (!is_float(wrt[i].dtype()))
      throw GradError(std::string(who) + ": wrt[" + std::to_string(i) + "] '" + name + "' is " + wrt[i].type().str() +
                      "; integer and boolean values have no gradient");
    throw GradError(std::string(who) + ": the cost does not depend on wrt[" + std::to_string(i) + "] '" + name + "' " +
                    wrt[i].type().str() + " (it is disconnected); pass GradOptions{.disconnected_inputs = "
                    "DisconnectedInputs::zero} to get a zero gradient instead");
  }
  return grads;
}

// For the ops that differentiate an inner graph (graph/inner_gradient.hpp).
std::vector<Var> inner_graph_vjp(const std::vector<Var>& f, const std::vector<Var>& wrt, const std::vector<Var>& eval_points) {
  return Lop(f, wrt, eval_points, {.disconnected_inputs = DisconnectedInputs::zero});
}

}  // namespace

void provide_vjp_of_inner_graphs() { provide_inner_vjp(inner_graph_vjp); }

std::vector<Var> grad(const Var& cost, const std::vector<Var>& wrt, GradOptions options) {
  provide_vjp_of_inner_graphs();
  if (!cost.defined()) throw GradError("grad: the cost is an empty Var");
  if (cost.ndim() != 0)
    throw GradError("grad: the cost must be a scalar (0-d), got " + cost.type().str() + "; sum() or mean() it first");
  if (!is_float(cost.dtype())) throw GradError("grad: the cost must be a float value, got " + cost.type().str());
  for (size_t i = 0; i < wrt.size(); ++i)
    if (!wrt[i].defined()) throw GradError("grad: wrt[" + std::to_string(i) + "] is an empty Var");
  // The seed and the sums kiln adds belong to the cost's gradient too.
  std::optional<DerivedFrom> derived;
  if (const Node* n = cost.get()->owner) derived.emplace(*n, Derivation::gradient);
  return finish(backprop({{cost, ones_like(cost)}}, wrt), wrt, options, "grad");
}

Var grad(const Var& cost, const Var& wrt, GradOptions options) { return grad(cost, std::vector<Var>{wrt}, options)[0]; }

std::vector<Var> Lop(const std::vector<Var>& f, const std::vector<Var>& wrt, const std::vector<Var>& eval_points,
                     GradOptions options) {
  provide_vjp_of_inner_graphs();
  if (f.size() != eval_points.size())
    throw GradError("Lop: " + std::to_string(f.size()) + " outputs but " + std::to_string(eval_points.size()) +
                    " eval points; give one per output");
  std::vector<std::pair<Var, Var>> seeds;
  for (size_t i = 0; i < f.size(); ++i) {
    if (f[i].ndim() != eval_points[i].ndim())
      throw GradError("Lop: eval point " + std::to_string(i) + " " + eval_points[i].type().str() +
                      " does not match output " + f[i].type().str());
    seeds.push_back({f[i], cast(eval_points[i], f[i].dtype())});
  }
  return finish(backprop(seeds, wrt), wrt, options, "Lop");
}

}  // namespace kiln

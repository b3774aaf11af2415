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

// A branch of an ifelse: its node and which side.
struct Branch {
  const Node* ifelse;
  bool then_side;
  bool operator==(const Branch& other) const {
    return ifelse->inputs[0].get() == other.ifelse->inputs[0].get() && then_side == other.then_side;
  }
};
using Where = std::optional<Branch>;  // everywhere, or only where that branch is taken

// A gradient being accumulated: terms that count everywhere, and per branch the sum of terms that
// count only where it is taken (zero elsewhere, whatever their value there).
struct Gradient {
  Var everywhere;
  std::vector<std::pair<Branch, Var>> in_branches;
  void add(const Var& g, const Where& where) {
    if (!where) {
      everywhere = everywhere.defined() ? everywhere + g : g;
      return;
    }
    for (auto& [branch, sum] : in_branches)
      if (branch == *where) {
        sum = sum + g;
        return;
      }
    in_branches.push_back({*where, g});
  }
  // The gradient of `of` as one value: each branch's sum becomes ifelse(c, sum, 0) (or
  // ifelse(c, 0, sum)); the zeros take of's shape, as the sum's may be the other branch's where
  // this one is not taken.
  Var value(const Var& of) const {
    Var total = everywhere;
    for (const auto& [b, sum] : in_branches) {
      const DerivedFrom derived(*b.ifelse, Derivation::gradient);
      const Var& c = b.ifelse->inputs[0];
      const Var v = b.then_side ? ifelse(c, sum, zeros_like(of, b.ifelse->loc), b.ifelse->loc)
                                : ifelse(c, zeros_like(of, b.ifelse->loc), sum, b.ifelse->loc);
      total = total.defined() ? total + v : v;
    }
    return total;
  }
};

}  // namespace

// A node whose outputs' gradients all count only within the same branches (the work only a branch
// reads) is differentiated within them too: its L_op runs on the sums and what it gives its inputs
// counts only there. So where a branch is not taken it adds exactly zero, never a zero cotangent
// times a derivative that is infinite or undefined there (grad(ifelse(x > 0, sqrt(x), 0), x) at
// x = -1 is 0, not NaN); the ifelse wrapping comes only where a value is also read elsewhere.
std::vector<Var> backprop(const std::vector<std::pair<Var, Var>>& seeds, const std::vector<Var>& wrt) {
  std::vector<Var> roots;
  for (const auto& s : seeds) roots.push_back(s.first);
  std::vector<Node*> order = topological_order(roots);

  // Only nodes between a wrt and a root need their L_op.
  std::unordered_set<const Variable*> depends, asked;
  for (const Var& w : wrt) depends.insert(w.get()), asked.insert(w.get());
  for (Node* n : order) {
    bool any = false;
    for (const Var& in : n->inputs) any |= depends.count(in.get()) > 0;
    if (any)
      for (auto& out : n->outputs) depends.insert(out.get());
  }

  std::unordered_map<const Variable*, Gradient> grads;
  auto accumulate = [&](const Var& v, const Var& g, const Where& where) { grads[v.get()].add(g, where); };
  for (const auto& [root, seed] : seeds)
    if (depends.count(root.get())) accumulate(root, seed, {});

  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    Node* n = *it;
    std::vector<const Gradient*> found;
    bool any_grad = false;
    for (auto& out : n->outputs) {
      auto g = grads.find(out.get());
      found.push_back(g == grads.end() ? nullptr : &g->second);
      any_grad |= g != grads.end();
    }
    bool any_input_depends = false;
    for (const Var& in : n->inputs) any_input_depends |= depends.count(in.get()) > 0;
    if (!any_grad || !any_input_depends) continue;
    const DerivedFrom derived(*n, Derivation::gradient);
    // Within a branch when every output's gradient is one sum within the same one.
    const Branch* within = nullptr;
    bool all_within = true;
    for (const Gradient* g : found) {
      if (!g) continue;
      if (g->everywhere.defined() || g->in_branches.size() != 1 || (within && !(*within == g->in_branches[0].first))) {
        all_within = false;
        break;
      }
      within = &g->in_branches[0].first;
    }
    const Where where = all_within ? Where(*within) : std::nullopt;
    std::vector<Var> gouts;
    for (size_t o = 0; o < found.size(); ++o) {
      const Gradient* g = found[o];
      gouts.push_back(!g ? Var() : all_within ? g->in_branches[0].second : g->value(n->output(o)));
    }
    // A chain with a stable form (log(1 + exp(x)), ...) is differentiated in that form, straight to
    // the values it reads: the chain's own gradient overflows where its value did. Not when a wrt
    // lies inside the chain: its gradient is asked for.
    if (auto stable = stable_form(*n); stable && std::none_of(stable->skipped.begin(), stable->skipped.end(),
                                                              [&](const Variable* v) { return asked.count(v); })) {
      const std::vector<Var> through = backprop({{stable->value, gouts[0]}}, stable->reads);
      for (size_t i = 0; i < through.size(); ++i)
        if (through[i].defined() && depends.count(stable->reads[i].get()) && is_float(stable->reads[i].dtype()))
          accumulate(stable->reads[i], through[i], where);
      continue;
    }
    if (const auto* branches = dynamic_cast<const IfElse*>(n->op.get())) {
      // Each branch's value gets the output's gradient, counting only where that branch is taken.
      // Within a branch on the same condition and side it stays within that one; within another it
      // is made one value first (a gradient counts within one branch at most), so a chain of
      // ifelses, each in a branch of the next, costs one ifelse per step in its gradient.
      // The gradient is given as ifelse(c, g, 0): the branch's shape even where the other branch,
      // of another shape, is taken, so its work never fails should it run (where the program cannot
      // skip it: work two branches on one condition share runs before either).
      const Var& c = n->inputs[0];
      for (int i = 0; i < branches->n(); ++i) {
        if (!gouts[static_cast<size_t>(i)].defined()) continue;
        const Var& out = n->output(static_cast<size_t>(i));
        for (bool then_side : {true, false}) {
          const Var& in = n->inputs[static_cast<size_t>(1 + i + (then_side ? 0 : branches->n()))];
          if (!depends.count(in.get()) || !is_float(in.dtype())) continue;
          const Branch taken{n, then_side};
          Var g = gouts[static_cast<size_t>(i)];
          if (where && !(*where == taken)) g = Gradient{{}, {{*where, g}}}.value(out);
          accumulate(in, then_side ? ifelse(c, g, zeros_like(in, n->loc), n->loc) : ifelse(c, zeros_like(in, n->loc), g, n->loc),
                     taken);
        }
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
        accumulate(in, gins[i], where);
      }
    }
  }
  std::vector<Var> out;
  for (const Var& w : wrt) {
    auto g = grads.find(w.get());
    out.push_back(g == grads.end() ? Var() : g->second.value(w));
  }
  return out;
}

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

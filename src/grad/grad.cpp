#include <algorithm>
#include <deque>
#include <map>
#include <tuple>
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
#include "ops/shape.hpp"
#include "ops/stable_forms.hpp"

namespace kiln {

namespace {

// A branch of an ifelse: its node and which side. Branches on one condition and side are one.
struct Branch {
  const Node* ifelse;
  bool then_side;
  const Variable* condition() const { return ifelse->inputs[0].get(); }
};

// Where a gradient term counts: everywhere (the root, null), or only where every branch on the
// path from the root is taken (zero elsewhere, whatever its value there). Paths are interned, one
// node per branch within a path, so extending one is a lookup and comparing two is comparing
// pointers, however deeply branches nest.
struct PathNode {
  const PathNode* parent;
  Branch branch;
  int depth;
  int id;  // its place among the paths made: orders paths the same way on every run
};
using Path = const PathNode*;
// Deeper than this, a gradient is made one value before it enters a branch (a zero there takes the
// value's shape, so the branch's forward work runs): the program's blocks then nest at most this
// deep for it, and emitting them stays linear in the graph for chains of thousands of nested ifelses.
constexpr int kDeepestPath = 16;

class Paths {
 public:
  Path extend(Path path, const Branch& b) {
    auto [it, fresh] = index_.try_emplace({path, b.condition(), b.then_side}, nullptr);
    if (fresh) it->second = &nodes_.emplace_back(PathNode{path, b, depth(path) + 1, static_cast<int>(nodes_.size())});
    return it->second;
  }
  static int depth(Path p) { return p ? p->depth : 0; }
  // The innermost path both lie on.
  static Path common(Path a, Path b) {
    while (depth(a) > depth(b)) a = a->parent;
    while (depth(b) > depth(a)) b = b->parent;
    while (a != b) a = a->parent, b = b->parent;
    return a;
  }
  // The branch of the path on this condition, if any.
  static const Branch* on_condition(Path p, const Variable* condition) {
    for (; p; p = p->parent)
      if (p->branch.condition() == condition) return &p->branch;
    return nullptr;
  }

 private:
  std::deque<PathNode> nodes_;
  std::map<std::tuple<Path, const Variable*, bool>, Path> index_;
};

// A gradient being accumulated: one sum per path where its terms count.
struct Gradient {
  std::vector<std::pair<Path, Var>> terms;

  void add(const Var& g, Path path) {
    for (auto& [p, sum] : terms)
      if (p == path) {
        sum = sum + g;
        return;
      }
    terms.push_back({path, g});
  }
  // The innermost path every term lies on.
  Path common() const {
    Path common = terms.front().first;
    for (const auto& [p, sum] : terms) common = Paths::common(common, p);
    return common;
  }
  // The gradient of `of` as one value where `from` (a path every term lies on) is taken: the sums
  // of deeper paths are wrapped, innermost first, in ifelse(c, sum, 0) (or ifelse(c, 0, sum)) for
  // each branch below `from`; the zeros take of's shape, as the sum's may be the other branch's
  // where this one is not taken.
  Var value(const Var& of, Path from) const {
    if (terms.size() == 1 && terms[0].first == from) return terms[0].second;  // nothing to wrap
    // Deepest first, each sum wrapped before its parent's is; the root (null) last.
    auto deeper = [](Path a, Path b) {
      if (Paths::depth(a) != Paths::depth(b)) return Paths::depth(a) > Paths::depth(b);
      return a && b && a->id < b->id;
    };
    std::map<Path, Var, decltype(deeper)> sums(deeper);
    auto add_to = [&](Path p, const Var& v) {
      auto [it, fresh] = sums.try_emplace(p, v);
      if (!fresh) it->second = it->second + v;
    };
    for (const auto& [p, sum] : terms) add_to(p, sum);
    while (sums.begin()->first != from) {
      const auto [p, sum] = *sums.begin();
      sums.erase(sums.begin());
      const Node& n = *p->branch.ifelse;
      const DerivedFrom derived(n, Derivation::gradient);
      const Var& c = n.inputs[0];
      add_to(p->parent, p->branch.then_side ? ifelse(c, sum, zeros_like(of, n.loc), n.loc)
                                            : ifelse(c, zeros_like(of, n.loc), sum, n.loc));
    }
    return sums.begin()->second;
  }
};

}  // namespace

// A node whose outputs' gradients all count only within the same branches (the work only a branch
// reads, nested branches included) is differentiated within them too: its L_op runs on the sums
// and what it gives its inputs counts only there. So where a branch is not taken it adds exactly
// zero, never a zero cotangent times a derivative that is infinite or undefined there
// (grad(ifelse(x > 0, sqrt(x), 0), x) at x = -1 is 0, not NaN), and the work of a branch not taken
// never runs; the ifelse wrapping comes only where a value is also read elsewhere.
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

  Paths paths;
  std::unordered_map<const Variable*, Gradient> grads;
  auto accumulate = [&](const Var& v, const Var& g, Path where) { grads[v.get()].add(g, where); };
  for (const auto& [root, seed] : seeds)
    if (depends.count(root.get())) accumulate(root, seed, nullptr);

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
    // Within the branches every term of every output's gradient lies in, the node is
    // differentiated there: its L_op runs on the sums from that path on.
    std::optional<Path> common;
    for (const Gradient* g : found)
      if (g) common = common ? Paths::common(*common, g->common()) : g->common();
    const Path where = *common;
    std::vector<Var> gouts;
    for (size_t o = 0; o < found.size(); ++o) gouts.push_back(found[o] ? found[o]->value(n->output(o), where) : Var());
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
      // Each branch's value gets the output's gradient, counting only where that branch is taken
      // too: the path goes one branch deeper, unless it already holds that branch (on the other
      // side of a branch on the same condition, the path is never taken: its terms are zero, and
      // what they reach stays connected). The gradient is given as ifelse(c, g, 0): the branch's
      // shape even where the other branch, of another shape, is taken, so its work never fails
      // should it run.
      const Var& c = n->inputs[0];
      for (int i = 0; i < branches->n(); ++i) {
        if (!gouts[static_cast<size_t>(i)].defined()) continue;
        for (bool then_side : {true, false}) {
          const Var& in = n->inputs[static_cast<size_t>(1 + i + (then_side ? 0 : branches->n()))];
          if (!depends.count(in.get()) || !is_float(in.dtype())) continue;
          const Branch* on_condition = Paths::on_condition(where, c.get());
          Var g = gouts[static_cast<size_t>(i)];
          Path path = where;
          if (!on_condition || on_condition->then_side != then_side) {
            if (Paths::depth(where) >= kDeepestPath) {
              g = Gradient{{{where, g}}}.value(n->output(static_cast<size_t>(i)), nullptr);
              path = nullptr;
            }
            path = paths.extend(path, Branch{n, then_side});
          }
          accumulate(in, then_side ? ifelse(c, g, zeros_like(in, n->loc), n->loc) : ifelse(c, zeros_like(in, n->loc), g, n->loc),
                     path);
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
    out.push_back(g == grads.end() ? Var() : g->second.value(w, nullptr));
  }
  return out;
}

namespace {

// Why a cost that reads x gets no gradient for it: the first node that reads x (directly or not)
// and gives only integer or boolean values (a comparison, a cast to an integer), or, with none,
// the ops that read x for what carries no gradient (its shape). Empty when the costs never read x.
std::string why_no_gradient_flows(const std::vector<Var>& costs, const Var& x) {
  std::unordered_set<const Variable*> reads_x{x.get()};
  for (const Node* n : topological_order(costs)) {
    const bool reads = std::any_of(n->inputs.begin(), n->inputs.end(), [&](const Var& in) { return reads_x.count(in.get()) > 0; });
    if (!reads) continue;
    const bool gives_float = std::any_of(n->outputs.begin(), n->outputs.end(), [](const auto& o) { return is_float(o->type.dtype); });
    if (!gives_float)
      return "only through integer or boolean values, which have no gradient (" + n->op->name() + ", " + n->origin() + ")";
    for (const auto& o : n->outputs) reads_x.insert(o.get());
  }
  const bool read = std::any_of(costs.begin(), costs.end(), [&](const Var& c) { return reads_x.count(c.get()) > 0; });
  return read ? "only through what carries no gradient (its shape, or an op with no gradient for it)" : "";
}

std::vector<Var> finish(std::vector<Var> grads, const std::vector<Var>& costs, const std::vector<Var>& wrt,
                        const GradOptions& options, const char* who) {
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
    const std::string how = why_no_gradient_flows(costs, wrt[i]);
    throw GradError(std::string(who) + ": the cost " + (how.empty() ? "does not depend on" : "reads") + " wrt[" +
                    std::to_string(i) + "] '" + name + "' " + wrt[i].type().str() + (how.empty() ? "" : " " + how) +
                    " (it is disconnected); pass GradOptions{.disconnected_inputs = DisconnectedInputs::zero} to get a "
                    "zero gradient instead");
  }
  return grads;
}

// For the ops that differentiate an inner graph (graph/inner_gradient.hpp).
std::vector<Var> inner_graph_vjp(const std::vector<Var>& f, const std::vector<Var>& wrt, const std::vector<Var>& eval_points) {
  return lop_of_own_eval_points(f, wrt, eval_points, {.disconnected_inputs = DisconnectedInputs::zero});
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
  return finish(backprop({{cost, ones_like(cost)}}, wrt), {cost}, wrt, options, "grad");
}

Var grad(const Var& cost, const Var& wrt, GradOptions options) { return grad(cost, std::vector<Var>{wrt}, options)[0]; }

namespace {

// Lop's products; `checked_at`: each eval point's shape checked against its output's when the
// function runs (the user's eval points; kiln's own have the shape by construction).
std::vector<Var> vector_jacobian_products(const std::vector<Var>& f, const std::vector<Var>& wrt,
                                          const std::vector<Var>& eval_points, GradOptions options,
                                          std::optional<Loc> checked_at) {
  provide_vjp_of_inner_graphs();
  if (f.size() != eval_points.size())
    throw GradError("Lop: " + std::to_string(f.size()) + " outputs but " + std::to_string(eval_points.size()) +
                    " eval points; give one per output");
  std::vector<std::pair<Var, Var>> seeds;
  for (size_t i = 0; i < f.size(); ++i) {
    if (f[i].ndim() != eval_points[i].ndim())
      throw GradError("Lop: eval point " + std::to_string(i) + " " + eval_points[i].type().str() +
                      " does not match output " + f[i].type().str());
    Var seed = cast(eval_points[i], f[i].dtype());
    // Broadcasting would take an eval point of another shape silently: it must have f[i]'s own.
    if (checked_at)
      seed = shaped_as(seed, shape_of(f[i], *checked_at), "Lop: eval point " + std::to_string(i) + " (for f[" + std::to_string(i) + "])",
                       *checked_at);
    seeds.push_back({f[i], seed});
  }
  return finish(backprop(seeds, wrt), f, wrt, options, "Lop");
}

}  // namespace

std::vector<Var> Lop(const std::vector<Var>& f, const std::vector<Var>& wrt, const std::vector<Var>& eval_points,
                     GradOptions options, Loc loc) {
  return vector_jacobian_products(f, wrt, eval_points, options, loc);
}

std::vector<Var> lop_of_own_eval_points(const std::vector<Var>& f, const std::vector<Var>& wrt,
                                        const std::vector<Var>& eval_points, GradOptions options) {
  return vector_jacobian_products(f, wrt, eval_points, options, std::nullopt);
}

}  // namespace kiln

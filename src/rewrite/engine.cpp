#include "rewrite/engine.hpp"

#include <chrono>
#include <deque>
#include <unordered_map>

#include "graph/op.hpp"

namespace kiln {

namespace {

using Clock = std::chrono::steady_clock;

RewriteStat& stat_of(CompileReport& report, const std::string& group, const std::string& name) {
  for (RewriteStat& s : report.rewrites)
    if (s.group == group && s.name == name) return s;
  report.rewrites.push_back({group, name, 0, 0.0});
  return report.rewrites.back();
}

// A replacement must keep the dtype, the ndim and every axis declared broadcastable.
bool replaceable(const Var& old_var, const Var& new_var) {
  const Type &a = old_var.type(), &b = new_var.type();
  if (a.dtype != b.dtype || a.ndim() != b.ndim()) return false;
  for (int64_t d = 0; d < a.ndim(); ++d)
    if (a.broadcastable[d] && !b.broadcastable[d]) return false;
  return true;
}

bool is_live(const FunctionGraph& graph, Node* node) {
  for (const auto& out : node->outputs)
    if (!graph.clients(out.get()).empty()) return true;
  return false;
}

}  // namespace

void apply_group(FunctionGraph& graph, const RewriteGroup& group, CompileReport& report, int max_passes) {
  std::unordered_map<std::type_index, std::vector<const LocalRewrite*>> by_op;
  std::vector<const LocalRewrite*> any_op;
  for (const LocalRewrite& r : group.locals) {
    if (r.ops.empty()) any_op.push_back(&r);
    for (const auto& t : r.ops) by_op[t].push_back(&r);
  }
  std::deque<std::string> recent;
  for (int pass = 0; pass < max_passes; ++pass) {
    int64_t changes = 0;
    for (const GlobalRewrite& g : group.globals) {
      auto start = Clock::now();
      const int64_t n = g.apply(graph);
      RewriteStat& s = stat_of(report, group.name, g.name);
      s.seconds += std::chrono::duration<double>(Clock::now() - start).count();
      s.fired += n;
      changes += n;
      if (n) recent.push_back(g.name);
    }
    std::vector<std::shared_ptr<Node>> order;
    for (Node* n : graph.toposort()) order.push_back(n->shared_from_this());
    for (const auto& node : order) {
      if (!is_live(graph, node.get())) continue;
      auto it = by_op.find(std::type_index(typeid(*node->op)));
      std::vector<const LocalRewrite*> candidates = any_op;
      if (it != by_op.end()) candidates.insert(candidates.end(), it->second.begin(), it->second.end());
      for (const LocalRewrite* r : candidates) {
        auto start = Clock::now();
        std::vector<Var> replacement = r->apply(graph, *node);
        RewriteStat& s = stat_of(report, group.name, r->name);
        s.seconds += std::chrono::duration<double>(Clock::now() - start).count();
        bool usable = !replacement.empty() && replacement.size() == node->outputs.size();
        for (size_t i = 0; usable && i < replacement.size(); ++i)
          usable = !replacement[i].defined() || replaceable(node->output(i), replacement[i]);
        if (!usable) continue;
        for (size_t i = 0; i < replacement.size(); ++i)
          if (replacement[i].defined()) graph.replace(node->output(i), replacement[i], r->name);
        ++s.fired;
        ++changes;
        recent.push_back(r->name);
        if (recent.size() > 6) recent.pop_front();
        break;
      }
    }
    if (changes == 0) {
      graph.prune();
      return;
    }
  }
  std::string last;
  for (const auto& r : recent) last += (last.empty() ? "" : ", ") + r;
  throw Error("rewrite group '" + group.name + "' did not settle after " + std::to_string(max_passes) +
              " passes; the last rewrites that fired were: " + last + " (two rewrites probably undo each other)");
}

}  // namespace kiln

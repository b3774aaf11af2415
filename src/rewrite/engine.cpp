#include "rewrite/engine.hpp"

#include <x86intrin.h>

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
  // Each rewrite's statistics entry (an index: the report may grow), and the candidates per op
  // class, found once.
  auto stat_index = [&](const std::string& name) {
    RewriteStat& entry = stat_of(report, group.name, name);
    return static_cast<size_t>(&entry - report.rewrites.data());
  };
  std::vector<size_t> global_stat, local_stat;
  for (const GlobalRewrite& g : group.globals) global_stat.push_back(stat_index(g.name));
  for (const LocalRewrite& r : group.locals) local_stat.push_back(stat_index(r.name));
  std::vector<size_t> any_op;
  std::unordered_map<std::type_index, std::vector<size_t>> by_op;
  for (size_t i = 0; i < group.locals.size(); ++i) {
    if (group.locals[i].ops.empty()) any_op.push_back(i);
    for (const auto& t : group.locals[i].ops) by_op[t].push_back(i);
  }
  for (auto& [t, list] : by_op) list.insert(list.begin(), any_op.begin(), any_op.end());

  // Each local rewrite is timed in time-stamp counter ticks (a clock read per attempt would cost
  // more than most attempts), converted to seconds at the end with the group's own clock time.
  std::vector<uint64_t> local_ticks(group.locals.size(), 0);
  const auto clock_start = Clock::now();
  const uint64_t tick_start = __rdtsc();
  auto settle_times = [&] {
    const double seconds = std::chrono::duration<double>(Clock::now() - clock_start).count();
    const uint64_t ticks = __rdtsc() - tick_start;
    const double per_tick = ticks ? seconds / static_cast<double>(ticks) : 0.0;
    for (size_t li = 0; li < group.locals.size(); ++li)
      report.rewrites[local_stat[li]].seconds += static_cast<double>(local_ticks[li]) * per_tick;
  };
  std::deque<std::string> recent;
  auto remember = [&](const std::string& name) {
    recent.push_back(name);
    if (recent.size() > 6) recent.pop_front();
  };
  // A global rewrite applies everywhere it can in one application: it runs again only when
  // something else changed the graph since. Local rewrites revisit, after the first pass, only the
  // nodes that changed during the pass before (Node::changed_at).
  std::vector<uint64_t> global_ran_at(group.globals.size(), 0);
  bool first_pass = true;
  uint64_t pass_start = graph.version();
  for (int pass = 0; pass < max_passes; ++pass) {
    int64_t changes = 0;
    const uint64_t visit_after = pass_start;
    pass_start = graph.version();
    for (size_t gi = 0; gi < group.globals.size(); ++gi) {
      if (!first_pass && graph.version() == global_ran_at[gi]) continue;
      auto start = Clock::now();
      const int64_t n = group.globals[gi].apply(graph);
      RewriteStat& s = report.rewrites[global_stat[gi]];
      s.seconds += std::chrono::duration<double>(Clock::now() - start).count();
      s.fired += n;
      changes += n;
      if (n) remember(group.globals[gi].name);
      global_ran_at[gi] = graph.version();
    }
    if (!group.locals.empty()) {
      // The graph keeps every node it has seen alive until prune(), replaced ones included.
      for (Node* node : first_pass ? graph.toposort() : graph.changed_since(visit_after)) {
        auto it = by_op.find(std::type_index(typeid(*node->op)));
        const std::vector<size_t>& candidates = it == by_op.end() ? any_op : it->second;
        if (candidates.empty() || !is_live(graph, node)) continue;
        for (size_t li : candidates) {
          const LocalRewrite& r = group.locals[li];
          const uint64_t start = __rdtsc();
          std::vector<Var> replacement;
          {
            const DerivedFrom derived(*node, Derivation::rewrite);
            replacement = r.apply(graph, *node);
          }
          local_ticks[li] += __rdtsc() - start;
          RewriteStat& s = report.rewrites[local_stat[li]];
          bool usable = !replacement.empty() && replacement.size() == node->outputs.size();
          for (size_t i = 0; usable && i < replacement.size(); ++i)
            usable = !replacement[i].defined() || replaceable(node->output(i), replacement[i]);
          if (!usable) continue;
          for (size_t i = 0; i < replacement.size(); ++i)
            if (replacement[i].defined()) graph.replace(node->output(i), replacement[i], r.name);
          ++s.fired;
          ++changes;
          remember(r.name);
          break;
        }
      }
    }
    first_pass = false;
    if (changes == 0) {
      if (pass > 0) graph.prune();  // forget what the group's replacements left behind
      settle_times();
      return;
    }
  }
  std::string last;
  for (const auto& r : recent) last += (last.empty() ? "" : ", ") + r;
  throw Error("rewrite group '" + group.name + "' did not settle after " + std::to_string(max_passes) +
              " passes; the last rewrites that fired were: " + last + " (two rewrites probably undo each other)");
}

}  // namespace kiln

#include "compile/schedule.hpp"

#include <queue>

#include "graph/op.hpp"

namespace kiln {

namespace {

// List scheduling that frees memory as soon as it can: among the nodes whose inputs are ready,
// run the one that ends the most values' lives minus the buffers it creates (views create none);
// ties go to the depth-first order. Without sizes it counts values, which is what lets a training
// step apply each layer's update as soon as its gradient exists instead of keeping every
// activation until the end. A heap with lazily dropped stale entries keeps it O(E log N) on graphs
// of tens of thousands of nodes.
std::vector<Node*> frees_first(const std::vector<Node*>& depth_first, const std::vector<Var>& results) {
  const int n = static_cast<int>(depth_first.size());
  // Values computed here are numbered by their node's position (a leaf is never freed, so it
  // needs no number): value_base[i] + output index.
  std::vector<int> value_base(static_cast<size_t>(n) + 1, 0);
  for (int i = 0; i < n; ++i) {
    depth_first[i]->position = i;
    value_base[i + 1] = value_base[i] + static_cast<int>(depth_first[i]->outputs.size());
  }
  auto value_of = [&](const Variable* v) { return v->owner ? value_base[v->owner->position] + v->index : -1; };
  const int n_values = value_base[n];
  std::vector<bool> freeable(static_cast<size_t>(n_values), true);  // computed here and not handed back
  for (const Var& r : results)
    if (const int value = value_of(r.get()); value >= 0) freeable[value] = false;

  // Per node the values it reads (once each) and the nodes waiting for it; per value its readers:
  // lists laid end to end, each found by its start (CSR).
  std::vector<int> reads_start{0}, reads, dependents_count(static_cast<size_t>(n), 0), waiting(static_cast<size_t>(n), 0);
  std::vector<int> unread(static_cast<size_t>(n_values), 0), last_reader_seen(static_cast<size_t>(n_values), -1),
      last_dependent_seen(static_cast<size_t>(n), -1);
  std::vector<std::pair<int, int>> dependent_pairs;  // (producer, reader)
  for (int i = 0; i < n; ++i) {
    for (const Var& v : depth_first[i]->inputs) {
      const int value = value_of(v.get());
      if (value < 0 || last_reader_seen[value] == i) continue;  // a leaf, or read twice by this node
      last_reader_seen[value] = i;
      reads.push_back(value);
      ++unread[value];
      const int p = v.get()->owner->position;
      if (last_dependent_seen[p] == i) continue;
      last_dependent_seen[p] = i;
      dependent_pairs.push_back({p, i});
      ++dependents_count[p];
      ++waiting[i];
    }
    reads_start.push_back(static_cast<int>(reads.size()));
  }
  auto laid_out = [](const std::vector<int>& counts, std::vector<int>& start) {
    start.assign(counts.size() + 1, 0);
    for (size_t i = 0; i < counts.size(); ++i) start[i + 1] = start[i] + counts[i];
  };
  std::vector<int> dependents_start, dependents(dependent_pairs.size()), fill;
  laid_out(dependents_count, dependents_start);
  fill.assign(dependents_start.begin(), dependents_start.end() - 1);
  for (auto [p, i] : dependent_pairs) dependents[fill[p]++] = i;
  std::vector<int> readers_start, readers(reads.size());
  laid_out(unread, readers_start);
  fill.assign(readers_start.begin(), readers_start.end() - 1);
  for (int i = 0; i < n; ++i)
    for (int r = reads_start[i]; r < reads_start[i + 1]; ++r) readers[fill[reads[r]]++] = i;

  std::vector<int> score(depth_first.size(), 0);
  std::vector<bool> ready(depth_first.size(), false), done(depth_first.size(), false);
  auto initial_score = [&](int i) {
    const Node& node = *depth_first[i];
    int s = -static_cast<int>(node.outputs.size() - node.op->view_map().size());
    for (int r = reads_start[i]; r < reads_start[i + 1]; ++r)
      if (freeable[reads[r]] && unread[reads[r]] == 1) ++s;
    return s;
  };
  std::priority_queue<std::pair<int, int>> heap;  // (score, -depth-first index)
  auto make_ready = [&](int i) {
    ready[i] = true;
    score[i] = initial_score(i);
    heap.push({score[i], -i});
  };
  for (int i = 0; i < n; ++i)
    if (waiting[i] == 0) make_ready(i);
  std::vector<Node*> order;
  order.reserve(depth_first.size());
  while (!heap.empty()) {
    const auto [entry_score, negative_index] = heap.top();
    heap.pop();
    const int i = -negative_index;
    if (done[i] || entry_score != score[i]) continue;  // stale
    done[i] = true;
    order.push_back(depth_first[i]);
    for (int k = reads_start[i]; k < reads_start[i + 1]; ++k) {
      const int value = reads[k];
      if (--unread[value] != 1 || !freeable[value]) continue;
      for (int j = readers_start[value]; j < readers_start[value + 1]; ++j)  // the last reader now ends this value's life
        if (const int r = readers[j]; !done[r] && ready[r]) heap.push({++score[r], -r});
    }
    for (int j = dependents_start[i]; j < dependents_start[i + 1]; ++j)
      if (const int d = dependents[j]; --waiting[d] == 0) make_ready(d);
  }
  return order;
}

}  // namespace

std::vector<Schedule> candidate_orders(const std::vector<Var>& results) {
  std::vector<Schedule> orders{{"depth-first", topological_order_of_own(results)}};
  std::vector<Node*> greedy = frees_first(orders[0].order, results);
  if (greedy != orders[0].order) orders.push_back({"frees-first", std::move(greedy)});
  return orders;
}

}  // namespace kiln

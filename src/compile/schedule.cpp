#include "compile/schedule.hpp"

#include <queue>
#include <unordered_map>
#include <unordered_set>

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
  std::unordered_map<const Node*, int> node_index;
  node_index.reserve(depth_first.size());
  for (int i = 0; i < n; ++i) node_index[depth_first[i]] = i;
  std::unordered_set<const Variable*> kept;
  for (const Var& r : results) kept.insert(r.get());

  std::unordered_map<const Variable*, int> value_index;
  std::vector<std::vector<int>> readers;  // per value: the nodes reading it
  std::vector<int> unread;                // per value: readers still to run
  std::vector<bool> freeable;             // per value: computed here and not handed back
  std::vector<std::vector<int>> reads(depth_first.size()), dependents(depth_first.size());
  std::vector<int> waiting(depth_first.size(), 0), last_reader_seen, last_dependent_seen(depth_first.size(), -1);
  for (int i = 0; i < n; ++i) {
    for (const Var& v : depth_first[i]->inputs) {
      auto [it, fresh] = value_index.try_emplace(v.get(), static_cast<int>(readers.size()));
      if (fresh) {
        readers.emplace_back();
        unread.push_back(0);
        freeable.push_back(v.get()->owner && !kept.count(v.get()));
        last_reader_seen.push_back(-1);
      }
      const int value = it->second;
      if (last_reader_seen[value] == i) continue;  // read twice by this node
      last_reader_seen[value] = i;
      reads[i].push_back(value);
      readers[value].push_back(i);
      ++unread[value];
      if (const Node* producer = v.get()->owner) {
        const int p = node_index.at(producer);
        if (last_dependent_seen[p] == i) continue;
        last_dependent_seen[p] = i;
        dependents[p].push_back(i);
        ++waiting[i];
      }
    }
  }

  std::vector<int> score(depth_first.size(), 0);
  std::vector<bool> ready(depth_first.size(), false), done(depth_first.size(), false);
  auto initial_score = [&](int i) {
    const Node& node = *depth_first[i];
    int s = -static_cast<int>(node.outputs.size() - node.op->view_map().size());
    for (int value : reads[i])
      if (freeable[value] && unread[value] == 1) ++s;
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
    for (int value : reads[i]) {
      if (--unread[value] != 1 || !freeable[value]) continue;
      for (int r : readers[value])  // the last reader now ends this value's life
        if (!done[r] && ready[r]) heap.push({++score[r], -r});
    }
    for (int d : dependents[i])
      if (--waiting[d] == 0) make_ready(d);
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

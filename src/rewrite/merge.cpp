// merge: identical nodes and equal constants become one (common subexpressions).
#include <algorithm>
#include <unordered_map>

#include "graph/op.hpp"
#include "ops/patterns.hpp"
#include "rewrite/catalogue.hpp"
#include "tensor/flat_map.hpp"

namespace kiln {

namespace {

// A constant's dtype, shape and bytes, hashed without copying them.
size_t constant_hash(const Tensor& t) {
  size_t h = static_cast<size_t>(t.dtype()) * 0x9e3779b97f4a7c15ULL;
  for (int64_t d : t.shape()) h = (h ^ static_cast<size_t>(d)) * 0x100000001b3ULL;
  const Tensor c = t.is_contiguous() ? t : t.contiguous();
  const auto* bytes = reinterpret_cast<const unsigned char*>(c.raw_data());
  for (size_t i = 0; i < c.nbytes(); ++i) h = (h ^ bytes[i]) * 0x100000001b3ULL;
  return h;
}

int64_t merge_constants(FunctionGraph& graph) {
  std::unordered_map<size_t, std::vector<Var>> canonical;  // by hash: few distinct constants
  int64_t merged = 0;
  for (Node* n : graph.toposort())
    for (size_t i = 0; i < n->inputs.size(); ++i) {
      const Var in = n->inputs[i];
      if (!in.get()->constant) continue;
      std::vector<Var>& candidates = canonical[constant_hash(*in.get()->constant)];
      const auto twin = std::find_if(candidates.begin(), candidates.end(), [&](const Var& c) {
        return c.type() == in.type() && pattern::same_constant(*c.get()->constant, *in.get()->constant);
      });
      if (twin == candidates.end()) {
        candidates.push_back(in);
      } else if (!twin->same(in)) {
        graph.replace(in, *twin, "merge");
        ++merged;
      }
    }
  return merged;
}

int64_t merge_nodes(FunctionGraph& graph) {
  // The first node of each hash, and the rare others of a hash shared by different nodes.
  FlatMap<size_t, Node*> first;
  std::unordered_multimap<size_t, Node*> more;
  const std::vector<Node*> order = graph.toposort();
  first.reserve(order.size());
  auto same_node = [](const Node* a, const Node* b) {
    if (a->inputs.size() != b->inputs.size() || !a->op->equals(*b->op)) return false;
    for (size_t i = 0; i < a->inputs.size(); ++i)
      if (!a->inputs[i].same(b->inputs[i])) return false;
    return true;
  };
  int64_t merged = 0;
  for (Node* n : order) {
    size_t h = n->op->hash();
    for (const Var& in : n->inputs) h = h * 1000003u ^ std::hash<const void*>()(in.get());
    Node* twin = nullptr;
    auto [known, fresh] = first.try_emplace(h, n);
    if (fresh) continue;
    if (same_node(*known, n)) {
      twin = *known;
    } else {
      for (auto [m, end] = more.equal_range(h); m != end && !twin; ++m)
        if (same_node(m->second, n)) twin = m->second;
      if (!twin) {
        more.emplace(h, n);
        continue;
      }
    }
    for (size_t i = 0; i < n->outputs.size(); ++i) graph.replace(n->output(i), twin->output(i), "merge");
    ++merged;
  }
  return merged;
}

}  // namespace

RewriteGroup merge_group() {
  return {"merge", {{"merge_constants", merge_constants}, {"merge_nodes", merge_nodes}}, {}};
}

}  // namespace kiln

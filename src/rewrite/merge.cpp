// merge: identical nodes and equal constants become one (common subexpressions).
#include <cstring>
#include <map>
#include <unordered_map>

#include "graph/op.hpp"
#include "rewrite/catalogue.hpp"

namespace kiln {

namespace {

std::string constant_key(const Tensor& t) {
  Tensor c = t.contiguous();
  std::string key = std::string(dtype_name(t.dtype())) + shape_str(t.shape());
  key.append(reinterpret_cast<const char*>(c.raw_data()), c.nbytes());
  return key;
}

int64_t merge_constants(FunctionGraph& graph) {
  std::unordered_map<std::string, Var> canonical;
  int64_t merged = 0;
  for (Node* n : graph.toposort())
    for (const Var& in : std::vector<Var>(n->inputs)) {
      if (!in.get()->constant) continue;
      auto [it, fresh] = canonical.try_emplace(constant_key(*in.get()->constant), in);
      if (!fresh && !it->second.same(in) && it->second.type() == in.type()) {
        graph.replace(in, it->second, "merge");
        ++merged;
      }
    }
  return merged;
}

int64_t merge_nodes(FunctionGraph& graph) {
  std::unordered_map<size_t, std::vector<Node*>> seen;
  int64_t merged = 0;
  for (Node* n : graph.toposort()) {
    size_t h = n->op->hash();
    for (const Var& in : n->inputs) h = h * 1000003u ^ std::hash<const void*>()(in.get());
    Node* twin = nullptr;
    for (Node* other : seen[h]) {
      if (other->inputs.size() != n->inputs.size() || !other->op->equals(*n->op)) continue;
      bool same = true;
      for (size_t i = 0; same && i < n->inputs.size(); ++i) same = other->inputs[i].same(n->inputs[i]);
      if (same) {
        twin = other;
        break;
      }
    }
    if (!twin) {
      seen[h].push_back(n);
      continue;
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

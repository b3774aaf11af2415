// fusion: every maximal connected group of elementwise ops becomes one Composite that makes a
// single pass over memory; a sum or mean fed by such a group accumulates inside it.
#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "ops/composite.hpp"
#include "ops/elemwise.hpp"
#include "ops/reduce.hpp"
#include "rewrite/catalogue.hpp"
#include "ops/patterns.hpp"

namespace kiln {

namespace {

bool is_elemwise(const Node* n) { return n && dynamic_cast<const Elemwise*>(n->op.get()); }

// Readers of v that the outputs still depend on.
std::vector<Node*> live_readers(const FunctionGraph& graph, const Variable* v, bool& read_by_output) {
  std::vector<Node*> readers;
  read_by_output = false;
  for (auto [node, i] : graph.clients(v)) {
    if (!node) {
      read_by_output = true;
      continue;
    }
    for (const auto& out : node->outputs)
      if (!graph.clients(out.get()).empty()) {
        readers.push_back(node);
        break;
      }
  }
  return readers;
}

// Grows the group of root backwards: a producer joins when it is elementwise, computes in the
// root's shape (same broadcast pattern, so no value is recomputed per broadcast element) and every
// live reader of its result is already in the group.
std::vector<Node*> grow_group(const FunctionGraph& graph, Node* root, const std::unordered_set<Node*>& taken) {
  std::vector<Node*> group{root};
  std::unordered_set<Node*> members{root};
  const Type& shape_type = root->outputs[0]->type;
  bool grew = true;
  while (grew) {
    grew = false;
    for (size_t m = 0; m < group.size(); ++m)
      for (const Var& in : group[m]->inputs) {
        Node* p = in.get()->owner;
        if (!is_elemwise(p) || members.count(p) || taken.count(p)) continue;
        if (p->outputs[0]->type.broadcastable != shape_type.broadcastable) continue;
        bool read_by_output = false;
        auto readers = live_readers(graph, in.get(), read_by_output);
        if (read_by_output) continue;
        bool inside = std::all_of(readers.begin(), readers.end(), [&](Node* r) { return members.count(r) > 0; });
        if (!inside) continue;
        group.push_back(p);
        members.insert(p);
        grew = true;
      }
  }
  return group;
}

ScalarInstruction instruction_of(const Node& n, const std::vector<int>& args) {
  const auto& e = static_cast<const Elemwise&>(*n.op);
  return {e.scalar_op(), n.outputs[0]->type.dtype, args};
}

// Builds the program of a group (topological order, root last) over its external inputs.
std::pair<std::vector<Var>, std::vector<ScalarInstruction>> program_of(const std::vector<Node*>& group, Node* root) {
  std::unordered_set<const Node*> members(group.begin(), group.end());
  std::vector<Node*> order;
  std::unordered_set<const Node*> placed;
  std::vector<std::pair<Node*, bool>> stack{{root, false}};
  while (!stack.empty()) {
    auto [n, expanded] = stack.back();
    stack.pop_back();
    if (placed.count(n)) continue;
    if (expanded) {
      placed.insert(n);
      order.push_back(n);
      continue;
    }
    stack.push_back({n, true});
    for (const Var& in : n->inputs)
      if (Node* p = in.get()->owner; p && members.count(p) && !placed.count(p)) stack.push_back({p, false});
  }
  std::vector<Var> inputs;
  std::unordered_map<const Variable*, int> reg;
  for (Node* n : order)
    for (const Var& in : n->inputs)
      if (!(in.get()->owner && members.count(in.get()->owner)) && !reg.count(in.get())) {
        reg[in.get()] = static_cast<int>(inputs.size());
        inputs.push_back(in);
      }
  std::vector<ScalarInstruction> program;
  for (Node* n : order) {
    std::vector<int> args;
    for (const Var& in : n->inputs) args.push_back(reg.at(in.get()));
    reg[n->outputs[0].get()] = static_cast<int>(inputs.size() + program.size());
    program.push_back(instruction_of(*n, args));
  }
  return {inputs, program};
}

int64_t fuse_elementwise(FunctionGraph& graph) {
  std::vector<Node*> order = graph.toposort();
  std::unordered_set<Node*> taken;
  std::vector<std::pair<Node*, std::vector<Node*>>> groups;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    Node* root = *it;
    if (!is_elemwise(root) || taken.count(root)) continue;
    std::vector<Node*> group = grow_group(graph, root, taken);
    taken.insert(group.begin(), group.end());
    if (group.size() >= 2) groups.push_back({root, std::move(group)});
  }
  for (auto& [root, group] : groups) {
    auto [inputs, program] = program_of(group, root);
    auto op = std::make_shared<Composite>(static_cast<int>(inputs.size()), std::move(program), root->outputs[0]->type, std::nullopt);
    graph.replace(root->output(0), apply1(op, inputs, root->loc), "fuse_elementwise");
  }
  return static_cast<int64_t>(groups.size());
}

// sum or mean of an elementwise result -> the result accumulated inside the fused pass
std::vector<Var> fuse_reduction(FunctionGraph& graph, Node& n) {
  const auto& r = static_cast<const Reduce&>(*n.op);
  const Var& in = n.inputs[0];
  if ((r.kind() != ReduceKind::sum && r.kind() != ReduceKind::mean) || !is_float(in.dtype()) ||
      !Composite::fusable_axes(r.axes(), in.ndim()) || pattern::live_clients(graph, in) != 1)
    return {};
  const Node* producer = in.get()->owner;
  if (!producer) return {};
  std::vector<Var> inputs;
  std::vector<ScalarInstruction> program;
  if (const auto* c = dynamic_cast<const Composite*>(producer->op.get())) {
    if (c->reduction()) return {};
    inputs = producer->inputs;
    program = c->program();
  } else if (is_elemwise(producer)) {
    inputs = producer->inputs;
    std::vector<int> args;
    for (size_t i = 0; i < inputs.size(); ++i) args.push_back(static_cast<int>(i));
    program.push_back(instruction_of(*producer, args));
  } else {
    return {};
  }
  FusedReduction reduction{r.kind(), r.axes(), r.keepdims()};
  auto op = std::make_shared<Composite>(static_cast<int>(inputs.size()), std::move(program), n.outputs[0]->type, reduction);
  return {apply1(op, inputs, n.loc)};
}

}  // namespace

RewriteGroup fusion_group() {
  return {"fusion", {{"fuse_elementwise", fuse_elementwise}}, {{"fuse_reduction", {op_class<Reduce>()}, fuse_reduction}}};
}

}  // namespace kiln

// fusion: every maximal connected group of elementwise ops becomes one Composite that makes a
// single pass over memory, writing each of its values that is read outside the group; a sum or
// mean fed by such a group accumulates inside it.
#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "ops/composite.hpp"
#include "ops/elemwise.hpp"
#include "ops/ifelse.hpp"
#include "ops/reduce.hpp"
#include "rewrite/catalogue.hpp"
#include "ops/patterns.hpp"

namespace kiln {

namespace {

bool is_elemwise(const Node* n) { return n && dynamic_cast<const Elemwise*>(n->op.get()); }

// Whether n is a sum or mean that fuse_reduction accumulates inside the pass of its operand's group.
bool reduces_in_the_pass(const FunctionGraph& graph, const Node& n) {
  const auto* r = dynamic_cast<const Reduce*>(n.op.get());
  if (!r) return false;
  const Var& in = n.inputs[0];
  return (r->kind() == ReduceKind::sum || r->kind() == ReduceKind::mean) && is_float(in.dtype()) &&
         Composite::fusable_axes(r->axes(), in.ndim()) && pattern::live_clients(graph, in) == 1;
}

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

// A group of elementwise nodes and those of its members (besides the root) whose results are
// also read outside it: the fused op writes them as extra outputs.
struct Group {
  Node* root;
  std::vector<Node*> members;
  std::vector<Node*> read_outside;
};

// Grows the group of root backwards: a producer joins when it is elementwise and computes in the
// root's shape (same broadcast pattern, so no value is recomputed per broadcast element). Its
// result may also be read outside the group (by the graph's outputs, or by nodes after the root in
// the topological order `position`), and is then written as an extra output: every edge out of a
// group then leads to a later position than its root, and every edge into it from an earlier one,
// so the fused graph keeps that order and no group can come to depend on itself, through others
// or not. A fused reduction keeps one output: a root whose sum will accumulate in its pass takes
// only producers read inside the group. Nor do groups of a graph with an ifelse take extra
// outputs: a root only one branch needs would run whenever its extra output is needed elsewhere,
// and a branch not taken may fail (the shapes of its gradient are the other branch's).
Group grow_group(const FunctionGraph& graph, Node* root, const std::unordered_set<Node*>& taken,
                 const std::unordered_map<const Node*, size_t>& position, bool has_branches) {
  Group group{root, {root}, {}};
  std::unordered_set<Node*> members{root};
  const Type& shape_type = root->outputs[0]->type;
  const size_t root_position = position.at(root);
  bool extra_outputs = !has_branches;
  for (auto [reader, i] : graph.clients(root->outputs[0].get()))
    extra_outputs = extra_outputs && !(reader && reduces_in_the_pass(graph, *reader));
  bool grew = true;
  while (grew) {
    grew = false;
    for (size_t m = 0; m < group.members.size(); ++m)
      for (const Var& in : group.members[m]->inputs) {
        Node* p = in.get()->owner;
        if (!is_elemwise(p) || members.count(p) || taken.count(p)) continue;
        if (p->outputs[0]->type.broadcastable != shape_type.broadcastable) continue;
        bool read_by_output = false;
        const auto readers = live_readers(graph, in.get(), read_by_output);
        bool read_outside = read_by_output, may_cycle = false;
        for (Node* r : readers) {
          if (members.count(r)) continue;
          read_outside = true;
          const auto at = position.find(r);  // absent: a reader the outputs do not need, kept out as before
          may_cycle = may_cycle || at == position.end() || at->second < root_position;
        }
        if (may_cycle || (read_outside && !extra_outputs)) continue;
        group.members.push_back(p);
        members.insert(p);
        if (read_outside) group.read_outside.push_back(p);
        grew = true;
      }
  }
  return group;
}

ScalarInstruction instruction_of(const Node& n, const std::vector<int>& args) {
  const auto& e = static_cast<const Elemwise&>(*n.op);
  return {e.scalar_op(), n.outputs[0]->type.dtype, args, n.origin()};
}

// The program of a group (topological order, root last) over its external inputs, and the
// registers of the members read outside it.
struct GroupProgram {
  std::vector<Var> inputs;
  std::vector<ScalarInstruction> program;
  std::vector<int> extra_outputs;
};

GroupProgram program_of(const Group& group) {
  Node* root = group.root;
  std::unordered_set<const Node*> members(group.members.begin(), group.members.end());
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
  std::vector<int> extra_outputs;
  for (Node* n : group.read_outside) extra_outputs.push_back(reg.at(n->outputs[0].get()));
  return {inputs, program, extra_outputs};
}

int64_t fuse_elementwise(FunctionGraph& graph) {
  std::vector<Node*> order = graph.toposort();
  std::unordered_map<const Node*, size_t> position;
  for (size_t i = 0; i < order.size(); ++i) position[order[i]] = i;
  const bool has_branches =
      std::any_of(order.begin(), order.end(), [](const Node* n) { return dynamic_cast<const IfElse*>(n->op.get()) != nullptr; });
  std::unordered_set<Node*> taken;
  std::vector<Group> groups;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    Node* root = *it;
    if (!is_elemwise(root) || taken.count(root)) continue;
    Group group = grow_group(graph, root, taken, position, has_branches);
    taken.insert(group.members.begin(), group.members.end());
    if (group.members.size() >= 2) groups.push_back(std::move(group));
  }
  for (const Group& group : groups) {
    GroupProgram g = program_of(group);
    auto op = std::make_shared<Composite>(static_cast<int>(g.inputs.size()), std::move(g.program), group.root->outputs[0]->type,
                                          std::nullopt, std::move(g.extra_outputs));
    const std::vector<Var> outputs = apply(op, g.inputs, group.root->loc);
    graph.replace(group.root->output(0), outputs[0], "fuse_elementwise");
    for (size_t e = 0; e < group.read_outside.size(); ++e)
      graph.replace(group.read_outside[e]->output(0), outputs[e + 1], "fuse_elementwise");
  }
  return static_cast<int64_t>(groups.size());
}

// sum or mean of an elementwise result -> the result accumulated inside the fused pass
std::vector<Var> fuse_reduction(FunctionGraph& graph, Node& n) {
  const auto& r = static_cast<const Reduce&>(*n.op);
  const Var& in = n.inputs[0];
  if (!reduces_in_the_pass(graph, n)) return {};
  const Node* producer = in.get()->owner;
  if (!producer) return {};
  std::vector<Var> inputs;
  std::vector<ScalarInstruction> program;
  if (const auto* c = dynamic_cast<const Composite*>(producer->op.get())) {
    if (c->reduction() || producer->outputs.size() > 1) return {};
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

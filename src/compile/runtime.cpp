#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include "compile/plan.hpp"
#include "compile/program.hpp"
#include "exec/backend.hpp"
#include "exec/run_node.hpp"
#include "graph/op.hpp"
#include "ops/ifelse.hpp"
#include "tensor/handles.hpp"
#include "tensor/small_vector.hpp"

namespace kiln {

namespace {

// Where each node's value is needed: everywhere, or only when one branch of an ifelse is taken,
// that is, when every path from the node to the results passes through that branch's values.
// Branches nest (an ifelse within a branch), so they form a tree; a node belongs to the innermost
// branch it is exclusive to. A node that sides of several ifelses read (on different conditions,
// at any depth below the branch holding them all) belongs to a guard: a branch beside them, run
// when any of those sides will be taken (Theano computes such a value on demand). Found in one
// pass from the results back, each node's place being the branch or guard that holds exactly
// its readers: cost linear in the graph times the nesting depth.
struct BranchTree {
  static constexpr int kEverywhere = -1;
  struct Branch {
    int parent;  // the branch its ifelse (or the guard) is in
    int depth;
    // A side of an ifelse: taken when `condition` reads as `when`; `other` is the other side. A
    // guard has no condition: it runs when any of its members (sides below its parent) is taken.
    const Variable* condition = nullptr;
    bool when = true;
    int other = kEverywhere;
    std::vector<int> members;
  };
  std::vector<Branch> branches;
  // By the node's position in the order emitted (Node::position); empty when there is no ifelse.
  std::vector<int> place;
  std::vector<std::pair<int, int>> sides;  // an ifelse's (then, else) branches

  int place_of(const Node* n) const { return place.empty() ? kEverywhere : place[static_cast<size_t>(n->position)]; }
  int depth(int b) const { return b == kEverywhere ? 0 : branches[static_cast<size_t>(b)].depth; }
  int parent(int b) const { return branches[static_cast<size_t>(b)].parent; }
  bool is_guard(int b) const { return b != kEverywhere && !branches[static_cast<size_t>(b)].condition; }
  // The innermost branch holding both (kEverywhere at the top).
  int common(int a, int b) const {
    while (depth(a) > depth(b)) a = parent(a);
    while (depth(b) > depth(a)) b = parent(b);
    while (a != b) a = parent(a), b = parent(b);
    return a;
  }
  bool within(int b, int ancestor) const {
    while (depth(b) > depth(ancestor)) b = parent(b);
    return b == ancestor;
  }
  // The child of `branch` that holds place b, at any depth (kEverywhere where b is `branch` itself
  // or outside it).
  int child_holding(int b, int branch) const {
    while (b != kEverywhere && parent(b) != branch) b = parent(b);
    return b;
  }
  // The branch of an ifelse's then or else side (kEverywhere for any other node).
  int branch_of_ifelse(const Node* n, bool then_side) const {
    if (sides.empty()) return kEverywhere;
    const auto& [then_branch, else_branch] = sides[static_cast<size_t>(n->position)];
    return then_side ? then_branch : else_branch;
  }
};

// The branches a node's readers need it in, none within another: one (its place), or several
// (a guard's members), sorted.
using Demand = SmallVector<int, 2>;

// A guard stands for at most this many sides; a value more sides read runs in the branch holding them.
constexpr size_t kMostGuardMembers = 8;

// What a side of an ifelse stands for where an enclosing side already decided its condition the
// same way (an ifelse on c inside the then side of another on c, as gradients build): its branch,
// which always takes it. (A side such an enclosing side rules out stays as it is: what it reads
// must still come before it in the program.)
int decided(int b, const BranchTree& tree) {
  while (b != BranchTree::kEverywhere) {
    const BranchTree::Branch& side = tree.branches[static_cast<size_t>(b)];
    if (!side.condition) return b;
    int outer = side.parent;
    while (outer != BranchTree::kEverywhere && tree.branches[static_cast<size_t>(outer)].condition != side.condition)
      outer = tree.parent(outer);
    if (outer == BranchTree::kEverywhere || tree.branches[static_cast<size_t>(outer)].when != side.when) return b;
    b = side.parent;
  }
  return b;
}

// The demand of a node that already has `demand` and is also read in `branch`. A branch within
// another adds nothing; both sides of one ifelse stand for the branch that ifelse is in.
void add_reader(Demand& demand, int branch, const BranchTree& tree) {
  if (std::find(demand.begin(), demand.end(), branch) == demand.end()) demand.push_back(branch);
  for (bool changed = true; changed;) {
    changed = false;
    Demand sides;
    for (int b : demand)
      if (const int d = decided(b, tree); std::find(sides.begin(), sides.end(), d) == sides.end()) sides.push_back(d);
    if (std::find(sides.begin(), sides.end(), BranchTree::kEverywhere) != sides.end()) {
      demand = {BranchTree::kEverywhere};
      return;
    }
    demand.clear();
    for (int b : sides)
      if (std::none_of(sides.begin(), sides.end(), [&](int other) { return other != b && tree.within(b, other); }))
        demand.push_back(b);
    if (demand.size() <= 1) return;
    for (int b : demand) {
      const int other = tree.branches[static_cast<size_t>(b)].other;
      if (other == BranchTree::kEverywhere || std::find(demand.begin(), demand.end(), other) == demand.end()) continue;
      Demand merged{tree.parent(b)};
      for (int s : demand)
        if (s != b && s != other) merged.push_back(s);
      demand = merged;
      changed = true;
      break;
    }
    if (changed) continue;
    // Sides below both sides of one ifelse: a guard for them would run on nearly every way
    // through, and the conditions deeper down, which would spare it, are computed inside the
    // branches; the node runs in the branch holding them, and its own readers' conditions there.
    int meet = demand[0];
    for (int b : demand) meet = tree.common(meet, b);
    bool both_ways = demand.size() > kMostGuardMembers;
    for (int b : demand) {
      const int other = tree.branches[static_cast<size_t>(tree.child_holding(b, meet))].other;
      both_ways = both_ways || std::any_of(demand.begin(), demand.end(), [&](int c) { return tree.child_holding(c, meet) == other; });
    }
    if (both_ways) demand = {meet};
  }
  std::sort(demand.begin(), demand.end());
}

// The order's nodes carry their positions in it (Node::position).
BranchTree branch_tree(const std::vector<Node*>& order, const std::vector<Var>& results) {
  BranchTree tree;
  const auto is_ifelse = [](const Node* n) { return dynamic_cast<const IfElse*>(n->op.get()) != nullptr; };
  if (std::none_of(order.begin(), order.end(), is_ifelse)) return tree;  // every node is needed everywhere
  tree.place.assign(order.size(), BranchTree::kEverywhere);
  tree.sides.assign(order.size(), {BranchTree::kEverywhere, BranchTree::kEverywhere});
  std::vector<Demand> demands(order.size());
  // Ifelses on one condition, in one branch, share their branches: what only their then values
  // need runs when the condition holds, whichever of them reads it.
  std::map<std::pair<const Variable*, int>, std::pair<int, int>> by_condition;
  std::map<std::vector<int>, int> guards;  // by parent and members
  auto place_of = [&](const Demand& demand) {
    if (demand.size() == 1) return demand[0];
    int parent = demand[0];
    for (int b : demand) parent = tree.common(parent, b);
    std::vector<int> key{parent};
    key.insert(key.end(), demand.begin(), demand.end());
    auto [guard, fresh] = guards.try_emplace(std::move(key), static_cast<int>(tree.branches.size()));
    if (fresh) tree.branches.push_back({parent, tree.depth(parent) + 1, nullptr, true, BranchTree::kEverywhere,
                                        std::vector<int>(demand.begin(), demand.end())});
    return guard->second;
  };
  for (const Var& r : results)
    if (const Node* n = r.get()->owner) demands[static_cast<size_t>(n->position)] = {BranchTree::kEverywhere};
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const Node* n = *it;
    const Demand& demand = demands[static_cast<size_t>(n->position)];
    const int here = demand.empty() ? BranchTree::kEverywhere : place_of(demand);
    tree.place[static_cast<size_t>(n->position)] = here;
    const auto* op = dynamic_cast<const IfElse*>(n->op.get());
    std::pair<int, int> own{here, here};
    if (op) {
      const Variable* condition = n->inputs[0].get();
      auto [sides, fresh] = by_condition.try_emplace({condition, here});
      if (fresh) {
        const int depth = tree.depth(here) + 1, then_side = static_cast<int>(tree.branches.size());
        tree.branches.push_back({here, depth, condition, true, then_side + 1, {}});
        tree.branches.push_back({here, depth, condition, false, then_side, {}});
        sides->second = {then_side, then_side + 1};
      }
      own = sides->second;
      tree.sides[static_cast<size_t>(n->position)] = own;
    }
    for (size_t i = 0; i < n->inputs.size(); ++i) {
      const Node* producer = n->inputs[i].get()->owner;
      if (!producer) continue;
      const int edge = !op || i == 0 ? here : i <= static_cast<size_t>(op->n()) ? own.first : own.second;
      add_reader(demands[static_cast<size_t>(producer->position)], edge, tree);
    }
  }
  return tree;
}

}  // namespace

std::shared_ptr<const Executable> Executables::of(const Node& node) {
  if (const auto* made = made_.find(&node)) return *made;
  std::shared_ptr<const Executable> executable = cpu_backend().executable(node, context_);
  made_.try_emplace(&node, executable);
  return executable;
}

namespace {

// An instruction while the program is emitted, before its lists are packed.
struct Draft {
  Instruction ins;
  SmallVector<int, 4> inputs, release_after;
  SmallVector<int, 2> outputs;
  SmallVector<uint8_t, 2> output_is_view;
  SmallVector<DType, 2> output_dtypes;
  std::vector<std::pair<int, int>> views, inplace;
  std::vector<int> shape_only_inputs, value_inputs;
  bool may_fail_on_values = false, checks_values_before_writing = false;
  int ifelse_pairs = 0;
};

// Packs the drafts' lists into the program's arrays and points the instructions at them.
void pack(Program& p, std::vector<Draft>& drafts) {
  size_t operands = 0, outputs = 0;
  for (const Draft& d : drafts) {
    operands += d.inputs.size() + d.outputs.size() + d.release_after.size();
    outputs += d.outputs.size();
  }
  size_t pairs = 0, ints = 0;
  for (const Draft& d : drafts) {
    pairs += d.views.size() + d.inplace.size();
    ints += d.shape_only_inputs.size() + d.value_inputs.size();
  }
  p.operand_slots.reserve(operands);
  p.view_flags.reserve(outputs);
  p.dtypes.reserve(outputs);
  p.trait_pairs.reserve(pairs);
  p.trait_ints.reserve(ints);
  p.traits.clear();
  // Each list appended where the arrays' reserved room keeps every span taken before valid.
  auto append = [](auto& array, const auto& list) {
    const size_t at = array.size();
    array.insert(array.end(), list.begin(), list.end());
    return std::span<const typename std::decay_t<decltype(array)>::value_type>(array.data() + at, list.size());
  };
  for (const Draft& d : drafts)
    p.traits.push_back({append(p.trait_pairs, d.views), append(p.trait_pairs, d.inplace),
                        append(p.trait_ints, d.shape_only_inputs), append(p.trait_ints, d.value_inputs),
                        d.may_fail_on_values, d.checks_values_before_writing, d.ifelse_pairs});
  struct Extent {
    size_t inputs, outputs, release, first_output;
  };
  std::vector<Extent> extents;
  for (const Draft& d : drafts) {
    const Extent e{p.operand_slots.size(), p.operand_slots.size() + d.inputs.size(),
                   p.operand_slots.size() + d.inputs.size() + d.outputs.size(), p.view_flags.size()};
    p.operand_slots.insert(p.operand_slots.end(), d.inputs.begin(), d.inputs.end());
    p.operand_slots.insert(p.operand_slots.end(), d.outputs.begin(), d.outputs.end());
    p.operand_slots.insert(p.operand_slots.end(), d.release_after.begin(), d.release_after.end());
    p.view_flags.insert(p.view_flags.end(), d.output_is_view.begin(), d.output_is_view.end());
    p.dtypes.insert(p.dtypes.end(), d.output_dtypes.begin(), d.output_dtypes.end());
    extents.push_back(e);
  }
  p.code.clear();
  for (size_t k = 0; k < drafts.size(); ++k) {
    Instruction ins = std::move(drafts[k].ins);
    const Extent& e = extents[k];
    const Draft& d = drafts[k];
    ins.inputs = {p.operand_slots.data() + e.inputs, d.inputs.size()};
    ins.outputs = {p.operand_slots.data() + e.outputs, d.outputs.size()};
    ins.release_after = {p.operand_slots.data() + e.release, d.release_after.size()};
    ins.output_is_view = {p.view_flags.data() + e.first_output, d.outputs.size()};
    ins.output_dtypes = {p.dtypes.data() + e.first_output, d.outputs.size()};
    p.code.push_back(std::move(ins));
  }
}

}  // namespace

SlotNumbering::SlotNumbering(const std::vector<Var>& inputs, const std::vector<Var>& results)
    : depth_first(topological_order_of_own(results)) {
  auto number = [&](const Variable* v) {
    const int next = static_cast<int>(slot_vars.size());
    if (auto [slot, fresh] = slot_of.try_emplace(v, next); !fresh) return *slot;
    slot_vars.push_back(v);
    if (v->constant) constant_slots.push_back({next, *v->constant});
    if (v->shared) shared_slots.push_back({next, v->shared.get()});
    return next;
  };
  for (const Var& in : inputs) input_slots.push_back(number(in.get()));
  for (const Node* n : depth_first) {
    for (const Var& v : n->inputs) number(v.get());
    for (const auto& v : n->outputs) number(v.get());
  }
  for (const Var& r : results) number(r.get());
}

int SlotNumbering::of(const Variable* v) const {
  if (const int* slot = slot_of.find(v)) return *slot;
  throw Error("kiln internal error: a value of the program has no slot (" + v->label() + ")");
}

Program emit_program(const SlotNumbering& numbering, const std::vector<Var>& results, Executables& executables,
                     std::vector<Node*> order) {
  Program p;
  p.n_slots = static_cast<int>(numbering.slot_vars.size());
  p.slot_vars = numbering.slot_vars;
  p.input_slots = numbering.input_slots;
  p.shared_slots = numbering.shared_slots;
  p.constant_slots = numbering.constant_slots;
  auto slot = [&](const Variable* v) { return numbering.of(v); };
  if (order.empty()) order = numbering.depth_first;
  for (size_t i = 0; i < order.size(); ++i) order[i]->position = static_cast<int32_t>(i);
  const BranchTree tree = branch_tree(order, results);

  std::vector<Draft> code;
  code.reserve(order.size());
  // By position: emitted already (read only where the program has ifelses).
  std::vector<uint8_t> emitted(tree.place.size(), 0);
  auto emit_node = [&](Node* n, bool conditional) {
    if (!emitted.empty()) emitted[static_cast<size_t>(n->position)] = 1;
    Draft d;
    d.ins.node = n;
    d.ins.executable = executables.of(*n);
    d.ins.conditional = conditional;
    d.output_is_view.assign(n->outputs.size(), 0);
    for (const Var& v : n->inputs) d.inputs.push_back(slot(v.get()));
    for (const auto& v : n->outputs) {
      d.outputs.push_back(slot(v.get()));
      d.output_dtypes.push_back(v->type.dtype);
    }
    const Op& op = *n->op;
    d.views = op.view_map();
    for (auto [out, in] : d.views) d.output_is_view[static_cast<size_t>(out)] = 1;
    d.inplace = op.inplace_options();
    d.shape_only_inputs = op.shape_only_inputs();
    d.value_inputs = op.needs_input_values();
    d.may_fail_on_values = op.may_fail_on_values();
    d.checks_values_before_writing = op.checks_values_before_writing();
    if (const auto* ifelse = dynamic_cast<const IfElse*>(&op)) d.ifelse_pairs = ifelse->n();
    code.push_back(std::move(d));
  };
  // Emits, in topological order, the nodes of one branch (or of the top level) and those of the
  // branches within it: an ifelse there brings its branches' nodes as two blocks: jump over the
  // first unless cond, run it, jump over the second.
  // The nodes placed directly in each branch, in order, the top level's apart; how many nodes
  // each branch holds, its own branches' included; and how many ifelses share each branch.
  std::vector<Node*> top;
  std::vector<std::vector<Node*>> direct(tree.branches.size());
  std::vector<std::vector<int>> children(tree.branches.size());
  std::vector<int> top_children;
  std::vector<size_t> held(tree.branches.size(), 0);
  std::vector<int> ifelses_on(tree.branches.size(), 0);
  for (Node* n : order) {
    const int b = tree.place_of(n);
    (b == BranchTree::kEverywhere ? top : direct[static_cast<size_t>(b)]).push_back(n);
    if (const int then_branch = tree.branch_of_ifelse(n, true); then_branch != BranchTree::kEverywhere) {
      ++ifelses_on[static_cast<size_t>(then_branch)];
      ++ifelses_on[static_cast<size_t>(tree.branch_of_ifelse(n, false))];
    }
  }
  for (size_t b = tree.branches.size(); b-- > 0;) {
    held[b] += direct[b].size();
    const int parent = tree.parent(static_cast<int>(b));
    if (parent == BranchTree::kEverywhere) {
      top_children.push_back(static_cast<int>(b));
      continue;
    }
    held[static_cast<size_t>(parent)] += held[b];
    children[static_cast<size_t>(parent)].push_back(static_cast<int>(b));
  }
  auto by_position = [](const Node* a, const Node* b) { return a->position < b->position; };
  std::function<void(int, std::vector<Node*>&)> collect = [&](int b, std::vector<Node*>& into) {
    into.insert(into.end(), direct[static_cast<size_t>(b)].begin(), direct[static_cast<size_t>(b)].end());
    for (int c : children[static_cast<size_t>(b)]) collect(c, into);
  };

  // Emits the nodes of a branch (or of the top level) in topological order, with the nodes of the
  // branches within it, each in the block of the first ifelse on its condition that needs it
  // (jump over the then block unless the condition holds, run it, jump over the else block): as
  // late as it may run, so that it holds no memory sooner. A branch only one ifelse reads is all
  // that ifelse's: its nodes come from the lists by branch, visited once however deep branches
  // nest. The nodes of a branch several ifelses share (on one condition) wait, and each ifelse
  // takes those its side reads and the others have not: `flat` blocks list such nodes of every
  // depth and are split again at each level.
  std::vector<int> waiting_in(tree.place.size(), -1);  // by position: the emit call a node waits in
  std::vector<int> placed_in(tree.place.size(), -1);   // by position: the emit call a node is placed in
  std::vector<int> seen_in(tree.place.size(), -1);     // by position: the last walk that reached a node
  int walks = 0;
  std::vector<uint8_t> has_guards(tree.branches.size() + 1, 0);  // by branch + 1 (the top level at 0)
  for (size_t g = 0; g < tree.branches.size(); ++g)
    if (tree.is_guard(static_cast<int>(g))) has_guards[static_cast<size_t>(tree.parent(static_cast<int>(g)) + 1)] = 1;
  int calls = 0;
  std::function<void(int, const std::vector<Node*>&, bool)> emit_block = [&](int branch, const std::vector<Node*>& block,
                                                                            bool flat) {
    const bool conditional = branch != BranchTree::kEverywhere;
    const int call = calls++;
    size_t waiting = 0;
    auto wait = [&](const Node* x) {
      waiting_in[static_cast<size_t>(x->position)] = call;
      ++waiting;
    };
    auto shared = [&](int b) { return ifelses_on[static_cast<size_t>(b)] > 1; };
    // The nodes of shared branches and of guards wait for the ifelses that read them.
    if (!flat)
      for (int c : conditional ? children[static_cast<size_t>(branch)] : top_children)
        if (shared(c) || tree.is_guard(c)) {
          std::vector<Node*> nodes;
          collect(c, nodes);
          for (const Node* x : nodes) wait(x);
        }
    // The waiting nodes one side of an ifelse reads, in order.
    auto needed_by = [&](const Node* n, size_t first, size_t count) {
      std::vector<Node*> found;
      std::vector<Node*> stack;
      for (size_t i = first; i < first + count; ++i) stack.push_back(n->inputs[i].get()->owner);
      while (!stack.empty()) {
        Node* x = stack.back();
        stack.pop_back();
        if (!x || waiting_in[static_cast<size_t>(x->position)] != call) continue;
        waiting_in[static_cast<size_t>(x->position)] = -1;
        --waiting;
        found.push_back(x);
        for (const Var& v : x->inputs) stack.push_back(v.get()->owner);
      }
      std::sort(found.begin(), found.end(), by_position);
      return found;
    };
    // One side's block: the waiting nodes it reads, or the whole branch when no other ifelse shares it.
    auto side = [&](const Node* n, bool then_side, size_t first, size_t count) {
      const int b = tree.branch_of_ifelse(n, then_side);
      if (flat || shared(b)) {
        std::vector<Node*> nodes = waiting > 0 ? needed_by(n, first, count) : std::vector<Node*>{};
        return std::function<void()>(nodes.empty() ? std::function<void()>() : [&, b, nodes] { emit_block(b, nodes, true); });
      }
      return held[static_cast<size_t>(b)] == 0 ? std::function<void()>()
                                               : [&, b] { emit_block(b, direct[static_cast<size_t>(b)], false); };
    };
    if (!tree.place.empty())
      for (const Node* n : block)
        if (tree.place_of(n) == branch) placed_in[static_cast<size_t>(n->position)] = call;
    // Whether a guard's condition can be read before the ifelses it guards: computed already, or
    // work of this block that needs no ifelse, which then runs now.
    auto ready = [&](const Variable* condition) {
      std::vector<Node*> pulled, stack{condition->owner};
      while (!stack.empty()) {
        Node* x = stack.back();
        stack.pop_back();
        if (!x || emitted[static_cast<size_t>(x->position)] ||
            std::find(pulled.begin(), pulled.end(), x) != pulled.end())
          continue;
        if (placed_in[static_cast<size_t>(x->position)] != call || dynamic_cast<const IfElse*>(x->op.get())) return false;
        pulled.push_back(x);
        for (const Var& v : x->inputs) stack.push_back(v.get()->owner);
      }
      std::sort(pulled.begin(), pulled.end(), by_position);
      for (Node* x : pulled) emit_node(x, conditional);
      return true;
    };
    // The ways down from `top` through which branch b is taken, each the sides it passes (a guard
    // passes through any of its members' ways); one empty way (always) past kMostWays.
    std::function<std::vector<std::vector<int>>(int, int)> ways_to = [&](int b, int top) {
      constexpr size_t kMostWays = 16;
      if (b == top) return std::vector<std::vector<int>>{{}};
      std::vector<std::vector<int>> ways = ways_to(tree.parent(b), top);
      if (!tree.is_guard(b)) {
        for (std::vector<int>& way : ways) way.push_back(b);
        return ways;
      }
      std::vector<std::vector<int>> through;
      for (int m : tree.branches[static_cast<size_t>(b)].members)
        for (const std::vector<int>& below : ways_to(m, tree.parent(b)))
          for (const std::vector<int>& above : ways) {
            if (through.size() == kMostWays) return std::vector<std::vector<int>>{{}};
            through.push_back(above);
            through.back().insert(through.back().end(), below.begin(), below.end());
          }
      return through;
    };
    // The work in guards (children of this branch) that an ifelse's sides read and no earlier
    // ifelse did: each guard's part in a block of its own before the ifelse's, jumped into when
    // any of the guard's sides will be taken, else over. A guard none of whose conditions can be
    // read yet (they read an ifelse of this block) runs whenever this block does.
    auto emit_guards_read_by = [&](const Node* n, size_t values) {
      std::vector<Node*> stack, found;
      const int walk = walks++;
      for (size_t i = 1; i <= 2 * values; ++i) stack.push_back(n->inputs[i].get()->owner);
      while (!stack.empty()) {
        Node* x = stack.back();
        stack.pop_back();
        if (!x || emitted[static_cast<size_t>(x->position)] || seen_in[static_cast<size_t>(x->position)] == walk) continue;
        seen_in[static_cast<size_t>(x->position)] = walk;
        const int child = tree.child_holding(tree.place_of(x), branch);
        if (child == BranchTree::kEverywhere) continue;
        if (tree.is_guard(child) && waiting_in[static_cast<size_t>(x->position)] == call) found.push_back(x);
        for (const Var& v : x->inputs) stack.push_back(v.get()->owner);
      }
      std::map<int, std::vector<Node*>> by_guard;
      for (Node* x : found) {
        by_guard[tree.child_holding(tree.place_of(x), branch)].push_back(x);
        waiting_in[static_cast<size_t>(x->position)] = -1;
        --waiting;
      }
      // A guard's work may read another's (whose sides include its own): that one goes first.
      std::vector<int> order_of_guards;
      while (order_of_guards.size() < by_guard.size()) {
        const size_t before = order_of_guards.size();
        for (const auto& [g, nodes] : by_guard) {
          if (std::find(order_of_guards.begin(), order_of_guards.end(), g) != order_of_guards.end()) continue;
          bool reads_waiting_guard = false;
          for (const Node* x : nodes)
            for (const Var& v : x->inputs) {
              const Node* y = v.get()->owner;
              if (!y || emitted[static_cast<size_t>(y->position)]) continue;
              const int other = tree.child_holding(tree.place_of(y), branch);
              reads_waiting_guard = reads_waiting_guard || (other != g && by_guard.count(other) &&
                                                            std::find(order_of_guards.begin(), order_of_guards.end(), other) == order_of_guards.end());
            }
          if (!reads_waiting_guard) order_of_guards.push_back(g);
        }
        if (order_of_guards.size() == before) throw Error("kiln internal error: the work of two guards reads each other's");
      }
      for (int g : order_of_guards) {
        std::vector<Node*>& nodes = by_guard[g];
        std::sort(nodes.begin(), nodes.end(), by_position);
        // Each side the guard runs for is taken when the conditions on the way down to it hold
        // (through a guard on the way: when one of its own ways holds). A condition that cannot be
        // read here (computed inside a branch) is left out of its way, which may then run the work
        // where that condition would not need it.
        std::vector<std::vector<int>> tests;
        bool always = false;
        for (std::vector<int>& way : ways_to(g, branch)) {
          std::vector<int> readable;
          for (int b : way)
            if (ready(tree.branches[static_cast<size_t>(b)].condition)) readable.push_back(b);
          always = always || readable.empty();
          tests.push_back(std::move(readable));
        }
        std::vector<size_t> into, to_next_side;
        if (!always)
          for (const std::vector<int>& test : tests) {
            for (size_t k : to_next_side) code[k].ins.target = static_cast<int>(code.size());
            to_next_side.clear();
            for (size_t j = 0; j < test.size(); ++j) {
              const BranchTree::Branch& side_branch = tree.branches[static_cast<size_t>(test[j])];
              const bool last = j + 1 == test.size();
              Draft check;
              check.ins.kind = Instruction::Kind::jump_if;
              check.ins.when = last ? side_branch.when : !side_branch.when;
              check.ins.conditional = conditional;
              check.inputs = {slot(side_branch.condition)};
              (last ? into : to_next_side).push_back(code.size());
              code.push_back(std::move(check));
            }
          }
        const size_t over = code.size();
        for (size_t k : to_next_side) code[k].ins.target = static_cast<int>(over);
        if (!always) {
          Draft jump_over;
          jump_over.ins.kind = Instruction::Kind::jump;
          jump_over.ins.conditional = conditional;
          code.push_back(std::move(jump_over));
        }
        for (size_t k : into) code[k].ins.target = static_cast<int>(code.size());
        emit_block(g, nodes, true);
        if (!always) code[over].ins.target = static_cast<int>(code.size());
      }
    };
    for (Node* n : block) {
      if (!emitted.empty() && emitted[static_cast<size_t>(n->position)]) continue;
      if (tree.place_of(n) != branch) {
        wait(n);
        continue;
      }
      std::function<void()> then_block, else_block;
      if (const auto* op = dynamic_cast<const IfElse*>(n->op.get())) {
        const size_t values = static_cast<size_t>(op->n());
        if (has_guards[static_cast<size_t>(branch + 1)]) emit_guards_read_by(n, values);
        then_block = side(n, true, 1, values);
        else_block = side(n, false, 1 + values, values);
      }
      if (then_block || else_block) {
        Draft skip_then;
        skip_then.ins.kind = Instruction::Kind::jump_if_false;
        skip_then.inputs = {slot(n->inputs[0].get())};
        skip_then.ins.conditional = conditional;
        const size_t jif = code.size();
        code.push_back(std::move(skip_then));
        if (then_block) then_block();
        Draft skip_else;
        skip_else.ins.kind = Instruction::Kind::jump;
        skip_else.ins.conditional = conditional;
        const size_t jmp = code.size();
        code.push_back(std::move(skip_else));
        code[jif].ins.target = static_cast<int>(code.size());
        if (else_block) else_block();
        code[jmp].ins.target = static_cast<int>(code.size());
      }
      emit_node(n, conditional);
    }
    if (waiting > 0) throw Error("kiln internal error: a node of a branch is needed by no ifelse on its condition");
  };
  emit_block(BranchTree::kEverywhere, top, false);
  for (const Var& r : results) p.result_slots.push_back(slot(r.get()));

  std::unordered_set<int> kept(p.result_slots.begin(), p.result_slots.end());
  // A value read inside a conditional block lives at least until the block's end, where both
  // paths meet; releasing it inside a block that may be skipped would leave it alive instead,
  // which is harmless, so the last reader in program order is enough.
  std::vector<int> last_reader(p.n_slots, -1);
  for (size_t i = 0; i < code.size(); ++i) {
    for (int s : code[i].inputs) last_reader[s] = static_cast<int>(i);
    for (int s : code[i].outputs) last_reader[s] = std::max(last_reader[s], static_cast<int>(i));
  }
  for (int s = 0; s < p.n_slots; ++s)
    if (last_reader[s] >= 0 && !kept.count(s)) code[last_reader[s]].release_after.push_back(s);
  pack(p, code);
  return p;
}

namespace {

bool has_nan_or_inf(const Tensor& t) {
  if (!is_float(t.dtype())) return false;
  for (double v : t.to_vector<double>())
    if (!std::isfinite(v)) return true;
  return false;
}

void check_op(const Instruction& ins, InputValues inputs, const std::vector<Tensor>& before, OutputValues outputs,
              bool nan_guard) {
  const Op& op = *ins.node->op;
  const std::string where = op.name() + " (" + ins.node->origin() + ")";
  // An input read for its shape alone may lie in memory the plan already gave to another value.
  const std::vector<int> shape_only = op.shape_only_inputs();
  auto elements_read = [&](size_t i) { return std::find(shape_only.begin(), shape_only.end(), static_cast<int>(i)) == shape_only.end(); };
  for (size_t i = 0; i < inputs.size(); ++i)
    if (elements_read(i) && inputs[i].defined() && inputs[i].to_vector<double>() != before[i].to_vector<double>() &&
        !(has_nan_or_inf(before[i])))
      throw Error("debug check: " + where + " modified its input " + std::to_string(i) + " " + inputs[i].str() +
                  ", which it does not declare it may overwrite");
  for (size_t o = 0; o < outputs.size(); ++o) {
    if (ins.output_is_view[o]) continue;
    for (size_t i = 0; i < inputs.size(); ++i)
      if (elements_read(i) && outputs[o].defined() && inputs[i].defined() && outputs[o].shares_memory(inputs[i]))
        throw Error("debug check: output " + std::to_string(o) + " of " + where + " shares memory with input " +
                    std::to_string(i) + ", but the op does not declare it as a view");
    if (nan_guard && has_nan_or_inf(outputs[o]))
      throw Error("debug check (nan_guard): " + where + " produced a NaN or an infinity in output " + std::to_string(o) +
                  " " + outputs[o].str() + " from inputs " + describe_values(inputs));
  }
}

// Puts in the output's slot the buffer it is written into: its place in the arena (a kept slot
// that still is that view is left as it is, and a warm call's is not even checked), the tensor of
// the input it overwrites in place outside the arena (a lent buffer, or one leaving the call), or
// a fresh allocation (of the planned shape, or of the shape known only now).
void place_output(const Instruction& ins, size_t o, const MemoryPlan& plan, const std::shared_ptr<Storage>& arena,
                  std::vector<Tensor>& slots, InputValues inputs, bool warm) {
  const int s = ins.outputs[o];
  const DType dtype = ins.output_dtypes[o];
  Tensor& slot = slots[s];
  if (plan.supplied[s]) return;  // the caller's tensor, already there
  if (plan.offset[s] >= 0) {
    if (warm && !ins.conditional && slot.defined() && !slot.is_disposed()) return;  // a branch may not have run last call
    const Shape& shape = *plan.shape[s];
    const int64_t offset = plan.offset[s] / static_cast<int64_t>(dtype_size(dtype));
    if (slot.defined() && !slot.is_disposed() && slot.storage() == arena && slot.dtype() == dtype &&
        slot.offset() == offset && slot.shape() == shape)
      return;
    slot = Tensor::view_of(arena, dtype, shape, contiguous_strides(shape), offset);
    return;
  }
  if (const int lent = plan.reuse_input[s]; lent >= 0 && slots[lent].is_contiguous() && slots[lent].dtype() == dtype) {
    slot = slots[lent];
    return;
  }
  slot = Tensor::empty(plan.shape[s] ? *plan.shape[s] : node_shapes(*ins.node, *ins.executable, inputs).outputs[o], dtype);
}

// The instruction's working memory: its planned place in the arena, or, where the plan could not
// size it (shapes known only when it runs, or no plan), a buffer allocated now.
std::span<std::byte> scratch_of(const Instruction& ins, size_t k, const MemoryPlan& plan, const std::shared_ptr<Storage>& arena,
                                InputValues inputs, std::shared_ptr<Storage>& unplanned_scratch) {
  if (plan.scratch_offset[k] >= 0)
    return {arena->data() + plan.scratch_offset[k], static_cast<size_t>(plan.scratch_bytes[k])};
  if (plan.scratch_offset[k] == kNoScratch) return {};
  int64_t bytes = 0;
  if (ins.executable->scratch_depends_on_values()) {
    bytes = ins.executable->scratch_bytes_of(inputs);
  } else {
    const NodeShapes shapes = node_shapes(*ins.node, *ins.executable, inputs);
    bytes = ins.executable->scratch_bytes(shapes.inputs, shapes.outputs);
  }
  if (bytes <= 0) return {};
  unplanned_scratch = cpu_backend().allocate(static_cast<size_t>(bytes));
  return {unplanned_scratch->data(), static_cast<size_t>(bytes)};
}

// How many instructions ahead the run loop fetches an instruction's executable and handles.
constexpr size_t kPrefetchAhead = 4;

// The first step fetches the executable and the handles of the instruction's slots; the second,
// a few instructions later, what the handles point at.
void prefetch_operands(const Instruction& ins, const std::vector<Tensor>& slots, bool handles) {
  if (!ins.executable) return;
  if (handles) __builtin_prefetch(ins.executable.get());
  else if (const void* also = ins.executable->also_reads()) __builtin_prefetch(also);
  for (std::span<const int> list : {ins.inputs, ins.outputs})
    for (int s : list) {
      if (handles) TensorHandles::prefetch_handle(slots[static_cast<size_t>(s)]);
      else TensorHandles::prefetch_geometry(slots[static_cast<size_t>(s)]);
    }
}

}  // namespace

std::string program_text(const Program& p) {
  std::string text;
  auto slots = [](std::span<const int> list) {
    std::string s;
    for (size_t i = 0; i < list.size(); ++i) s += (i ? ", s" : "s") + std::to_string(list[i]);
    return s;
  };
  for (size_t k = 0; k < p.code.size(); ++k) {
    const Instruction& ins = p.code[k];
    text += "  " + std::to_string(k) + ": ";
    if (ins.kind == Instruction::Kind::jump) text += "jump to " + std::to_string(ins.target);
    else if (ins.kind == Instruction::Kind::jump_if_false)
      text += "unless " + slots(ins.inputs) + " jump to " + std::to_string(ins.target);
    else if (ins.kind == Instruction::Kind::jump_if)
      text += std::string(ins.when ? "if " : "if not ") + slots(ins.inputs) + " jump to " + std::to_string(ins.target);
    else text += slots(ins.outputs) + " <- " + ins.node->op->name() + "(" + slots(ins.inputs) + ")   " + ins.node->origin();
    text += "\n";
  }
  return text;
}

// What the plan keeps (MemoryPlan::keeps_slot) is never released, nor kept inputs.
void RunBuffers::keep_for(const MemoryPlan& plan, std::span<const int> input_slots, size_t n_slots, bool keeps_arena_slots,
                          bool keeps_inputs) {
  if (keeps_inputs && kept_input.size() != n_slots) {
    kept_input.assign(n_slots, false);
    for (int s : input_slots) kept_input[static_cast<size_t>(s)] = true;
  }
  if (kept_set_for(plan, n_slots, keeps_arena_slots, keeps_inputs)) return;
  kept.assign(n_slots, 0);
  not_kept.clear();
  for (size_t s = 0; s < n_slots; ++s) {
    kept[s] = plan.keeps_slot(s, keeps_arena_slots) || (keeps_inputs && kept_input[s]);
    if (!kept[s]) not_kept.push_back(static_cast<int>(s));
  }
  kept_for = plan.id;
  kept_options = static_cast<uint8_t>(keeps_arena_slots | keeps_inputs << 1);
}

bool RunBuffers::kept_set_for(const MemoryPlan& plan, size_t n_slots, bool keeps_arena_slots, bool keeps_inputs) const {
  return kept_for == plan.id && kept_options == static_cast<uint8_t>(keeps_arena_slots | keeps_inputs << 1) && kept.size() == n_slots;
}

void RunBuffers::release(Tensor& slot, size_t s) {
  if (slot.defined() && TensorHandles::park(slot)) parked[s] = std::move(slot);
  slot = Tensor();
}

size_t next_instruction(const Program& program, size_t k, const std::vector<Tensor>& slots) {
  const Instruction& ins = program.code[k];
  if (ins.kind == Instruction::Kind::jump) return static_cast<size_t>(ins.target);
  if (ins.kind == Instruction::Kind::jump_if_false && !truth_of(slots[ins.inputs[0]])) return static_cast<size_t>(ins.target);
  if (ins.kind == Instruction::Kind::jump_if && truth_of(slots[ins.inputs[0]]) == ins.when) return static_cast<size_t>(ins.target);
  return k + 1;
}

void run_planned(const Program& p, const MemoryPlan& plan, std::vector<Tensor>& slots, std::shared_ptr<Storage> arena,
                 const RunOptions& options) {
  if (!arena && plan.uses_arena) {
    try {
      arena = Storage::allocate(static_cast<size_t>(plan.arena_bytes));
    } catch (const MemoryError& e) {
      std::string largest;
      if (const int s = plan.largest_in_arena; s >= 0 && p.slot_vars[s]->owner) {
        const Node& n = *p.slot_vars[s]->owner;
        largest = "; the largest is " + n.op->name() + "'s output " + dtype_name(p.slot_vars[s]->type.dtype) +
                  shape_str(*plan.shape[s]) + ", " + n.origin();
      }
      throw MemoryError(std::string(e.what()) + " for the arena that holds this call's planned temporaries" + largest);
    }
  }
#ifndef NDEBUG
  // Debug builds poison the arena (all bits set: NaN, -1): a plan that lets a value be read after
  // its region was reused, or before it was written, shows up as a wrong value.
  if (arena) std::memset(arena->data(), 0xFF, arena->nbytes());
#endif
  for (int s : plan.precomputed_slots)
    if (!options.warm || !slots[s].defined()) slots[s] = plan.value[s];
  std::vector<std::string>* failures = options.failures;
  if (failures) failures->assign(p.n_slots, std::string());
  auto failed = [&](int s) { return failures && !(*failures)[s].empty(); };
  // A warm run skips an instruction whose outputs view the arena only while the views the last
  // run made still stand: an op that cannot view every input (reshape of a value that is not
  // contiguous copies it) may have put a buffer of its own in the slot instead, which holds the
  // last run's values.
  auto views_stand = [&](const Instruction& ins) {
    return std::all_of(ins.outputs.begin(), ins.outputs.end(),
                       [&](int s) { return slots[s].defined() && !slots[s].is_disposed() && slots[s].storage() == arena; });
  };
  RunBuffers own_buffers;
  RunBuffers& buffers = options.buffers ? *options.buffers : own_buffers;
  std::vector<Tensor>& before = buffers.before;
  std::shared_ptr<Storage> unplanned_scratch;
  buffers.parked.resize(slots.size());
  buffers.keep_for(plan, p.input_slots, slots.size(), options.keeps_arena_slots, options.keeps_inputs);
  const uint8_t* kept = buffers.kept.data();
  auto release = [&](int s) {
    if (!kept[s]) buffers.release(slots[s], static_cast<size_t>(s));
  };
  const size_t n_code = p.code.size();
  for (size_t k = 0; k < n_code;) {
    const Instruction& ins = p.code[k];
    if (k + kPrefetchAhead < n_code) prefetch_operands(p.code[k + kPrefetchAhead], slots, true);
    if (k + 2 < n_code) prefetch_operands(p.code[k + 2], slots, false);
    if (ins.kind != Instruction::Kind::run) {
      // A condition that failed to compute reads as false: the ifelse fails, its else block and the
      // guards it needs run (what they compute is checked against what fails there).
      if (ins.kind != Instruction::Kind::jump && failed(ins.inputs[0]))
        k = ins.kind == Instruction::Kind::jump_if_false || !ins.when ? static_cast<size_t>(ins.target) : k + 1;
      else
        k = next_instruction(p, k, slots);
      continue;
    }
    if (const int f = plan.forwarded[k]; f >= 0) {
      slots[ins.outputs[0]] = slots[ins.inputs[static_cast<size_t>(f)]];
      if (failures) (*failures)[ins.outputs[0]] = (*failures)[ins.inputs[static_cast<size_t>(f)]];
    } else if (!plan.precomputed[k] && !(options.warm && plan.views_arena[k] && views_stand(ins))) {
      if (failures) {
        const auto failed_input = std::find_if(ins.inputs.begin(), ins.inputs.end(), failed);
        if (failed_input != ins.inputs.end()) {
          for (int s : ins.outputs) (*failures)[s] = (*failures)[*failed_input];
          for (int s : ins.release_after) release(s);
          ++k;
          continue;
        }
      }
      // The node reads its inputs and writes its outputs where they are, in the slots.
      const InputValues inputs(slots.data(), ins.inputs);
      const OutputValues outputs(slots.data(), ins.outputs);
      try {
        std::span<std::byte> scratch;
        try {
          for (size_t o = 0; o < ins.outputs.size(); ++o) {
            const int s = ins.outputs[o];
            if (!ins.output_is_view[o]) place_output(ins, o, plan, arena, slots, inputs, options.warm);
            else if (!slots[s].defined()) slots[s] = std::move(buffers.parked[s]);  // re-viewed in place
          }
          scratch = scratch_of(ins, k, plan, arena, inputs, unplanned_scratch);
        } catch (const Error& e) {
          e.rethrow_with(std::string(e.what()) + node_context(*ins.node, inputs));
        }
        if (options.checks) {
          before.clear();
          for (const Tensor& t : inputs) before.push_back(t.defined() ? t.clone() : Tensor());
          // Only what the op writes may trip the NaN guard: the buffers made for its outputs (in
          // the arena or allocated now, not lent) are cleared first, since a loop ending on until()
          // leaves the rows of the steps it did not take as they were.
          if (options.checks->nan_guard)
            for (size_t o = 0; o < ins.outputs.size(); ++o) {
              const int s = ins.outputs[o];
              const Tensor& out = slots[s];
              const auto overlaps = [&](const Tensor& in) { return in.defined() && out.shares_memory(in); };
              const bool made_for_it = plan.offset[s] >= 0 || (plan.reuse_input[s] < 0 && !plan.supplied[s]);
              if (!ins.output_is_view[o] && made_for_it && std::none_of(inputs.begin(), inputs.end(), overlaps))
                std::memset(out.raw_data(), 0, out.nbytes());
            }
        }
        const auto start = options.times ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
        run_node(*ins.node, *ins.executable, inputs, outputs, scratch);
        if (InstructionTimes* times = options.times) {
          times->seconds[k] += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
          for (const Tensor& t : outputs) times->bytes[k] += static_cast<int64_t>(t.nbytes());
          ++times->runs[k];
        }
        if (options.checks) check_op(ins, inputs, before, outputs, options.checks->nan_guard);
      } catch (const Error& e) {
        if (!failures) throw;
        for (int s : ins.outputs) {
          (*failures)[s] = e.what();
          slots[s] = Tensor();
        }
      }
    }
    for (int s : ins.release_after) release(s);
    ++k;
  }
  before.clear();
}

}  // namespace kiln

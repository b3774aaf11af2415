#include "graph/function_graph.hpp"

#include <algorithm>
#include <atomic>
#include <unordered_set>

#include "graph/op.hpp"

namespace kiln {

std::vector<Node*> topological_order(const std::vector<Var>& outputs, size_t size_hint) {
  std::vector<Node*> order;
  std::unordered_set<Node*> done;
  order.reserve(size_hint);
  done.reserve(size_hint);
  std::vector<std::pair<Node*, size_t>> stack;
  for (const Var& out : outputs) {
    Node* root = out.get()->owner;
    if (!root || done.count(root)) continue;
    stack.push_back({root, 0});
    done.insert(root);
    while (!stack.empty()) {
      auto& [node, next] = stack.back();
      if (next < node->inputs.size()) {
        Node* dep = node->inputs[next++].get()->owner;
        if (dep && !done.count(dep)) {
          done.insert(dep);
          stack.push_back({dep, 0});
        }
      } else {
        order.push_back(node);
        stack.pop_back();
      }
    }
  }
  return order;
}

namespace {

uint64_t next_walk_mark() {
  static std::atomic<uint64_t> walks{0};
  return ++walks;
}

}  // namespace

std::vector<Node*> topological_order_of_own(const std::vector<Var>& outputs, size_t size_hint) {
  const uint64_t mark = next_walk_mark();
  std::vector<Node*> order;
  order.reserve(size_hint);
  std::vector<std::pair<Node*, size_t>> stack;
  for (const Var& out : outputs) {
    Node* root = out.get()->owner;
    if (!root || root->walk_mark == mark) continue;
    stack.push_back({root, 0});
    root->walk_mark = mark;
    while (!stack.empty()) {
      auto& [node, next] = stack.back();
      if (next < node->inputs.size()) {
        Node* dep = node->inputs[next++].get()->owner;
        if (dep && dep->walk_mark != mark) {
          dep->walk_mark = mark;
          stack.push_back({dep, 0});
        }
      } else {
        order.push_back(node);
        stack.pop_back();
      }
    }
  }
  return order;
}

FunctionGraph::FunctionGraph(std::vector<Var> inputs, const std::vector<Var>& outputs,
                             const std::vector<std::pair<Var, Var>>& givens)
    : inputs_(std::move(inputs)) {
  std::unordered_map<const Variable*, Var> map;
  for (const auto& [var, replacement] : givens) {
    // A replacement that reads what it replaces would be replaced within itself again and again.
    if (replacement.get() != var.get())
      for (const Node* n : topological_order({replacement}))
        for (const Var& in : n->inputs)
          if (in.get() == var.get())
            throw TypeError("function: the givens replace '" + var.get()->label() + "' by a graph that reads '" +
                            var.get()->label() + "' itself (" + n->op->name() + ", " + n->origin() +
                            "); a replacement may not depend on the variable it replaces: replace it by a new input "
                            "and compute the expression from that");
    map[var.get()] = replacement;
  }
  // A replacement is itself a graph whose clone stands in for the replaced variable: follow the
  // chain replaced -> replacement -> its clone.
  auto lookup = [&](const Var& v) -> Var {
    Var m = v;
    for (size_t hops = 0; hops <= givens.size() + 1; ++hops) {
      auto it = map.find(m.get());
      if (it == map.end() || it->second.same(m)) return m;
      m = it->second;
    }
    throw TypeError("function: the givens form a cycle (a variable is replaced by a graph that depends on itself)");
  };
  // Replacements first, so that their clones exist before any node that reads a replaced variable.
  std::vector<Var> roots;
  for (const auto& g : givens) roots.push_back(g.second);
  roots.insert(roots.end(), outputs.begin(), outputs.end());
  for (Node* node : topological_order(roots)) {
    auto clone = std::allocate_shared<Node>(SlabAllocator<Node>{});
    clone->op = node->op;
    for (const Var& in : node->inputs) clone->inputs.push_back(lookup(in));
    clone->loc = node->loc;
    clone->derivation = node->derivation;
    for (const auto& out : node->outputs) {
      auto v = std::make_unique<Variable>(*out);
      v->owner = clone.get();
      clone->outputs.push_back(std::move(v));
    }
    for (size_t i = 0; i < node->outputs.size(); ++i) {
      const Variable* original = node->outputs[i].get();
      if (!map.count(original)) map[original] = clone->output(i);
    }
  }
  for (const Var& out : outputs) outputs_.push_back(lookup(out));
  for (size_t i = 0; i < outputs_.size(); ++i) {
    import(outputs_[i]);
    clients_[outputs_[i].get()].push_back({nullptr, static_cast<int>(i)});
  }
}

std::vector<Node*> FunctionGraph::toposort() const {
  if (order_version_ != version_) {
    order_ = topological_order_of_own(outputs_, nodes_.size());
    order_version_ = version_;
  }
  return order_;
}

std::vector<Node*> FunctionGraph::changed_since(uint64_t version) const {
  // The live nodes stamped after `version` are marked `candidate`; a depth-first walk that only
  // enters candidates (re-marking them `placed`) lists them inputs first.
  const uint64_t candidate = next_walk_mark(), placed = next_walk_mark();
  std::vector<Node*> roots;
  for (Node* n : stamped_)
    if (n->changed_at > version && n->walk_mark != candidate && nodes_.contains(n)) {
      n->walk_mark = candidate;
      roots.push_back(n);
    }
  std::vector<Node*> order;
  order.reserve(roots.size());
  std::vector<std::pair<Node*, size_t>> stack;
  for (Node* root : roots) {
    if (root->walk_mark != candidate) continue;
    root->walk_mark = placed;
    stack.push_back({root, 0});
    while (!stack.empty()) {
      auto& [node, next] = stack.back();
      if (next < node->inputs.size()) {
        Node* dep = node->inputs[next++].get()->owner;
        if (dep && dep->walk_mark == candidate) {
          dep->walk_mark = placed;
          stack.push_back({dep, 0});
        }
      } else {
        order.push_back(node);
        stack.pop_back();
      }
    }
  }
  return order;
}

void FunctionGraph::stamp(Node* node) {
  node->changed_at = version_;
  stamped_.push_back(node);
}

std::vector<Variable*> FunctionGraph::leaves() const {
  std::vector<Variable*> out;
  std::unordered_set<Variable*> seen;
  auto visit = [&](const Var& v) {
    if (!v.get()->owner && seen.insert(v.get()).second) out.push_back(v.get());
  };
  for (Node* n : toposort())
    for (const Var& in : n->inputs) visit(in);
  for (const Var& o : outputs_) visit(o);
  return out;
}

void FunctionGraph::import(const Var& root) {
  // Only the new part: the walk stops at nodes the graph already knows.
  std::vector<Node*> stack;
  if (Node* n = root.get()->owner; n && !nodes_.contains(n)) stack.push_back(n);
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    if (!nodes_.try_emplace(n, n->shared_from_this()).second) continue;
    stamp(n);
    for (size_t i = 0; i < n->inputs.size(); ++i) {
      clients_[n->inputs[i].get()].push_back({n, static_cast<int>(i)});
      if (Node* p = n->inputs[i].get()->owner; p && !nodes_.contains(p)) stack.push_back(p);
    }
  }
}

const std::vector<std::pair<Node*, int>>& FunctionGraph::clients(const Variable* v) const {
  static const std::vector<std::pair<Node*, int>> none;
  const auto* readers = clients_.find(v);
  return readers ? *readers : none;
}

void FunctionGraph::drop_if_unread(Node* node) {
  // Iterative: dropping one node may drop a whole chain behind it.
  std::vector<Node*> pending{node};
  while (!pending.empty()) {
    Node* n = pending.back();
    pending.pop_back();
    auto* live = n ? nodes_.find(n) : nullptr;
    if (!live) continue;
    bool read = false;
    for (const auto& out : n->outputs) read = read || clients_.contains(out.get());
    if (read) continue;
    dropped_.push_back(std::move(*live));
    nodes_.erase(n);
    for (size_t i = 0; i < n->inputs.size(); ++i) {
      auto* readers = clients_.find(n->inputs[i].get());
      if (!readers) continue;
      readers->erase(std::find(readers->begin(), readers->end(), std::pair<Node*, int>(n, static_cast<int>(i))));
      if (!readers->empty()) continue;
      clients_.erase(n->inputs[i].get());  // an empty list is never kept: a listed variable has readers
      pending.push_back(n->inputs[i].get()->owner);
    }
  }
}

void FunctionGraph::replace(const Var& old_var, const Var& new_var, const std::string& reason) {
  const Type &a = old_var.type(), &b = new_var.type();
  bool compatible = a.dtype == b.dtype && a.ndim() == b.ndim();
  for (int64_t d = 0; compatible && d < a.ndim(); ++d) compatible = !a.broadcastable[d] || b.broadcastable[d];
  if (!compatible)
    throw TypeError("FunctionGraph::replace" + (reason.empty() ? std::string() : " (" + reason + ")") + ": " + a.str() +
                    " cannot be replaced by " + b.str());
  if (old_var.same(new_var)) return;
  ++version_;
  import(new_var);
  for (const Var* v : {&old_var, &new_var})
    if (Node* owner = v->get()->owner) stamp(owner);
  if (auto* old_readers = clients_.find(old_var.get())) {
    std::vector<std::pair<Node*, int>> readers = std::move(*old_readers);
    clients_.erase(old_var.get());
    auto& target = clients_[new_var.get()];
    for (auto [node, i] : readers) {
      if (node) {
        node->inputs[i] = new_var;
        stamp(node);
      } else {
        outputs_[i] = new_var;
      }
      target.push_back({node, i});
    }
    // old_var has no reader left: its node goes unless another of its outputs is read.
    drop_if_unread(old_var.get()->owner);
  }
  if (on_replace) on_replace(old_var, new_var, reason);
}

void FunctionGraph::prune() {
  dropped_.clear();
  stamped_.clear();
}

std::vector<Var> rebuild(const std::vector<Var>& roots, std::unordered_map<const Variable*, Var> replace) {
  auto mapped = [&](const Var& v) {
    const auto it = replace.find(v.get());
    return it == replace.end() ? v : it->second;
  };
  for (Node* n : topological_order(roots)) {
    const bool replaced = std::any_of(n->outputs.begin(), n->outputs.end(), [&](const auto& o) { return replace.count(o.get()) > 0; });
    if (replaced) continue;  // what replaces its outputs stands, whatever it reads
    bool reads_replaced = false;
    std::vector<Var> inputs;
    for (const Var& in : n->inputs) {
      inputs.push_back(mapped(in));
      reads_replaced = reads_replaced || !inputs.back().same(in);
    }
    if (!reads_replaced) continue;
    const std::vector<Var> outs = apply(n->op, inputs, n->loc);
    for (size_t o = 0; o < outs.size(); ++o) replace[n->outputs[o].get()] = outs[o];
  }
  std::vector<Var> out;
  for (const Var& r : roots) out.push_back(mapped(r));
  return out;
}


}  // namespace kiln

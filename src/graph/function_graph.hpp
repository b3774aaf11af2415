#pragma once
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "graph/node.hpp"
#include "tensor/flat_map.hpp"

namespace kiln {

// A private copy of the graph between inputs and outputs, owned by one compiled function: nodes
// are cloned, leaves (inputs, constants, shared variables) are kept. givens replace variables
// (by identity) before cloning. Rewrites work on this copy, never on the user's graph.
//
// It knows each variable's readers, so that a replacement costs the number of readers, not the
// size of the graph, and it drops a node as soon as no output depends on it any more (its readers
// are counted, as references are): the readers of a variable are always exactly the live ones.
// Dropped nodes stay alive until prune(), so that a rewrite pass may hold on to them meanwhile.
class FunctionGraph {
 public:
  FunctionGraph(std::vector<Var> inputs, const std::vector<Var>& outputs,
                const std::vector<std::pair<Var, Var>>& givens = {});

  const std::vector<Var>& inputs() const { return inputs_; }
  const std::vector<Var>& outputs() const { return outputs_; }
  // Nodes the outputs depend on, in a topological order (inputs before their readers). Only a
  // replacement changes it: passes that change nothing share one walk.
  std::vector<Node*> toposort() const;
  // Leaves that the outputs depend on.
  std::vector<Variable*> leaves() const;
  // The readers of a variable that the outputs depend on: (node, input position), and (nullptr,
  // output index) for a graph output.
  const std::vector<std::pair<Node*, int>>& clients(const Variable* v) const;
  // Every reader of old_var reads new_var instead. The dtype and ndim must agree, and new_var must
  // keep every axis that old_var's type declares broadcastable.
  void replace(const Var& old_var, const Var& new_var, const std::string& reason = "");
  // Releases the nodes dropped since the last prune.
  void prune();
  // Counts replacements: a node whose Node::changed_at is above a version read earlier changed
  // since then.
  uint64_t version() const { return version_; }
  // The live nodes that changed after `version` (added, or reading a replaced variable), inputs
  // before their readers; it costs the number of changes since the last prune, not the graph's
  // size. Only for a version read after the last prune.
  std::vector<Node*> changed_since(uint64_t version) const;

  // Called after every replace with (old, new, reason): the debug mode checks values with it.
  std::function<void(const Var&, const Var&, const std::string&)> on_replace;

 private:
  void import(const Var& v);  // registers the nodes of v's subgraph and their readers
  // Drops node when none of its outputs has a reader left, and then the nodes only it read.
  void drop_if_unread(Node* node);
  void stamp(Node* node);  // Node::changed_at = version_, remembered for changed_since
  std::vector<Var> inputs_;
  std::vector<Var> outputs_;
  FlatMap<const Node*, std::shared_ptr<Node>> nodes_;  // live ones
  std::vector<std::shared_ptr<Node>> dropped_;
  std::vector<Node*> stamped_;  // since the last prune; repeats and dropped nodes included
  FlatMap<const Variable*, std::vector<std::pair<Node*, int>>> clients_;
  uint64_t version_ = 0;
  // The last toposort and the version it was walked at (a graph of 100k nodes takes milliseconds
  // to walk, its nodes being scattered in memory; a copy of the order takes microseconds).
  mutable std::vector<Node*> order_;
  mutable uint64_t order_version_ = UINT64_MAX;
};

// Nodes between leaves and outputs in topological order, without recursion (deep graphs).
// size_hint: the expected number of nodes, to size the bookkeeping once. It keeps what it has
// visited in a set of its own, so other threads may walk the same nodes (the user's graph).
std::vector<Node*> topological_order(const std::vector<Var>& outputs, size_t size_hint = 0);
// The same order, found by marking the nodes themselves (Node::walk_mark): no hashing, no
// allocation but the result. Only for nodes no other thread walks meanwhile: a compiled function's
// own graph (FunctionGraph clones the user's nodes).
std::vector<Node*> topological_order_of_own(const std::vector<Var>& outputs, size_t size_hint = 0);

// The graph that computes `roots`, with some variables replaced: the nodes that read a replaced
// value, directly or not, are applied again; the others are kept.
std::vector<Var> rebuild(const std::vector<Var>& roots, std::unordered_map<const Variable*, Var> replace);

}  // namespace kiln

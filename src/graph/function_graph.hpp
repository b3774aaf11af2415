#pragma once
#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

#include "graph/node.hpp"

namespace kiln {

// A private copy of the graph between inputs and outputs, owned by one compiled function: nodes
// are cloned, leaves (inputs, constants, shared variables) are kept. givens replace variables
// (by identity) before cloning. Rewrites work on this copy, never on the user's graph.
class FunctionGraph {
 public:
  FunctionGraph(std::vector<Var> inputs, const std::vector<Var>& outputs,
                const std::vector<std::pair<Var, Var>>& givens = {});

  const std::vector<Var>& inputs() const { return inputs_; }
  const std::vector<Var>& outputs() const { return outputs_; }
  // Nodes in a topological order (inputs before the nodes that read them).
  std::vector<Node*> toposort() const;
  // Leaves that the outputs depend on.
  std::vector<Variable*> leaves() const;
  // Every reader of a variable: (node, input position); output position -1 for a graph output.
  std::vector<std::pair<Node*, int>> clients(const Variable* v) const;
  void replace(const Var& old_var, const Var& new_var);

 private:
  std::vector<Var> inputs_;
  std::vector<Var> outputs_;
};

// Nodes between leaves and outputs in topological order, without recursion (deep graphs).
std::vector<Node*> topological_order(const std::vector<Var>& outputs);

}  // namespace kiln

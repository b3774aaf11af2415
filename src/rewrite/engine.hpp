#pragma once
#include <functional>
#include <string>
#include <typeindex>
#include <vector>

#include "graph/function_graph.hpp"
#include "kiln/function.hpp"

namespace kiln {

// A local rewrite looks at one node and returns replacements for its outputs, or nothing.
// It is pure: an equivalent graph out, never a decision about memory.
struct LocalRewrite {
  std::string name;
  std::vector<std::type_index> ops;  // the op classes it matches; empty: every node
  std::function<std::vector<Var>(FunctionGraph&, Node&)> apply;
};

// The entry of LocalRewrite::ops for the op class T.
template <class T> std::type_index op_class() { return std::type_index(typeid(T)); }

// A whole-graph rewrite; returns how many replacements it made. It applies everywhere it can in
// one application: the engine runs it again only when something else changed the graph since.
struct GlobalRewrite {
  std::string name;
  std::function<int64_t(FunctionGraph&)> apply;
};

struct RewriteGroup {
  std::string name;
  std::vector<GlobalRewrite> globals;  // run first, once per pass
  std::vector<LocalRewrite> locals;    // then every node, until nothing changes
};

// Runs one group on the graph until it settles, in at most max_passes passes (more means two
// rewrites undo each other, and raises Error naming the last ones that fired). After the first
// pass, local rewrites revisit only the nodes that changed in the pass before. Statistics go to
// report.
void apply_group(FunctionGraph& graph, const RewriteGroup& group, CompileReport& report, int max_passes = 50);

// The catalogue: merge, constant_folding, canonicalize, scan, stabilize, specialize, fusion, and any
// group registered with register_rewrite_group.
const RewriteGroup& rewrite_group(const std::string& name);
// Adds a group under its name (replacing one of that name), for modes to name.
void register_rewrite_group(RewriteGroup group);

}  // namespace kiln

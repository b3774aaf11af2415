#include <ostream>
#include <sstream>
#include <unordered_map>

#include "graph/function_graph.hpp"
#include "graph/op.hpp"

namespace kiln {

namespace {

std::string id_label(size_t i) {
  std::string s;
  do {
    s.insert(s.begin(), static_cast<char>('A' + i % 26));
    i /= 26;
  } while (i-- > 0);
  return s;
}

// A label inside a double-quoted Graphviz string.
std::string escaped(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

std::string leaf_kind(const Variable& v) {
  if (v.is_constant()) return "constant";
  if (v.is_shared()) return "shared";
  return "input";
}

class Printer {
 public:
  explicit Printer(std::ostream& os) : os_(os) {}

  // The tree under v; `head` starts its first line (and the tree's children are indented under it).
  void print(const Var& v, const std::string& head) { print(v, head, std::string(head.size() > 0 ? 3 : 0, ' '), true, true); }

  // Then each inner graph met (a scan's body), under its node's id, as Theano prints them.
  void print_inner_graphs() {
    if (inner_.empty()) return;
    os_ << "\nInner graphs:\n";
    for (size_t i = 0; i < inner_.size(); ++i) {  // printing one may add nested ones
      const Node* n = inner_[i];
      os_ << '\n' << n->op->name() << " [id " << ids_.at(n) << "]\n";
      for (const Var& out : n->op->inner_graph()->outputs) print(out, " ← ");
    }
  }

 private:
  void print(const Var& v, const std::string& prefix, const std::string& indent, bool last, bool root) {
    const Variable& var = *v.get();
    std::string head = root ? prefix : indent + (last ? "└─ " : "├─ ");
    if (!var.owner) {
      os_ << head << var.label() << ' ' << var.type.str() << " (" << leaf_kind(var) << ")\n";
      return;
    }
    const Node* n = var.owner;
    auto [it, fresh] = ids_.try_emplace(n, id_label(ids_.size()));
    os_ << head << n->op->name() << " [id " << it->second << "]";
    if (n->outputs.size() > 1) os_ << '.' << var.index;
    if (!var.name.empty()) os_ << " '" << var.name << "'";
    os_ << ' ' << var.type.str() << "  " << n->where() << '\n';
    if (!fresh) return;
    if (n->op->inner_graph()) inner_.push_back(n);
    const std::string child_indent = root ? indent : indent + (last ? "   " : "│  ");
    for (size_t i = 0; i < n->inputs.size(); ++i) print(n->inputs[i], prefix, child_indent, i + 1 == n->inputs.size(), false);
  }

  std::ostream& os_;
  std::unordered_map<const Node*, std::string> ids_;
  std::vector<const Node*> inner_;
};

}  // namespace

namespace {

void check_defined(const std::vector<Var>& vs, const char* who) {
  for (size_t i = 0; i < vs.size(); ++i)
    if (!vs[i].defined())
      throw TypeError(std::string(who) + ": variable " + std::to_string(i) + " is an empty Var (default-constructed)");
}

}  // namespace

void debugprint(const std::vector<Var>& vs, std::ostream& os) {
  check_defined(vs, "debugprint");
  Printer p(os);
  for (const Var& v : vs) p.print(v, "");
  p.print_inner_graphs();
}

void debugprint(const Var& v, std::ostream& os) { debugprint(std::vector<Var>{v}, os); }

namespace {

// Writes the graph of vs into s, its names prefixed so that each inner graph (a cluster drawn
// beside the node that runs it, joined to it by a dashed edge) has names of its own.
class DotWriter {
 public:
  explicit DotWriter(std::ostringstream& s) : s_(s) {}

  // Returns the number of nodes written.
  size_t graph(const std::vector<Var>& vs, const std::string& prefix, const std::string& indent) {
    std::unordered_map<const Variable*, std::string> names;
    auto var_node = [&](const Var& v) -> std::string {
      auto [it, fresh] = names.try_emplace(v.get(), prefix + "v" + std::to_string(names.size()));
      if (fresh) {
        const Variable& var = *v.get();
        s_ << indent << it->second << " [shape=box,label=\"" << escaped(var.label()) << "\\n" << var.type.str() << "\""
           << (var.owner ? "" : ",style=filled,fillcolor=lightgrey") << "];\n";
      }
      return it->second;
    };
    size_t n_id = 0;
    for (Node* n : topological_order(vs)) {
      const std::string id = prefix + "n" + std::to_string(n_id++);
      s_ << indent << id << " [shape=ellipse,label=\"" << escaped(n->op->name()) << "\\n" << n->where() << "\"];\n";
      // Each variable's declaration is written before the statement that names it: var_node writes
      // to the same stream.
      for (size_t i = 0; i < n->inputs.size(); ++i) {
        const std::string from = var_node(n->inputs[i]);
        s_ << indent << from << " -> " << id << " [label=\"" << i << "\"];\n";
      }
      for (size_t i = 0; i < n->outputs.size(); ++i) {
        const std::string to = var_node(n->output(i));
        s_ << indent << id << " -> " << to << ";\n";
      }
      if (const InnerGraph* inner = n->op->inner_graph()) {
        const std::string cluster = "cluster_" + id;
        s_ << indent << "subgraph " << cluster << " {\n" << indent << "  label=\"" << escaped(n->op->name()) << " body\";\n"
           << indent << "  style=dashed;\n";
        const size_t inner_nodes = graph(inner->outputs, id + "_", indent + "  ");
        s_ << indent << "}\n";
        if (inner_nodes > 0) s_ << indent << id << "_n0 -> " << id << " [style=dashed,arrowhead=none,ltail=" << cluster << "];\n";
      }
    }
    for (const Var& v : vs) var_node(v);
    return n_id;
  }

 private:
  std::ostringstream& s_;
};

}  // namespace

std::string to_dot(const std::vector<Var>& vs) {
  check_defined(vs, "to_dot");
  std::ostringstream s;
  s << "digraph kiln {\n  rankdir=BT;\n  compound=true;\n";
  DotWriter(s).graph(vs, "", "  ");
  s << "}\n";
  return s.str();
}

std::string to_dot(const Var& v) { return to_dot(std::vector<Var>{v}); }

}  // namespace kiln

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
  void print(const Var& v, const std::string& prefix, bool last, bool root) {
    const Variable& var = *v.get();
    std::string head = root ? "" : prefix + (last ? "└─ " : "├─ ");
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
    const std::string child_prefix = root ? "" : prefix + (last ? "   " : "│  ");
    for (size_t i = 0; i < n->inputs.size(); ++i) print(n->inputs[i], child_prefix, i + 1 == n->inputs.size(), false);
  }

 private:
  std::ostream& os_;
  std::unordered_map<const Node*, std::string> ids_;
};

}  // namespace

void debugprint(const std::vector<Var>& vs, std::ostream& os) {
  Printer p(os);
  for (const Var& v : vs) p.print(v, "", true, true);
}

void debugprint(const Var& v, std::ostream& os) { debugprint(std::vector<Var>{v}, os); }

std::string to_dot(const std::vector<Var>& vs) {
  std::ostringstream s;
  s << "digraph kiln {\n  rankdir=BT;\n";
  std::unordered_map<const Variable*, std::string> names;
  auto var_node = [&](const Var& v) -> std::string {
    auto [it, fresh] = names.try_emplace(v.get(), "v" + std::to_string(names.size()));
    if (fresh) {
      const Variable& var = *v.get();
      s << "  " << it->second << " [shape=box,label=\"" << escaped(var.label()) << "\\n" << var.type.str() << "\""
        << (var.owner ? "" : ",style=filled,fillcolor=lightgrey") << "];\n";
    }
    return it->second;
  };
  size_t n_id = 0;
  for (Node* n : topological_order(vs)) {
    std::string id = "n" + std::to_string(n_id++);
    s << "  " << id << " [shape=ellipse,label=\"" << escaped(n->op->name()) << "\\n" << n->where() << "\"];\n";
    // Each variable's declaration is written before the statement that names it: var_node writes
    // to the same stream.
    for (size_t i = 0; i < n->inputs.size(); ++i) {
      const std::string from = var_node(n->inputs[i]);
      s << "  " << from << " -> " << id << " [label=\"" << i << "\"];\n";
    }
    for (size_t i = 0; i < n->outputs.size(); ++i) {
      const std::string to = var_node(n->output(i));
      s << "  " << id << " -> " << to << ";\n";
    }
  }
  for (const Var& v : vs) var_node(v);
  s << "}\n";
  return s.str();
}

std::string to_dot(const Var& v) { return to_dot(std::vector<Var>{v}); }

}  // namespace kiln

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "compile/program.hpp"
#include "graph/op.hpp"

namespace kiln {

Program emit_program(const FunctionGraph& graph, const std::vector<Var>& results) {
  Program p;
  std::unordered_map<const Variable*, int> slot_of;
  auto slot = [&](const Variable* v) {
    auto [it, fresh] = slot_of.try_emplace(v, p.n_slots);
    if (fresh) {
      ++p.n_slots;
      p.slot_vars.push_back(v);
      if (v->constant) p.constant_slots.push_back({it->second, *v->constant});
      if (v->shared) p.shared_slots.push_back({it->second, v->shared.get()});
    }
    return it->second;
  };
  for (const Var& in : graph.inputs()) p.input_slots.push_back(slot(in.get()));
  std::vector<Node*> order = topological_order(results);
  for (Node* n : order) {
    Instruction ins{n, {}, {}, {}, std::vector<bool>(n->outputs.size(), false)};
    for (const Var& v : n->inputs) ins.inputs.push_back(slot(v.get()));
    for (const auto& v : n->outputs) ins.outputs.push_back(slot(v.get()));
    for (auto [out, in] : n->op->view_map()) ins.output_is_view[out] = true;
    p.code.push_back(std::move(ins));
  }
  for (const Var& r : results) p.result_slots.push_back(slot(r.get()));

  std::unordered_set<int> kept(p.result_slots.begin(), p.result_slots.end());
  std::vector<int> last_reader(p.n_slots, -1);
  for (size_t i = 0; i < p.code.size(); ++i) {
    for (int s : p.code[i].inputs) last_reader[s] = static_cast<int>(i);
    for (int s : p.code[i].outputs) last_reader[s] = std::max(last_reader[s], static_cast<int>(i));
  }
  for (int s = 0; s < p.n_slots; ++s)
    if (last_reader[s] >= 0 && !kept.count(s)) p.code[last_reader[s]].release_after.push_back(s);
  return p;
}

namespace {

std::string describe_inputs(const std::vector<Tensor>& inputs) {
  std::string s;
  for (size_t i = 0; i < inputs.size(); ++i) s += (i ? ", " : "") + inputs[i].str();
  return s;
}

class CollectingRuntime final : public Runtime {
 public:
  void run(const Program& program, std::vector<Tensor>& slots) const override {
    std::vector<Tensor> inputs, outputs;
    std::vector<Shape> shapes;
    std::vector<const Tensor*> values;
    for (const Instruction& ins : program.code) {
      const Op& op = *ins.node->op;
      inputs.clear();
      shapes.clear();
      values.clear();
      for (int s : ins.inputs) inputs.push_back(slots[s]);
      for (const Tensor& t : inputs) {
        shapes.push_back(t.shape());
        values.push_back(&t);
      }
      try {
        std::vector<Shape> out_shapes = op.infer_shapes(shapes, values);
        outputs.assign(ins.outputs.size(), Tensor());
        for (size_t o = 0; o < outputs.size(); ++o)
          if (!ins.output_is_view[o]) outputs[o] = Tensor::empty(out_shapes[o], ins.node->outputs[o]->type.dtype);
        op.perform(inputs, outputs);
      } catch (const Error& e) {
        e.rethrow_with(std::string(e.what()) + "\n  while running " + op.name() + " on " + describe_inputs(inputs) +
                       ", built at " + ins.node->where());
      }
      for (size_t o = 0; o < outputs.size(); ++o) slots[ins.outputs[o]] = std::move(outputs[o]);
      for (int s : ins.release_after) slots[s] = Tensor();
    }
  }
};

}  // namespace

std::unique_ptr<Runtime> make_collecting_runtime() { return std::make_unique<CollectingRuntime>(); }

}  // namespace kiln

#include <algorithm>
#include <cmath>
#include <unordered_map>
#include <unordered_set>

#include "compile/program.hpp"
#include "graph/op.hpp"

namespace kiln {

Program emit_program(const std::vector<Var>& inputs, const std::vector<Var>& results) {
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
  for (const Var& in : inputs) p.input_slots.push_back(slot(in.get()));
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

// Debug checks around one kernel call.
struct OpChecks {
  bool enabled = false;
  bool nan_guard = false;
};

bool has_nan_or_inf(const Tensor& t) {
  if (!is_float(t.dtype())) return false;
  for (double v : t.to_vector<double>())
    if (!std::isfinite(v)) return true;
  return false;
}

void check_op(const Instruction& ins, const std::vector<Tensor>& inputs, const std::vector<Tensor>& before,
              const std::vector<Tensor>& outputs, bool nan_guard) {
  const Op& op = *ins.node->op;
  const std::string where = op.name() + " (built at " + ins.node->where() + ")";
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].to_vector<double>() != before[i].to_vector<double>() &&
        !(has_nan_or_inf(before[i])))
      throw Error("debug check: " + where + " modified its input " + std::to_string(i) + " " + inputs[i].str() +
                  ", which it does not declare it may overwrite");
  for (size_t o = 0; o < outputs.size(); ++o) {
    if (ins.output_is_view[o]) continue;
    for (size_t i = 0; i < inputs.size(); ++i)
      if (outputs[o].defined() && outputs[o].shares_memory(inputs[i]))
        throw Error("debug check: output " + std::to_string(o) + " of " + where + " shares memory with input " +
                    std::to_string(i) + ", but the op does not declare it as a view");
    if (nan_guard && has_nan_or_inf(outputs[o]))
      throw Error("debug check (nan_guard): " + where + " produced a NaN or an infinity in output " + std::to_string(o) +
                  " " + outputs[o].str() + " from inputs " + describe_inputs(inputs));
  }
}

class CollectingRuntime final : public Runtime {
 public:
  explicit CollectingRuntime(OpChecks checks = {}) : checks_(checks) {}
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
        std::vector<Tensor> before;
        if (checks_.enabled)
          for (const Tensor& t : inputs) before.push_back(t.clone());
        op.perform(inputs, outputs);
        if (checks_.enabled) check_op(ins, inputs, before, outputs, checks_.nan_guard);
      } catch (const Error& e) {
        e.rethrow_with(std::string(e.what()) + "\n  while running " + op.name() + " on " + describe_inputs(inputs) +
                       ", built at " + ins.node->where());
      }
      for (size_t o = 0; o < outputs.size(); ++o) slots[ins.outputs[o]] = std::move(outputs[o]);
      for (int s : ins.release_after) slots[s] = Tensor();
    }
  }

 private:
  OpChecks checks_;
};

}  // namespace

std::unique_ptr<Runtime> make_collecting_runtime() { return std::make_unique<CollectingRuntime>(); }

std::unique_ptr<Runtime> make_checking_runtime(bool nan_guard) {
  return std::make_unique<CollectingRuntime>(OpChecks{true, nan_guard});
}

}  // namespace kiln

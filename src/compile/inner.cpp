#include "compile/inner.hpp"

#include <map>
#include <mutex>

#include "compile/plan.hpp"
#include "compile/program.hpp"
#include "compile/schedule.hpp"
#include "graph/function_graph.hpp"
#include "rewrite/engine.hpp"
#include "tensor/copy.hpp"

namespace kiln {

namespace {

// The first node of the program whose output shape planning could not tell: where an unknown
// shape comes from.
std::string first_unknown_shape(const Program& code, const MemoryPlan& plan) {
  for (const Instruction& ins : code.code)
    if (ins.kind == Instruction::Kind::run)
      for (int s : ins.outputs)
        if (!plan.shape[static_cast<size_t>(s)]) return ins.node->op->name() + ", " + ins.node->origin();
  return "an input";
}

class CompiledInner final : public InnerProgram {
 public:
  CompiledInner(const InnerGraph& inner, const Mode& mode, const InnerCompiler& compiler)
      : graph_(inner.inputs, inner.outputs) {
    CompileReport report;
    for (const std::string& group : mode.groups()) apply_group(graph_, rewrite_group(group), report);
    Executables executables(MakeContext{&compiler});
    const SlotNumbering numbering(graph_.inputs(), graph_.outputs());
    for (Schedule& schedule : candidate_orders(graph_.outputs()))
      schedules_.push_back(emit_program(numbering, graph_.outputs(), executables, std::move(schedule.order)));
  }

  int64_t arena_bytes(const std::vector<Shape>& input_shapes) const override { return plan(input_shapes)->arena_bytes; }
  std::vector<Shape> output_shapes(const std::vector<Shape>& input_shapes) const override {
    const std::shared_ptr<const MemoryPlan> p = plan(input_shapes);
    std::vector<Shape> shapes;
    const Program& code = program(p->schedule);
    for (int s : code.result_slots) {
      const std::optional<Shape>& shape = p->shape[static_cast<size_t>(s)];
      if (!shape) throw ShapeError("an inner graph computes an output whose shape is known only while it runs (from " +
                                   first_unknown_shape(code, *p) + "); a loop's steps must compute values of shapes known before it starts " +
                                   "(a loop ending on until() inside another loop, as jacobian and hessian of its result build, " +
                                   "has such rows: give it a fixed number of steps, or differentiate it with grad or Lop)");
      shapes.push_back(*shape);
    }
    return shapes;
  }
  std::unique_ptr<InnerRun> start(const std::vector<Shape>& input_shapes, std::span<std::byte> arena) const override;

  // The plan for inputs of these shapes, made once: the schedule needing the least memory, each
  // result computed where the caller points it.
  std::shared_ptr<const MemoryPlan> plan(const std::vector<Shape>& input_shapes) const {
    std::lock_guard lock(mutex_);
    auto [it, fresh] = plans_.try_emplace(input_shapes);
    if (!fresh) return it->second;
    try {
      PlanOptions options;
      options.results_supplied = true;
      it->second = std::make_shared<const MemoryPlan>(plan_least_memory(schedules_, input_shapes, {}, options));
    } catch (...) {
      plans_.erase(it);
      throw;
    }
    return it->second;
  }
  const Program& program(int schedule) const { return schedules_[static_cast<size_t>(schedule)]; }

 private:
  FunctionGraph graph_;
  std::vector<Program> schedules_;
  mutable std::mutex mutex_;
  mutable std::map<std::vector<Shape>, std::shared_ptr<const MemoryPlan>> plans_;
};

class Run final : public InnerRun {
 public:
  Run(const CompiledInner& owner, std::shared_ptr<const MemoryPlan> plan, std::span<std::byte> arena)
      : plan_(std::move(plan)),
        program_(owner.program(plan_->schedule)),
        arena_(plan_->uses_arena ? Storage::borrow(arena.data(), arena.size()) : nullptr) {
    slots_.assign(static_cast<size_t>(program_.n_slots), Tensor());
    for (const auto& [s, value] : program_.constant_slots) slots_[static_cast<size_t>(s)] = value;
    // An output is computed straight into its destination where the plan lets the caller supply
    // it; otherwise (an input, a constant or a view handed back, one value returned twice) it is
    // copied there after each step.
    std::vector<bool> taken(slots_.size(), false);
    for (int s : program_.result_slots) {
      const bool direct = plan_->supplied[static_cast<size_t>(s)] && !taken[static_cast<size_t>(s)];
      taken[static_cast<size_t>(s)] = true;
      direct_.push_back(direct);
    }
    destinations_.resize(direct_.size());
  }

  Tensor& input(size_t i) override { return slots_[static_cast<size_t>(program_.input_slots[i])]; }
  Tensor& destination(size_t o) override {
    return direct_[o] ? slots_[static_cast<size_t>(program_.result_slots[o])] : destinations_[o];
  }
  void step() override {
    run_planned(program_, *plan_, slots_, arena_,
                {.buffers = &buffers_, .keeps_arena_slots = true, .warm = warm_, .keeps_inputs = true});
    warm_ = true;
    for (size_t o = 0; o < direct_.size(); ++o)
      if (!direct_[o]) copy_broadcast(destinations_[o], slots_[static_cast<size_t>(program_.result_slots[o])]);
  }

 private:
  std::shared_ptr<const MemoryPlan> plan_;
  const Program& program_;
  std::shared_ptr<Storage> arena_;
  std::vector<Tensor> slots_, destinations_;
  std::vector<bool> direct_;
  RunBuffers buffers_;
  bool warm_ = false;
};

std::unique_ptr<InnerRun> CompiledInner::start(const std::vector<Shape>& input_shapes, std::span<std::byte> arena) const {
  return std::make_unique<Run>(*this, plan(input_shapes), arena);
}

}  // namespace

std::unique_ptr<InnerProgram> ModeCompiler::compile(const InnerGraph& graph) const {
  return std::make_unique<CompiledInner>(graph, mode_, *this);
}

}  // namespace kiln

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <map>
#include <mutex>
#include <numeric>
#include <optional>
#include <sstream>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "compile/inner.hpp"
#include "compile/plan.hpp"
#include "compile/program.hpp"
#include "compile/reference.hpp"
#include "compile/schedule.hpp"
#include "graph/op.hpp"
#include "rewrite/engine.hpp"
#include "kiln/function.hpp"
#include "tensor/convert.hpp"
#include "tensor/handles.hpp"
#include "tensor/parallel.hpp"
#include "tensor/same_dims.hpp"
#include "tensor/tensor_book.hpp"

namespace kiln {

namespace {
int debug_level();  // KILN_DEBUG
// How many shared variables ahead a call asks the cache for a container or a value's shape.
constexpr size_t kSharedAhead = 8;
}  // namespace

// What one thread's calls of a function reuse, so that a steady call allocates nothing: the
// slots (with a kept arena, the values in it keep their tensors, views included, and the next
// call finds them made), the run loop's vectors, the holds on shared variables, the arena.
struct CallContext {
  bool busy = false;  // a call on this thread is using it (a nested call makes its own)
  std::vector<Tensor> slots;
  std::vector<bool> lent;
  std::vector<std::optional<SharedContainer::Hold>> holds;
  std::vector<std::optional<SharedContainer::Read>> reads;
  std::vector<Tensor> old_shared, new_values;
  RunBuffers run;
  std::shared_ptr<Storage> arena;  // kept between calls (FunctionOptions::keep_buffers)
  // The plan (by id: a plan the cache dropped may leave its address to another) and arena of the
  // last run that ended without error: its kept slots are ready for a run of the same plan in the
  // same arena (RunOptions::warm).
  uint64_t warm_plan = 0;
  const Storage* warm_arena = nullptr;
};

struct FunctionImpl {
  std::vector<In> inputs;
  std::vector<Out> outputs;
  Updates updates;
  Mode mode = Mode::fast_run();
  bool keep_buffers = false;
  std::unique_ptr<FunctionGraph> graph;
  // The program in each candidate order (compile/schedule.hpp); all share the slot numbering of
  // the first, depth-first one, and each signature's plan runs the one needing the least memory.
  std::vector<Program> schedules;
  std::vector<std::string> schedule_names;
  const Program& program() const { return schedules[0]; }
  std::optional<OpChecks> op_checks;  // Mode::debug(): an unplanned, op-checked reference run first
  std::vector<uint8_t> result_in_single_precision;  // with op_checks: per result, computed_in_single_precision
  bool trust_input = false;
  CompileReport report;
  // Mode::debug(): every replacement made while compiling, and a program computing both sides
  // and the values the old side's elementwise part reads (compile/reference.hpp).
  struct Replacement {
    std::string rewrite;
    Var old_value, new_value;
    std::vector<Var> boundary;
    size_t first_boundary_result = 0;
    bool single_precision = false;  // either side is computed from single precision values
  };
  std::vector<Replacement> replacements;
  // The outputs as built, computed by the check program after the replacements' values: where they
  // fail on a call, a new value that fails where the old one did not is the user's error, not the
  // rewrite's (a fused node reads a reduction of no elements that the function reads anyway).
  std::vector<Var> outputs_as_built;
  size_t first_output_as_built = 0;
  Program check_program;
  // Per shared slot of the program: the index of the variable's update, or -1. A call holds the
  // updated variables (SharedContainer::Hold) and may compute their new values in their buffers.
  std::vector<int> update_of_shared;
  std::vector<int> shared_of_update;  // per update: its variable's shared slot index, or -1
  // The variables updated that the graph does not read: held too, after the shared slots.
  std::vector<SharedContainer*> unread_updated;
  std::vector<size_t> hold_of_update;  // per update: its hold (a shared slot index, or after them)
  // Shared slot indices and unread updated variables (numbered after the slots) by container
  // address: the one global order in which every call takes its locks; and their containers in
  // that order.
  std::vector<size_t> shared_order;
  std::vector<const SharedContainer*> containers_in_order;
  // Plans per signature (input and shared-variable shapes) and per set of lent buffers (the
  // borrowed inputs, then the updated shared variables, that this call may overwrite), and the
  // arena each thread keeps between its calls: a borrowed output stays valid until the same
  // thread calls again.
  mutable std::mutex plan_mutex;
  mutable std::map<std::pair<std::vector<Shape>, std::vector<bool>>, std::shared_ptr<const MemoryPlan>> plans;
  // By a token that lives as long as the calling thread (acquire_context), not by its id: an id
  // may be given again to a thread started after it exits, which must not write the arena the
  // first one's borrowed outputs view. The contexts of threads that have exited are dropped when
  // a new thread first calls.
  struct ThreadContext {
    std::weak_ptr<const int> thread;  // expires when the thread exits
    std::unique_ptr<CallContext> context;
  };
  mutable std::unordered_map<const int*, ThreadContext> contexts;
  // The plan of the last call: a steady loop finds it again without building a key.
  mutable std::shared_ptr<const MemoryPlan> last_plan;
  mutable std::vector<bool> last_lent;
  // FunctionOptions::profile: per instruction, over all calls.
  bool profiling = false;
  mutable std::mutex profile_mutex;
  mutable std::vector<InstructionTimes> times;  // per schedule
  mutable int64_t profiled_calls = 0;

  std::shared_ptr<const MemoryPlan> plan_for(const std::vector<Shape>& inputs, const std::vector<Shape>& shared,
                                             const std::vector<bool>& lent) const {
    std::pair<std::vector<Shape>, std::vector<bool>> key{inputs, lent};
    key.first.insert(key.first.end(), shared.begin(), shared.end());
    std::lock_guard lock(plan_mutex);
    auto it = plans.find(key);
    if (it != plans.end()) return it->second;
    PlanOptions options;
    const size_t n_in = this->inputs.size();
    options.borrowed_inputs.assign(lent.begin(), lent.begin() + static_cast<int64_t>(n_in));
    for (const Out& out : outputs) options.kept_outputs.push_back(keep_buffers && out.borrow);
    for (size_t i = 0; i + n_in < lent.size(); ++i)
      options.overwritable_shared.push_back(
          lent[n_in + i] ? program().result_slots[outputs.size() + static_cast<size_t>(update_of_shared[i])] : -1);
    std::vector<int64_t> peaks;
    MemoryPlan best = plan_least_memory(schedules, inputs, shared, options, &peaks);
    std::vector<std::pair<std::string, int64_t>> tried;
    for (size_t i = 0; i < peaks.size(); ++i) tried.push_back({schedule_names[i], peaks[i]});
    best.report.schedule = schedule_names[static_cast<size_t>(best.schedule)];
    if (debug_level() >= 1) {
      std::string shapes;
      for (const Shape& shape : key.first) shapes += (shapes.empty() ? "" : ", ") + shape_str(shape);
      std::cerr << "kiln: memory plan for input and shared shapes " << shapes << " (schedule " << best.report.schedule
                << "):\n" << plan_text(schedules[static_cast<size_t>(best.schedule)], best);
    }
    best.report.schedules = std::move(tried);
    auto plan = std::make_shared<const MemoryPlan>(std::move(best));
    // Bounded: a loop whose batch size keeps changing would keep a plan per size for good (67 kB
    // each for a 20-layer step); past kMostPlans, the others go and are made again when needed.
    constexpr size_t kMostPlans = 64;
    if (plans.size() >= kMostPlans) plans.clear();
    plans.emplace(std::move(key), plan);
    return plan;
  }
  // The plan for a call's values: the last call's when the shapes and the lent buffers are the
  // same (compared in place, nothing allocated), else from the cache.
  std::shared_ptr<const MemoryPlan> plan_for_call(const std::vector<Tensor>& slots, const std::vector<Tensor>& shared,
                                                  const std::vector<bool>& lent) const {
    {
      std::lock_guard lock(plan_mutex);
      if (last_plan && last_lent == lent) {
        const std::vector<Shape>& signature = last_plan->signature;
        bool same = true;
        const size_t n_in = program().input_slots.size();
        for (size_t i = 0; same && i < n_in; ++i) same = same_dims(signature[i], slots[program().input_slots[i]].shape());
        for (size_t i = 0; same && i < shared.size(); ++i) {
          // Thousands of variables, each shape behind its handle: asked for a few ahead.
          if (i + kSharedAhead < shared.size()) TensorHandles::prefetch_geometry(shared[i + kSharedAhead]);
          same = same_dims(signature[n_in + i], shared[i].shape());
        }
        if (same) return last_plan;
      }
    }
    std::vector<Shape> input_shapes, shared_shapes;
    for (int s : program().input_slots) input_shapes.push_back(slots[s].shape());
    for (const Tensor& t : shared) shared_shapes.push_back(t.shape());
    auto plan = plan_for(input_shapes, shared_shapes, lent);
    std::lock_guard lock(plan_mutex);
    last_plan = plan;
    last_lent = lent;
    return plan;
  }
  // What a call may overwrite in the steady state: every borrowed input and updated variable.
  std::vector<bool> all_lendable() const {
    std::vector<bool> lent;
    for (const In& in : inputs) lent.push_back(in.borrow);
    for (int u : update_of_shared) lent.push_back(u >= 0);
    return lent;
  }
  // This thread's context, unless a call on this thread is already using it (then a fresh one).
  CallContext* acquire_context(std::unique_ptr<CallContext>& fresh) const {
    {
      // Lives as long as its thread; its address names the thread while it does.
      thread_local const std::shared_ptr<const int> this_thread_life = std::make_shared<const int>(0);
      std::lock_guard lock(plan_mutex);
      ThreadContext& entry = contexts[this_thread_life.get()];
      if (!entry.context || entry.thread.expired()) {
        std::erase_if(contexts, [&](const auto& c) { return c.first != this_thread_life.get() && c.second.thread.expired(); });
        entry = {this_thread_life, std::make_unique<CallContext>()};
      }
      std::unique_ptr<CallContext>& mine = entry.context;
      if (!mine->busy) {
        mine->busy = true;
        return mine.get();
      }
    }
    fresh = std::make_unique<CallContext>();
    fresh->busy = true;
    return fresh.get();
  }
  // This thread's kept arena when it is large enough and no value the call reads lies in it (a
  // borrowed output of the last call passed back in, or made a shared variable's value with
  // set_value(borrow)); else a new one, kept from now on.
  std::shared_ptr<Storage> thread_arena(CallContext& context, const MemoryPlan& plan, std::span<const Tensor> args,
                                        std::span<const Tensor> shared_values) const {
    std::shared_ptr<Storage>& arena = context.arena;
    // An argument lies in the arena when it views it, or wraps memory that overlaps it (another
    // kiln allocation never does); compared without building anything.
    auto inside = [&](const Tensor& a) {
      const Storage& s = *a.storage();
      if (&s == arena.get()) return true;
      return !s.owned() && s.data() < arena->data() + arena->nbytes() && arena->data() < s.data() + s.nbytes();
    };
    bool usable = arena && static_cast<int64_t>(arena->nbytes()) >= plan.arena_bytes;
    for (size_t i = 0; usable && i < args.size(); ++i) usable = !inside(args[i]);
    for (size_t i = 0; usable && i < shared_values.size(); ++i) usable = !inside(shared_values[i]);
    if (!usable) arena = plan.uses_arena ? TensorHandles::kept_arena(static_cast<size_t>(plan.arena_bytes)) : nullptr;
    return arena;
  }
};

namespace {

std::string input_label(const FunctionImpl& f, size_t i) {
  return "input " + std::to_string(i) + " ('" + f.inputs[i].variable.get()->label() + "' " +
         f.inputs[i].variable.type().str() + ")";
}

int debug_level() {
  const char* v = std::getenv("KILN_DEBUG");
  return v ? std::atoi(v) : 0;
}

void trace_stage(const char* stage, const std::vector<Var>& results) {
  if (debug_level() < 1) return;
  std::cerr << "kiln: after " << stage << ":\n";
  debugprint(results, std::cerr);
}

void validate(const std::vector<In>& inputs, const std::vector<Out>& outputs, const Updates& updates) {
  std::unordered_set<const Variable*> seen;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Var& v = inputs[i].variable;
    const std::string what = "function: input " + std::to_string(i);
    if (!v.defined()) throw TypeError(what + " is an empty Var");
    const Variable& var = *v.get();
    if (var.is_shared())
      throw TypeError(what + " '" + var.label() + "' is a shared variable; shared variables are implicit inputs, "
                      "remove it from the input list");
    if (var.is_constant()) throw TypeError(what + " '" + var.label() + "' is a constant and cannot be an input");
    if (var.owner)
      throw TypeError(what + " '" + var.label() + "' is computed by " + var.owner->op->name() + " (" +
                      var.owner->origin() + "); inputs must be symbolic inputs such as matrix(); use givens to replace "
                      "an intermediate value");
    if (!seen.insert(&var).second) throw TypeError(what + " '" + var.label() + "' is given twice");
  }
  for (size_t i = 0; i < outputs.size(); ++i)
    if (!outputs[i].variable.defined()) throw TypeError("function: output " + std::to_string(i) + " is an empty Var");
  std::unordered_set<const Variable*> updated;
  for (size_t k = 0; k < updates.size(); ++k) {
    const auto& [s, value] = updates[k];
    if (!s.defined() || !s.get()->is_shared())
      throw TypeError("function: update " + std::to_string(k) + " names " +
                      (s.defined() ? "'" + s.get()->label() + "' " + s.type().str() : std::string("an empty Var")) +
                      ", which is not a shared variable; only values made by shared(...) can be updated");
    const std::string name = "'" + s.get()->label() + "'";
    if (!updated.insert(s.get()).second)
      throw TypeError("function: shared variable " + name + " is updated twice; give one update per shared variable");
    if (!value.defined()) throw TypeError("function: the update of shared variable " + name + " is an empty Var");
    if (value.dtype() != s.dtype() || value.ndim() != s.ndim())
      throw TypeError("function: the update of shared variable " + name + " " + s.type().str() + " has type " +
                      value.type().str() + "; an update must keep the dtype and number of dimensions (use cast)");
  }
}

// A replacement must have the replaced variable's type: its dtype, its ndim, and every axis the
// variable declares broadcastable (it may declare more). A bare number takes the variable's dtype.
Givens checked_givens(const Givens& givens) {
  Givens checked;
  for (size_t i = 0; i < givens.size(); ++i) {
    auto [var, replacement] = givens[i];
    if (!var.defined() || !replacement.defined())
      throw TypeError("function: givens entry " + std::to_string(i) + " has an empty Var");
    const Type &want = var.type(), &got = replacement.type();
    const Variable& number = *replacement.get();
    if (number.weak && number.constant && got.ndim() == want.ndim() && want.dtype != got.dtype &&
        (is_float(want.dtype) || !is_float(got.dtype)))
      replacement = constant(number.constant->to(want.dtype));
    bool fits = replacement.dtype() == want.dtype && got.ndim() == want.ndim();
    for (int64_t d = 0; fits && d < want.ndim(); ++d) fits = !want.broadcastable[d] || got.broadcastable[d];
    if (!fits)
      throw TypeError("function: givens entry " + std::to_string(i) + " replaces '" + var.get()->label() + "' " +
                      want.str() + " with a value of type " + got.str() + "; a replacement must have the same dtype " +
                      "and number of dimensions, and be broadcastable wherever the replaced variable is (cast, " +
                      "reshape or dimshuffle it first)");
    checked.push_back({var, replacement});
  }
  return checked;
}

// A sparse input's parts become inputs of their own, after its data; the parts may go unused
// (sum(x) reads only the data).
std::pair<std::vector<In>, std::unordered_set<const Variable*>> with_sparse_parts(std::vector<In> inputs) {
  std::vector<In> flat;
  std::unordered_set<const Variable*> may_be_unused;
  for (In& in : inputs) {
    flat.push_back(In(in.variable, {.borrow = in.borrow}));
    flat.back().sparse_format = in.sparse_format;
    for (const Var& part : in.sparse_parts) {
      flat.push_back(In(part, {.borrow = in.borrow}));
      may_be_unused.insert(part.get());
    }
  }
  return {std::move(flat), std::move(may_be_unused)};
}

void check_leaves(const FunctionGraph& graph, const std::vector<In>& inputs, bool allow_unused,
                  const std::unordered_set<const Variable*>& may_be_unused) {
  std::unordered_set<const Variable*> leaves;
  for (const Variable* leaf : graph.leaves()) leaves.insert(leaf);
  std::unordered_set<const Variable*> given;
  for (const In& in : inputs) given.insert(in.variable.get());
  for (const Variable* leaf : graph.leaves())
    if (leaf->is_input() && !given.count(leaf))
      throw TypeError("function: the outputs depend on '" + leaf->label() + "' " + leaf->type.str() +
                      ", which is not among the inputs; add it to the input list (or replace it with givens)");
  if (allow_unused) return;
  for (size_t i = 0; i < inputs.size(); ++i)
    if (!leaves.count(inputs[i].variable.get()) && !may_be_unused.count(inputs[i].variable.get()))
      throw TypeError("function: input " + std::to_string(i) + " '" + inputs[i].variable.get()->label() +
                      "' is not used by any output or update; remove it or set allow_unused_inputs");
}

Tensor check_input(const FunctionImpl& f, size_t i, const Tensor& value) {
  const Type& type = f.inputs[i].variable.type();
  if (!value.defined()) throw TypeError("function: " + input_label(f, i) + " got an empty tensor");
  if (value.is_disposed()) throw DisposedError("function: " + input_label(f, i) + " got a disposed tensor");
  if (value.ndim() != type.ndim())
    throw TypeError("function: " + input_label(f, i) + " expects " + std::to_string(type.ndim()) +
                    " dimensions, got " + value.str());
  for (int64_t d = 0; d < type.ndim(); ++d)
    if (type.broadcastable[d] && value.shape()[d] != 1)
      throw ShapeError("function: " + input_label(f, i) + " has a broadcastable dimension " + std::to_string(d) +
                       " that must be 1, got " + value.str());
  if (value.dtype() == type.dtype) return value;  // the common case: no message to build
  return convert_lossless(value, type.dtype, "function: " + input_label(f, i));
}

// Values indexed for overlap checks. Distinct kiln-owned storages never overlap, so an owned value
// is compared only with values of its own storage; borrowed (user-wrapped) memory may alias
// anything and is compared with everything. Each entry may name an owner to skip.
class MemoryIndex {
 public:
  void add(const Tensor& t, const void* owner = nullptr) {
    if (!t.defined()) return;
    entries_.push_back({t, owner});
    const size_t i = entries_.size() - 1;
    if (!t.storage()->owned()) borrowed_.push_back(i);
    else if (entries_.size() > kLinear) index(i);
    if (entries_.size() == kLinear + 1)  // from here on, look owned storages up instead of scanning
      for (size_t j = 0; j < kLinear; ++j)
        if (entries_[j].first.storage()->owned()) index(j);
  }
  bool overlaps(const Tensor& t, const void* except = nullptr) const {
    if (!t.defined()) return false;
    auto hit = [&](size_t i) {
      if (except && entries_[i].second == except) return false;
      return t.shares_memory(entries_[i].first);
    };
    if (!t.storage()->owned() || entries_.size() <= kLinear) {
      for (size_t i = 0; i < entries_.size(); ++i)
        if (hit(i)) return true;
      return false;
    }
    if (auto it = by_storage_.find(t.storage().get()); it != by_storage_.end())
      for (size_t i : it->second)
        if (hit(i)) return true;
    for (size_t i : borrowed_)
      if (hit(i)) return true;
    return false;
  }

 private:
  static constexpr size_t kLinear = 16;
  void index(size_t i) { by_storage_[entries_[i].first.storage().get()].push_back(i); }
  std::vector<std::pair<Tensor, const void*>> entries_;
  std::unordered_map<const Storage*, std::vector<size_t>> by_storage_;
  std::vector<size_t> borrowed_;
};

// Per value: whether it is single precision or computed from a value that is (an f64 sum of a cast
// f32 carries f32's rounding, which may differ between two computations of it by the order of a
// parallel or vector sum): checks comparing two computations of it allow single precision's error.
std::vector<uint8_t> computed_in_single_precision(const std::vector<Var>& values) {
  std::unordered_set<const Variable*> single;
  for (const Node* n : topological_order_of_own(values)) {
    const bool reads_single = std::any_of(n->inputs.begin(), n->inputs.end(), [&](const Var& v) {
      return v.get()->type.dtype == DType::f32 || single.count(v.get());
    });
    if (reads_single)
      for (const auto& out : n->outputs) single.insert(out.get());
  }
  std::vector<uint8_t> result;
  for (const Var& v : values) result.push_back(v.get()->type.dtype == DType::f32 || single.count(v.get()));
  return result;
}

// Whether a value may stand for another: equal within the precision it was computed in. Where the
// old value is not finite (the overflow a stabilizing rewrite removes), any value may.
std::optional<std::string> value_difference(const Tensor& old_value, const Tensor& new_value, bool single) {
  if (old_value.shape() != new_value.shape())
    return "shape " + shape_str(new_value.shape()) + " instead of " + shape_str(old_value.shape());
  const double rtol = single ? 1e-4 : 1e-7, atol = single ? 1e-5 : 1e-9;
  const auto a = old_value.to_vector<double>(), b = new_value.to_vector<double>();
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i])) continue;
    if (std::fabs(a[i] - b[i]) <= atol + rtol * std::fabs(a[i])) continue;
    return "element " + std::to_string(i) + " is " + std::to_string(b[i]) + " instead of " + std::to_string(a[i]);
  }
  return std::nullopt;
}

// Whether a rewrite's new value may stand for the old one: equal to it within the dtype's
// precision, or, for an elementwise old value, to its long double value (the reference) within
// that precision plus the reference's own error, estimated from the old value's (long double
// carries 11 more bits than f64).
std::optional<std::string> rewrite_difference(const Tensor& old_value, const Tensor& new_value, const Var& old_var,
                                              const std::vector<Var>& boundary, const std::vector<Tensor>& boundary_values,
                                              bool single) {
  if (boundary.empty() || !is_float(old_value.dtype()) || old_value.shape() != new_value.shape())
    return value_difference(old_value, new_value, single);
  const std::vector<long double> reference = long_double_value(old_var, boundary, boundary_values, old_value.shape());
  const long double rtol = single ? 1e-4 : 1e-7, atol = single ? 1e-5 : 1e-9;
  const auto a = old_value.to_vector<double>(), b = new_value.to_vector<double>();
  for (size_t i = 0; i < a.size(); ++i) {
    const long double r = reference[i];
    // Where the old value overflowed, the reference's own error cannot be estimated: not judged.
    if (!std::isfinite(r) || !std::isfinite(a[i])) continue;
    if (std::fabs(a[i] - b[i]) <= static_cast<double>(atol + rtol * std::fabs(a[i]))) continue;
    const long double own_error = std::fabs(static_cast<long double>(a[i]) - r) / 2048;
    if (std::fabs(static_cast<long double>(b[i]) - r) <= atol + rtol * std::fabs(r) + 2 * own_error) continue;
    return "element " + std::to_string(i) + " is " + std::to_string(b[i]) + " instead of " + std::to_string(a[i]) +
           " (" + std::to_string(static_cast<double>(r)) + " in long double)";
  }
  return std::nullopt;
}

void check_rewrites(const FunctionImpl& f, const std::vector<Tensor>& call_slots) {
  const Program& check = f.check_program;
  std::vector<Tensor> slots(check.n_slots);
  for (size_t i = 0; i < check.input_slots.size(); ++i) slots[check.input_slots[i]] = call_slots[f.program().input_slots[i]];
  // Shared variables as loaded (or held) by the call; one the rewritten graph no longer reads
  // (sum(t) - sum(t) of it became 0) is read now.
  for (const auto& [s, container] : check.shared_slots) {
    for (const auto& [call_slot, call_container] : f.program().shared_slots)
      if (call_container == container) slots[s] = call_slots[call_slot];
    if (!slots[s].defined()) slots[s] = container->load();
  }
  for (const auto& [s, value] : check.constant_slots) slots[s] = value;
  // A side that fails to compute may belong to a branch no call takes: only what the old side
  // computes is judged, and a new side must compute wherever the old one does.
  std::vector<std::string> failures;
  run_planned(check, unplanned(check), slots, nullptr, {.failures = &failures});
  bool as_built_fails = false;
  for (size_t r = f.first_output_as_built; r < f.first_output_as_built + f.outputs_as_built.size(); ++r)
    as_built_fails = as_built_fails || !failures[check.result_slots[r]].empty();
  for (size_t k = 0; k < f.replacements.size(); ++k) {
    const auto& r = f.replacements[k];
    const int old_slot = check.result_slots[2 * k], new_slot = check.result_slots[2 * k + 1];
    if (!failures[old_slot].empty()) continue;
    std::optional<std::string> difference;
    if (!failures[new_slot].empty()) {
      if (as_built_fails) continue;
      difference = "the new value fails where the old one did not: " + failures[new_slot];
    } else {
      std::vector<Tensor> boundary_values;
      for (size_t b = 0; b < r.boundary.size(); ++b)
        boundary_values.push_back(slots[check.result_slots[r.first_boundary_result + b]]);
      difference = rewrite_difference(slots[old_slot], slots[new_slot], r.old_value, r.boundary, boundary_values,
                                      r.single_precision);
    }
    if (difference) {
      const Node* node = r.old_value.get()->owner;
      throw BadOptimization("rewrite '" + r.rewrite + "' changed a value: it replaced " +
                            (node ? node->op->name() + " (" + node->origin() + ")" : r.old_value.get()->label()) +
                            " " + r.old_value.type().str() + " and on this call's inputs " + *difference);
    }
  }
}

}  // namespace

// The updates stateful ops ask for (Op::state_update, a random draw's stream): a shared variable
// that no update of the caller's names takes the value the op gives it after each call.
void add_state_updates(const std::vector<Out>& outputs, Updates& updates) {
  std::vector<Var> roots;
  for (const Out& out : outputs) roots.push_back(out.variable);
  for (const auto& u : updates) roots.push_back(u.second);
  std::unordered_set<const Variable*> by_caller, by_ops;
  for (const auto& u : updates) by_caller.insert(u.first.get());
  for (Node* n : topological_order(roots)) {
    const auto state_update = n->op->state_update();
    if (!state_update) continue;
    const Var& state = n->inputs[static_cast<size_t>(state_update->first)];
    if (!state.get()->is_shared() || by_caller.count(state.get())) continue;
    if (!by_ops.insert(state.get()).second)
      throw TypeError("function: two " + n->op->name() + " nodes read the state '" + state.get()->label() +
                      "'; each would draw the same numbers (draw each from the RandomStreams, or update the state yourself)");
    updates.push_back({Shared(state.ptr()), n->output(static_cast<size_t>(state_update->second))});
  }
}

Function function(std::vector<In> given_inputs, std::vector<Out> outputs, FunctionOptions options) {
  const InternalTensors internal;
  auto [inputs, sparse_parts] = with_sparse_parts(std::move(given_inputs));
  validate(inputs, outputs, options.updates);
  add_state_updates(outputs, options.updates);
  auto f = std::make_shared<FunctionImpl>();
  f->inputs = std::move(inputs);
  f->outputs = std::move(outputs);
  f->updates = std::move(options.updates);
  f->mode = options.mode;
  f->keep_buffers = options.keep_buffers;

  std::vector<Var> input_vars, result_vars;
  for (const In& in : f->inputs) input_vars.push_back(in.variable);
  for (const Out& out : f->outputs) result_vars.push_back(out.variable);
  for (const auto& u : f->updates) result_vars.push_back(u.second);

  const auto start = std::chrono::steady_clock::now();
  // The pipeline, one stage after another, each timed in the compile report and printed under
  // KILN_DEBUG: clone, the mode's rewrite groups, the candidate orders, the programs.
  auto stage = [&](const std::string& name, auto body) {
    const auto stage_start = std::chrono::steady_clock::now();
    body();
    f->report.stages.push_back({name, std::chrono::duration<double>(std::chrono::steady_clock::now() - stage_start).count()});
  };
  stage("clone", [&] { f->graph = std::make_unique<FunctionGraph>(input_vars, result_vars, checked_givens(options.givens)); });
  trace_stage("clone", f->graph->outputs());
  const auto& checks = f->mode.checks();
  // A clone of its own: replacements rewire the readers of what they replace in the graph.
  if (checks && checks->rewrites)
    f->outputs_as_built = FunctionGraph(input_vars, result_vars, checked_givens(options.givens)).outputs();
  if (checks && checks->rewrites)
    f->graph->on_replace = [impl = f.get()](const Var& old_value, const Var& new_value, const std::string& rewrite) {
      impl->replacements.push_back({rewrite, old_value, new_value, {}, 0});
    };
  check_leaves(*f->graph, f->inputs, options.allow_unused_inputs, sparse_parts);
  f->report.nodes_before = static_cast<int64_t>(f->graph->toposort().size());
  for (const std::string& group : f->mode.groups()) {
    stage(group, [&] { apply_group(*f->graph, rewrite_group(group), f->report); });
    trace_stage(group.c_str(), f->graph->outputs());
  }
  f->report.nodes_after = static_cast<int64_t>(f->graph->toposort().size());
  f->graph->on_replace = nullptr;
  std::vector<Schedule> orders;
  stage("schedule", [&] { orders = candidate_orders(f->graph->outputs()); });
  const ModeCompiler inner_compiler(f->mode);  // for the graphs inside ops (a scan's body)
  Executables executables(MakeContext{&inner_compiler});
  stage("emit", [&] {
    const SlotNumbering numbering(f->graph->inputs(), f->graph->outputs());
    for (Schedule& schedule : orders) {
      f->schedules.push_back(emit_program(numbering, f->graph->outputs(), executables, std::move(schedule.order)));
      f->schedule_names.push_back(schedule.name);
      if (debug_level() >= 1) std::cerr << "kiln: schedule " << schedule.name << ":\n" << program_text(f->schedules.back());
    }
  });
  f->shared_of_update.assign(f->updates.size(), -1);
  std::unordered_map<const SharedContainer*, int> update_of;
  for (size_t k = 0; k < f->updates.size(); ++k) update_of[f->updates[k].first.get()->shared.get()] = static_cast<int>(k);
  const size_t n_shared_slots = f->program().shared_slots.size();
  for (size_t i = 0; i < n_shared_slots; ++i) {
    const auto it = update_of.find(f->program().shared_slots[i].second);
    f->update_of_shared.push_back(it == update_of.end() ? -1 : it->second);
    if (it != update_of.end()) f->shared_of_update[static_cast<size_t>(it->second)] = static_cast<int>(i);
  }
  for (size_t k = 0; k < f->updates.size(); ++k) {
    const int i = f->shared_of_update[k];
    f->hold_of_update.push_back(i >= 0 ? static_cast<size_t>(i) : n_shared_slots + f->unread_updated.size());
    if (i < 0) f->unread_updated.push_back(f->updates[k].first.get()->shared.get());
  }
  auto container_of = [&](size_t h) -> const SharedContainer* {
    return h < n_shared_slots ? f->program().shared_slots[h].second : f->unread_updated[h - n_shared_slots];
  };
  f->shared_order.resize(n_shared_slots + f->unread_updated.size());
  std::iota(f->shared_order.begin(), f->shared_order.end(), size_t{0});
  std::sort(f->shared_order.begin(), f->shared_order.end(),
            [&](size_t a, size_t b) { return std::less<>()(container_of(a), container_of(b)); });
  for (size_t h : f->shared_order) f->containers_in_order.push_back(container_of(h));
  if (checks && (checks->ops || checks->nan_guard)) {
    f->op_checks = OpChecks{checks->nan_guard};
    f->result_in_single_precision = computed_in_single_precision(f->graph->outputs());
  }
  f->profiling = options.profile;
  for (const Program& schedule : f->schedules) f->times.emplace_back(schedule.code.size());
  if (!f->replacements.empty()) {
    std::vector<Var> results;
    for (const auto& r : f->replacements) {
      results.push_back(r.old_value);
      results.push_back(r.new_value);
    }
    const std::vector<uint8_t> single = computed_in_single_precision(results);
    for (size_t k = 0; k < f->replacements.size(); ++k) f->replacements[k].single_precision = single[2 * k] || single[2 * k + 1];
    for (auto& r : f->replacements) {
      r.boundary = elementwise_boundary(r.old_value);
      r.first_boundary_result = results.size();
      results.insert(results.end(), r.boundary.begin(), r.boundary.end());
    }
    f->first_output_as_built = results.size();
    results.insert(results.end(), f->outputs_as_built.begin(), f->outputs_as_built.end());
    f->check_program = emit_program(SlotNumbering(f->graph->inputs(), results), results, executables);
  }
  f->report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (debug_level() >= 1) std::cerr << "kiln: " << f->report.str();

  Function fn;
  fn.impl_ = std::move(f);
  return fn;
}

const FunctionImpl& Function::impl() const {
  if (!impl_) throw Error("Function: this Function is empty (default-constructed); build it with kiln::function(...)");
  return *impl_;
}

std::vector<Tensor> Function::operator()(const std::vector<Tensor>& args, Loc loc) const {
  std::vector<Tensor> results;
  call(args, results, loc);
  return results;
}

namespace {

// Releases a call's context: its slots keep only values in a kept arena, its holds end.
class ContextUse {
 public:
  ContextUse(CallContext& context, bool keeps_arena) : context_(context), keeps_arena_(keeps_arena) {}
  ContextUse(const ContextUse&) = delete;
  ContextUse& operator=(const ContextUse&) = delete;
  void keep_arena_slots(std::shared_ptr<const MemoryPlan> plan) { plan_ = std::move(plan); }
  ~ContextUse() {
    std::vector<Tensor>& slots = context_.slots;
    RunBuffers& run = context_.run;
    run.parked.resize(slots.size());
    // What the plan keeps stays for the next call: the run listed the other slots. A call that
    // failed before its run tests each slot instead (a destructor allocates nothing).
    if (plan_ && run.kept_set_for(*plan_, slots.size(), keeps_arena_, false)) {
      for (int s : run.not_kept) run.release(slots[static_cast<size_t>(s)], static_cast<size_t>(s));
    } else {
      for (size_t s = 0; s < slots.size(); ++s)
        if (!(plan_ && plan_->keeps_slot(s, keeps_arena_))) run.release(slots[s], s);
    }
    for (auto& hold : context_.holds) hold.reset();
    for (auto& read : context_.reads) read.reset();
    for (Tensor& t : context_.old_shared) t = Tensor();
    for (Tensor& t : context_.new_values) t = Tensor();
    if (!keeps_arena_) context_.arena.reset();
    context_.busy = false;
  }

 private:
  CallContext& context_;
  bool keeps_arena_;
  // Shared: another thread's calls may drop the plan from the cache while this call runs.
  std::shared_ptr<const MemoryPlan> plan_;
};

}  // namespace

void Function::append_argument(std::vector<Tensor>& arguments, const Tensor& value) const {
  const FunctionImpl& f = impl();
  const size_t i = arguments.size();
  if (i < f.inputs.size() && f.inputs[i].sparse_format)
    throw TypeError("function: argument for input " + std::to_string(i) + " ('" + f.inputs[i].variable.get()->label() +
                    "') is a dense tensor " + (value.defined() ? value.str() : std::string("(empty)")) + ", but the input is a " +
                    sparse_format_name(*f.inputs[i].sparse_format) + " matrix; pass a SparseTensor (sparse_from_dense converts)");
  arguments.push_back(value);
}

void Function::append_argument(std::vector<Tensor>& arguments, const SparseTensor& value) const {
  const FunctionImpl& f = impl();
  const size_t i = arguments.size();
  if (i >= f.inputs.size() || !f.inputs[i].sparse_format)
    throw TypeError("function: argument for input " + std::to_string(i) +
                    (i < f.inputs.size() ? " ('" + f.inputs[i].variable.get()->label() + "' " + f.inputs[i].variable.type().str() + ")"
                                         : std::string(" (there are only " + std::to_string(f.inputs.size()) + " inputs)")) +
                    " is a sparse matrix " + (value.defined() ? value.str() : std::string("(empty)")) + ", but the input is dense; pass value.to_dense()");
  if (value.defined() && value.format() != *f.inputs[i].sparse_format)
    throw TypeError("function: input " + std::to_string(i) + " is a " + sparse_format_name(*f.inputs[i].sparse_format) +
                    " matrix but the argument is " + value.str() + "; convert it with to_" + sparse_format_name(*f.inputs[i].sparse_format) + "()");
  for (Tensor& part : sparse_parts(value)) arguments.push_back(std::move(part));
}

void Function::call(std::span<const Tensor> args, std::vector<Tensor>& results, Loc loc) const {
  run_call(args, results);
  for (Tensor& t : results) t = TensorBook::handed_over(std::move(t), loc);
}

void Function::run_call(std::span<const Tensor> args, std::vector<Tensor>& results) const {
  follow_num_threads();
  const InternalTensors internal;
  const FunctionImpl& f = impl();
  const Program& p = f.program();
  if (args.size() != f.inputs.size()) {
    std::string names;
    for (size_t i = 0; i < f.inputs.size(); ++i) names += (i ? ", " : "") + f.inputs[i].variable.get()->label();
    throw TypeError("function: expects " + std::to_string(f.inputs.size()) + " inputs (" + names + "), got " +
                    std::to_string(args.size()));
  }
  const size_t n_in = args.size();
  std::unique_ptr<CallContext> nested;
  CallContext& context = *f.acquire_context(nested);
  ContextUse use(context, f.keep_buffers);
  std::vector<Tensor>& slots = context.slots;
  if (slots.size() != static_cast<size_t>(p.n_slots)) slots.assign(p.n_slots, Tensor());
  for (size_t i = 0; i < n_in; ++i) slots[p.input_slots[i]] = f.trust_input ? args[i] : check_input(f, i, args[i]);
  // Which buffers this call may overwrite (lent[i] for input i, lent[n_in + j] for shared slot j),
  // decided by the bytes they cover: a borrowed input is workspace only when it overlaps no other
  // input and no shared variable's buffer (before this call holds any: the registry loads them).
  std::vector<bool>& lent = context.lent;
  lent.assign(n_in + p.shared_slots.size(), false);
  for (size_t i = 0; i < n_in; ++i) {
    if (!f.inputs[i].borrow) continue;
    const Tensor& value = slots[p.input_slots[i]];
    bool alone = !aliases_another_shared(nullptr, value);
    for (size_t j = 0; alone && j < n_in; ++j) alone = j == i || !value.shares_memory(slots[p.input_slots[j]]);
    lent[i] = alone;
  }
  // Shared variables: those the call updates are held for its whole run (their buffers may be
  // overwritten in place when no other handle refers to them and no input overlaps them), the
  // others read under a shared lock until all are taken, so that the call sees every variable
  // as it was at one moment; all in one global order, the containers' addresses, so that calls
  // holding several never deadlock.
  const size_t n_shared = p.shared_slots.size();
  std::vector<std::optional<SharedContainer::Hold>>& holds = context.holds;
  if (holds.size() != n_shared + f.unread_updated.size())
    holds = std::vector<std::optional<SharedContainer::Hold>>(n_shared + f.unread_updated.size());
  std::vector<std::optional<SharedContainer::Read>>& reads = context.reads;
  if (reads.size() != n_shared) reads = std::vector<std::optional<SharedContainer::Read>>(n_shared);
  std::vector<Tensor>& old_shared = context.old_shared;
  old_shared.resize(n_shared);
  const size_t n_order = f.shared_order.size();
  for (size_t n = 0; n < n_order; ++n) {
    // A large graph's variables lie scattered through memory: their containers are asked for a few
    // variables ahead, so that the waits overlap. (Not the handles they hold: reading one before
    // taking the container's lock would race with a store by another call.)
    if (n + kSharedAhead < n_order) __builtin_prefetch(f.containers_in_order[n + kSharedAhead]);
    const size_t i = f.shared_order[n];
    if (i >= n_shared) {  // updated, not read: held, so that its new value is stored in this order too
      holds[i].emplace(*f.unread_updated[i - n_shared]);
      continue;
    }
    SharedContainer& container = *p.shared_slots[i].second;
    if (f.update_of_shared[i] >= 0) {
      holds[i].emplace(container);
      bool alone = holds[i]->sole_owner();  // before this call takes its own handles
      for (size_t j = 0; alone && j < n_in; ++j) alone = !holds[i]->value().shares_memory(slots[p.input_slots[j]]);
      lent[n_in + i] = alone;
      old_shared[i] = holds[i]->value();
    } else {
      old_shared[i] = reads[i].emplace(container).value();
    }
    slots[p.shared_slots[i].first] = old_shared[i];
  }
  for (auto& read : reads) read.reset();
  for (const auto& [s, value] : p.constant_slots)
    if (!slots[s].defined()) slots[s] = value;  // kept from the last call

  if (!f.replacements.empty()) check_rewrites(f, slots);
  // Mode::debug(): first a run without any plan (with the op checks; it never overwrites an
  // input), whose results the planned run must reproduce: every in-place and sharing decision is
  // checked on this call's values.
  std::vector<Tensor> reference;
  if (f.op_checks) {
    reference = slots;
    run_planned(p, unplanned(p), reference, nullptr, {.checks = &*f.op_checks});
  }
  const auto plan = f.plan_for_call(slots, old_shared, lent);
  use.keep_arena_slots(plan);
  {  // the planned run; an arena that is not kept is released at the end of this block
    std::shared_ptr<Storage> arena = f.keep_buffers ? f.thread_arena(context, *plan, args, old_shared) : nullptr;
    const Program& schedule = f.schedules[static_cast<size_t>(plan->schedule)];
    const bool warm = f.keep_buffers && context.warm_plan == plan->id && context.warm_arena == arena.get();
    context.warm_plan = 0;  // until this run has ended without error
    const RunOptions options{.buffers = &context.run, .keeps_arena_slots = f.keep_buffers, .warm = warm};
    if (f.profiling) {
      InstructionTimes call(schedule.code.size());
      RunOptions profiled = options;
      profiled.times = &call;
      run_planned(schedule, *plan, slots, arena, profiled);
      std::lock_guard lock(f.profile_mutex);
      InstructionTimes& total = f.times[static_cast<size_t>(plan->schedule)];
      for (size_t k = 0; k < schedule.code.size(); ++k) {
        total.seconds[k] += call.seconds[k];
        total.bytes[k] += call.bytes[k];
        total.runs[k] += call.runs[k];
      }
      ++f.profiled_calls;
    } else {
      run_planned(schedule, *plan, slots, arena, options);
    }
    if (f.keep_buffers) {
      context.warm_plan = plan->id;
      context.warm_arena = arena.get();
    }
  }

  if (!reference.empty())
    for (size_t r = 0; r < p.result_slots.size(); ++r)
      if (auto difference = value_difference(reference[p.result_slots[r]], slots[p.result_slots[r]], f.result_in_single_precision[r]))
        throw Error("debug check: the memory plan changed " +
                    (r < f.outputs.size() ? "output " + std::to_string(r) : "update " + std::to_string(r - f.outputs.size())) +
                    ": " + *difference + " (in place or sharing decided wrongly; please report it)");

  // What no update or default output may alias: the caller's inputs, constants, values the plan
  // computed once (they serve every call), shared buffers. A borrowed output may alias the
  // caller's inputs and the function's own workspace, never kiln's values (constants, values
  // computed once, shared buffers). Results whose memory the plan made their own need no check,
  // and when all are, nothing is indexed.
  const auto owned = [&](size_t r) { return plan->result_owns_memory[r]; };
  bool all_owned = true;
  for (size_t r = 0; r < p.result_slots.size(); ++r) all_owned = all_owned && owned(r);
  MemoryIndex caller_values, kiln_values, shared_values;
  if (!all_owned) {
    for (const Tensor& a : args) caller_values.add(a);
    for (const auto& [s, value] : p.constant_slots) kiln_values.add(value);
    for (const Tensor& value : plan->value) kiln_values.add(value);
    for (size_t i = 0; i < n_shared; ++i) shared_values.add(old_shared[i], p.shared_slots[i].second);
  }

  // Updates: computed from old values above; now assigned, none aliasing another shared buffer,
  // the caller's memory or a constant.
  const size_t n_out = f.outputs.size();
  std::vector<Tensor>& new_values = context.new_values;
  new_values.clear();
  MemoryIndex assigned;
  for (size_t k = 0; k < f.updates.size(); ++k) {
    Tensor t = slots[p.result_slots[n_out + k]];
    const SharedContainer* self = f.updates[k].first.get()->shared.get();
    const bool aliased = !owned(n_out + k) && (caller_values.overlaps(t) || kiln_values.overlaps(t) || assigned.overlaps(t) ||
                                               shared_values.overlaps(t, self));
    new_values.push_back(aliased ? t.clone() : t);
    if (!all_owned) assigned.add(new_values.back());
  }
  // The old value of a variable the graph does not read is kept until the outputs exist: an
  // argument may view its bytes (Tensor::wrap) and be handed back.
  std::vector<Tensor> replaced;
  for (size_t k = 0; k < f.updates.size(); ++k) {
    SharedContainer::Hold& hold = *holds[f.hold_of_update[k]];
    if (f.shared_of_update[k] < 0) {
      replaced.push_back(hold.value());
      if (!all_owned) shared_values.add(replaced.back());  // kiln's memory, freed when the call ends
    }
    hold.store(new_values[k]);
  }

  // An output without borrow shares memory with no other output, before it or after it: a
  // borrowed one that overlaps it is copied.
  results.resize(n_out);
  MemoryIndex returned, returned_unborrowed;
  for (size_t j = 0; j < n_out; ++j) {
    Tensor t = slots[p.result_slots[j]];
    const bool borrow = f.outputs[j].borrow;
    if (!owned(j)) {
      const bool kiln_memory = kiln_values.overlaps(t) || shared_values.overlaps(t) || assigned.overlaps(t);
      const bool overlaps_what_it_may_not =
          borrow ? returned_unborrowed.overlaps(t) : caller_values.overlaps(t) || returned.overlaps(t);
      if (kiln_memory || overlaps_what_it_may_not) t = t.clone();
    }
    if (!all_owned) returned.add(t);
    if (!all_owned && !borrow) returned_unborrowed.add(t);
    results[j] = std::move(t);
  }
}

Function& Function::trust_input(bool trust) {
  impl();
  impl_->trust_input = trust;
  return *this;
}

std::vector<Tensor> Function::run_n(int64_t n) const {
  if (!impl().inputs.empty())
    throw TypeError("run_n: the function has " + std::to_string(impl_->inputs.size()) +
                    " explicit inputs; run_n is for functions whose inputs are all shared variables or givens");
  if (n < 1) throw TypeError("run_n: n must be at least 1, got " + std::to_string(n));
  std::vector<Tensor> last;
  for (int64_t i = 0; i < n; ++i) last = (*this)(std::vector<Tensor>{});
  return last;
}

MemoryReport Function::memory_report() const {
  const FunctionImpl& f = impl();
  std::shared_ptr<const MemoryPlan> plan;
  {
    std::lock_guard lock(f.plan_mutex);
    if (!f.last_plan)
      throw Error("memory_report: no call of this function has been planned yet (none was made, or each failed before "
                  "its plan); pass the input shapes: memory_report({{...}})");
    // The last call's plan itself: its inputs' and its shared variables' shapes (which may have
    // changed since, by set_value).
    plan = f.last_plan;
  }
  MemoryReport r = plan->report;
  const Program& p = f.program();
  r.persistent_bytes = 0;
  for (size_t i = 0; i < p.shared_slots.size(); ++i)
    r.persistent_bytes += shape_nbytes(plan->signature[p.input_slots.size() + i], p.slot_vars[p.shared_slots[i].first]->type.dtype);
  return r;
}

MemoryReport Function::memory_report(const std::vector<Shape>& input_shapes) const {
  const InternalTensors internal;
  const FunctionImpl& f = impl();
  if (input_shapes.size() != f.inputs.size())
    throw TypeError("memory_report: expects " + std::to_string(f.inputs.size()) + " input shapes, got " +
                    std::to_string(input_shapes.size()));
  for (size_t i = 0; i < input_shapes.size(); ++i) {
    const Type& type = f.inputs[i].variable.type();
    if (static_cast<int64_t>(input_shapes[i].size()) != type.ndim())
      throw TypeError("memory_report: " + input_label(f, i) + " expects " + std::to_string(type.ndim()) + " dimensions, got " +
                      shape_str(input_shapes[i]));
    for (int64_t d = 0; d < type.ndim(); ++d)
      if (type.broadcastable[d] && input_shapes[i][static_cast<size_t>(d)] != 1)
        throw ShapeError("memory_report: " + input_label(f, i) + " has a broadcastable dimension " + std::to_string(d) +
                         " that must be 1, got " + shape_str(input_shapes[i]));
    shape_numel(input_shapes[i]);  // no negative size, no count that overflows
  }
  std::vector<Shape> shared_shapes;
  int64_t persistent = 0;
  for (const auto& [s, container] : f.program().shared_slots) {
    const Tensor value = container->load();
    shared_shapes.push_back(value.shape());
    persistent += static_cast<int64_t>(value.nbytes());
  }
  MemoryReport r = f.plan_for(input_shapes, shared_shapes, f.all_lendable())->report;
  r.persistent_bytes = persistent;
  return r;
}

const CompileReport& Function::compile_report() const { return impl().report; }

Profile Function::profile() const {
  const FunctionImpl& f = impl();
  if (!f.profiling)
    throw Error("profile: this function was compiled without profiling; pass FunctionOptions{.profile = true}");
  std::lock_guard lock(f.profile_mutex);
  std::map<std::string, OpProfile> by_op;
  for (size_t i = 0; i < f.schedules.size(); ++i)
    for (size_t k = 0; k < f.schedules[i].code.size(); ++k) {
      const Instruction& ins = f.schedules[i].code[k];
      if (ins.kind != Instruction::Kind::run) continue;
      std::string name = ins.node->op->name();
      name = name.substr(0, name.find_first_of("{[("));
      OpProfile& entry = by_op[name];
      entry.op = name;
      entry.seconds += f.times[i].seconds[k];
      entry.bytes += f.times[i].bytes[k];
      entry.calls += f.times[i].runs[k];
    }
  Profile out;
  out.calls = f.profiled_calls;
  for (auto& [name, entry] : by_op) out.ops.push_back(entry);
  std::sort(out.ops.begin(), out.ops.end(), [](const OpProfile& a, const OpProfile& b) { return a.seconds > b.seconds; });
  return out;
}

std::string Function::graph_text() const {
  std::ostringstream s;
  debugprint(*this, s);
  return s.str();
}

void debugprint(const Function& f, std::ostream& os) { debugprint(f.impl().graph->outputs(), os); }
std::string to_dot(const Function& f) { return to_dot(f.impl().graph->outputs()); }

}  // namespace kiln

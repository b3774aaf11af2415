#pragma once
#include <atomic>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "compile/program.hpp"
#include "kiln/function.hpp"

namespace kiln {

inline constexpr int64_t kNoScratch = -2;

// Where every value of one call lives, decided before any kernel runs, for one signature (the
// shapes of the inputs and shared variables). Computed once per signature and reused.
struct MemoryPlan {
  // Tells plans apart for what a run caches per plan (RunBuffers::kept): never an address, which
  // a later plan may reuse.
  uint64_t id = next_id();
  static uint64_t next_id() {
    static std::atomic<uint64_t> count{0};
    return ++count;
  }
  // Flags are bytes, not std::vector<bool>: a call reads them per instruction and per slot.
  std::vector<Shape> signature;
  std::vector<std::optional<Shape>> shape;  // per slot; empty where it depends on data
  std::vector<Tensor> value;                // per slot: values computed while planning (shape arithmetic)
  std::vector<uint8_t> precomputed;         // per instruction: its outputs are in `value`, it does not run
  std::vector<int> precomputed_slots;       // the outputs of those instructions
  // Per instruction: the input position its output 0 is, unchanged, for this signature
  // (Op::forwards_input): it does not run, the slot takes that input's tensor. -1 otherwise.
  std::vector<int> forwarded;
  std::vector<int64_t> offset;              // per slot: byte offset in the arena, -1 when not there
  std::vector<int> reuse_input;             // per slot: the slot whose buffer it overwrites in place, or -1
  // Per instruction: where its executable's scratch lies in the arena (for that one instruction),
  // kNoScratch when it needs none, -1 when only the run can tell (sized and allocated then).
  std::vector<int64_t> scratch_offset;
  std::vector<int64_t> scratch_bytes;
  // Per slot: a value computed into the arena (or a view of one). Where the arena is kept between
  // calls, such a slot keeps its tensor too, and the next call finds the view already made.
  std::vector<uint8_t> in_arena;
  // Whether slot s keeps its tensor after a run: a value the plan holds (a constant, a value
  // computed once), or, where the arena is kept, a value in it.
  bool keeps_slot(size_t s, bool arena_kept) const { return value[s].defined() || (arena_kept && in_arena[s]); }
  // Per instruction: every output is a view of a value in the arena, so that in a kept arena the
  // view made by the last run still stands (RunOptions::warm).
  std::vector<uint8_t> views_arena;
  std::vector<bool> result_owns_memory;     // per result: its memory is the call's own, shared with no other
  std::vector<uint8_t> supplied;            // per slot: a result computed into the tensor the caller put there
  int64_t arena_bytes = 0;
  bool uses_arena = false;  // some value lives in the arena (perhaps every one of them empty)
  int largest_in_arena = -1;  // the slot of the largest value in the arena: an allocation error names it
  int schedule = 0;  // which of the function's candidate orders it plans (set by the function)
  MemoryReport report;
};

// What the caller lets the planner overwrite or keep, beyond its own temporaries.
struct PlanOptions {
  // Per input: In(x, {.borrow = true}), the caller's buffer is workspace (an op may overwrite it
  // in place where it dies).
  std::vector<bool> borrowed_inputs;
  // Per output: Out(borrow) with keep_buffers, it may stay in the arena (the next call overwrites
  // it, as borrowing allows).
  std::vector<bool> kept_outputs;
  // Per shared slot (Program::shared_slots): the result slot of the variable's update when this
  // call may overwrite the variable's buffer (it holds the variable and nobody else refers to the
  // buffer), else -1.
  std::vector<int> overwritable_shared;
  // The caller supplies each result's tensor (a row of a scan's stacked output) and the value is
  // computed into it: no result gets a buffer of the plan's, or another value's in place.
  bool results_supplied = false;
};

// Plans a program: shapes first (running the shape arithmetic), liveness (views extend what they
// view), in-place where an op declares it and the input is dead afterwards and not protected,
// sharing of buffers whose lifetimes do not overlap (best fit), all as offsets in one arena.
// Function outputs and update values are never placed in the arena (they outlive the call).
// An overwritable shared variable's buffer becomes workspace where its old value dies, after the
// last op that may fail on values: its new value is computed into it in place when it can be.
MemoryPlan plan_memory(const Program& program, const std::vector<Shape>& input_shapes,
                       const std::vector<Shape>& shared_shapes, const PlanOptions& options = {});
// Plans each schedule of one graph and keeps the one needing the least memory (its index in
// `schedule`); peaks, when given, gets each schedule's planned peak. Shapes and shape arithmetic
// are worked out once for all schedules that number their slots alike.
MemoryPlan plan_least_memory(std::span<const Program> schedules, const std::vector<Shape>& input_shapes,
                             const std::vector<Shape>& shared_shapes, const PlanOptions& options,
                             std::vector<int64_t>* peaks = nullptr);

// The plan as text, for KILN_DEBUG: the arena's size and, per value placed in it, its offset,
// bytes and the instruction that writes it; per instruction, its scratch.
std::string plan_text(const Program& program, const MemoryPlan& plan);

// The plan that decides nothing: every value allocated when it runs, nothing in place, nothing
// shared. Mode::debug() checks real plans against it.
MemoryPlan unplanned(const Program& program);

// Time and bytes per instruction, accumulated when profiling.
struct InstructionTimes {
  std::vector<double> seconds;
  std::vector<int64_t> bytes;
  std::vector<int64_t> runs;
  explicit InstructionTimes(size_t n = 0) : seconds(n, 0.0), bytes(n, 0), runs(n, 0) {}
};

// Mode::debug()'s checks around every kernel: no input modified, no undeclared alias, and
// optionally no NaN or infinity produced.
struct OpChecks {
  bool nan_guard = false;
};

// The run loop's vectors, kept by the caller between calls so that a steady call allocates none.
struct RunBuffers {
  std::vector<Tensor> before;  // Mode::debug()'s copies of an instruction's inputs
  std::vector<bool> kept_input;  // per slot, for RunOptions::keeps_inputs
  // Per slot, 1 where a run keeps the slot's tensor after its last reader (a value the plan
  // holds, a kept arena's slot, a kept input): one byte read per release, for the plan and the
  // options it was made for.
  std::vector<uint8_t> kept;
  std::vector<int> not_kept;  // the slots where kept is 0, in order
  uint64_t kept_for = 0;  // MemoryPlan::id
  uint8_t kept_options = 0;
  // Sets kept and not_kept for this plan and these options, unless they are set for them.
  void keep_for(const MemoryPlan& plan, std::span<const int> input_slots, size_t n_slots, bool keeps_arena_slots,
                bool keeps_inputs);
  bool kept_set_for(const MemoryPlan& plan, size_t n_slots, bool keeps_arena_slots, bool keeps_inputs) const;
  // Per slot: the parked handle (tensor/handles.hpp) of a view released by an earlier run, which
  // the view's executable re-views in place.
  std::vector<Tensor> parked;
  // Empties a slot: a handle nobody else shares is parked for reuse, any other dropped.
  void release(Tensor& slot, size_t s);
};

struct RunOptions {
  InstructionTimes* times = nullptr;  // profiling
  RunBuffers* buffers = nullptr;      // reused vectors (else the run makes its own)
  // The arena is kept between calls: slots in it keep their tensors after the call
  // (MemoryPlan::in_arena); every other slot is released as its last reader ends.
  bool keeps_arena_slots = false;
  // The kept arena's slots hold what the last run of this plan in this arena made (it ended
  // without error): outputs in the arena are used as they are, and views of values in the arena
  // are already set, so those instructions do not run.
  bool warm = false;
  // The input slots are the caller's, pointed at new values between runs: never released.
  bool keeps_inputs = false;
  const OpChecks* checks = nullptr;   // Mode::debug()'s op checks
  // Mode::debug()'s rewrite checks: a node that fails does not raise; its outputs stay undefined
  // and the message is kept per slot here, and the nodes reading them are skipped (the message
  // passed on). A value that may belong to a branch no call takes is judged only where it exists.
  std::vector<std::string>* failures = nullptr;
};

// Runs a program from a plan (src/compile/runtime.cpp): intermediates are views into one arena
// (allocated per call, or kept between calls when `arena` is given), precomputed instructions are
// skipped, jumps are followed.
void run_planned(const Program& program, const MemoryPlan& plan, std::vector<Tensor>& slots,
                 std::shared_ptr<Storage> arena, const RunOptions& options = {});

}  // namespace kiln

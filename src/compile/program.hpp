#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <unordered_map>

#include "graph/executable.hpp"
#include "graph/function_graph.hpp"
#include "tensor/flat_map.hpp"

namespace kiln {

// One step of a compiled function: a node's kernel over numbered value slots, or a jump (node is
// null): to `target` when the value in inputs[0] is false (jump_if_false: over an ifelse's then
// block), when it reads as `when` (jump_if: into a guard's block), or always. Its lists are views into arrays its Program
// owns, laid out in program order, so that a call walks the program's memory front to back.
struct Instruction {
  enum class Kind { run, jump_if_false, jump_if, jump };
  const Node* node = nullptr;
  std::shared_ptr<const Executable> executable;  // made once per node, shared by every schedule
  std::span<const int> inputs;
  std::span<const int> outputs;
  std::span<const int> release_after;      // slots whose last reader is this instruction
  std::span<const uint8_t> output_is_view;  // the op sets these outputs itself (its view_map)
  std::span<const DType> output_dtypes;     // read on every call: kept here, not in the graph
  Kind kind = Kind::run;
  int target = -1;
  bool when = true;          // the value jump_if jumps on
  bool conditional = false;  // inside a branch of an ifelse: it may not run
};

// What planning reads of an instruction's op, copied from it when the program is emitted: a call
// that plans reads the program's own arrays, front to back, and never the graph's nodes. Empty
// for a jump.
struct OpTraits {
  std::span<const std::pair<int, int>> views;    // Op::view_map
  std::span<const std::pair<int, int>> inplace;  // Op::inplace_options
  std::span<const int> shape_only_inputs;        // Op::shape_only_inputs
  std::span<const int> value_inputs;             // Op::needs_input_values
  bool may_fail_on_values = false;
  bool checks_values_before_writing = false;
  int ifelse_pairs = 0;  // an ifelse's n: inputs 1..n are its then values, n+1..2n its else values
};

// A flat list of instructions and where each kind of value lives. It owns the arrays its
// instructions view: it may be moved, never copied.
struct Program {
  Program() = default;
  Program(Program&&) noexcept = default;
  Program& operator=(Program&&) noexcept = default;
  Program(const Program&) = delete;
  Program& operator=(const Program&) = delete;

  int n_slots = 0;
  std::vector<Instruction> code;
  std::vector<int> input_slots;                                // per function input
  std::vector<std::pair<int, SharedContainer*>> shared_slots;  // read at the start of a call
  std::vector<std::pair<int, Tensor>> constant_slots;
  std::vector<int> result_slots;  // function outputs, then update values
  std::vector<const Variable*> slot_vars;
  std::vector<OpTraits> traits;  // per instruction
  // What the instructions' lists and traits view.
  std::vector<int> operand_slots;
  std::vector<uint8_t> view_flags;
  std::vector<DType> dtypes;
  std::vector<std::pair<int, int>> trait_pairs;
  std::vector<int> trait_ints;
};

// Each node's executable on the function's backend, made when a program first needs it.
class Executables {
 public:
  explicit Executables(MakeContext context = {}) : context_(context) {}
  std::shared_ptr<const Executable> of(const Node& node);

 private:
  MakeContext context_;
  FlatMap<const Node*, std::shared_ptr<const Executable>> made_;
};

// The value slots between a graph's inputs and results, numbered in one depth-first walk from the
// results (inputs first, results not otherwise reached last), so that the programs of all its
// schedules share them and none walks the graph again to number them.
struct SlotNumbering {
  SlotNumbering(const std::vector<Var>& inputs, const std::vector<Var>& results);
  int of(const Variable* v) const;

  std::vector<Node*> depth_first;  // the walk's topological order of the results' nodes
  FlatMap<const Variable*, int> slot_of;
  std::vector<const Variable*> slot_vars;
  std::vector<int> input_slots;
  std::vector<std::pair<int, SharedContainer*>> shared_slots;
  std::vector<std::pair<int, Tensor>> constant_slots;
};

// The program of the results' nodes in `order` (a topological order; depth-first when empty), which
// marks each value's last reader. The nodes that only one branch of an ifelse needs go into a
// block the program jumps over when the other branch is taken (nested ifelse: blocks within
// blocks).
Program emit_program(const SlotNumbering& slots, const std::vector<Var>& results, Executables& executables,
                     std::vector<Node*> order = {});

// The program as text, one instruction per line ("3: tanh  s4 <- s2   built at main.cpp:12"),
// for KILN_DEBUG.
std::string program_text(const Program& program);

// The next instruction after k: follows jumps (the condition is read from slots).
size_t next_instruction(const Program& program, size_t k, const std::vector<Tensor>& slots);

}  // namespace kiln

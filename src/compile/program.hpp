#pragma once
#include <memory>
#include <string>
#include <vector>

#include <unordered_map>

#include "graph/executable.hpp"
#include "graph/function_graph.hpp"

namespace kiln {

// One step of a compiled function: a node's kernel over numbered value slots, or a jump (node is
// null): to `target` when the value in inputs[0] is false (jump_if_false) or always.
struct Instruction {
  enum class Kind { run, jump_if_false, jump };
  const Node* node = nullptr;
  std::shared_ptr<const Executable> executable;  // made once per node, shared by every schedule
  std::vector<int> inputs;
  std::vector<int> outputs;
  std::vector<int> release_after;    // slots whose last reader is this instruction
  std::vector<bool> output_is_view;  // the op sets these outputs itself (its view_map)
  // The outputs' dtypes, read on every call: kept here, beside the instruction, rather than read
  // from the graph's variables, which lie scattered in memory.
  std::vector<DType> output_dtypes;
  Kind kind = Kind::run;
  int target = -1;
  bool conditional = false;  // inside a branch of an ifelse: it may not run
};

// A flat list of instructions and where each kind of value lives.
struct Program {
  int n_slots = 0;
  std::vector<Instruction> code;
  std::vector<int> input_slots;                                // per function input
  std::vector<std::pair<int, SharedContainer*>> shared_slots;  // read at the start of a call
  std::vector<std::pair<int, Tensor>> constant_slots;
  std::vector<int> result_slots;  // function outputs, then update values
  std::vector<const Variable*> slot_vars;
  size_t widest = 0;  // the most inputs or outputs of one instruction
};

// Each node's executable on the function's backend, made when a program first needs it.
class Executables {
 public:
  std::shared_ptr<const Executable> of(const Node& node);

 private:
  std::unordered_map<const Node*, std::shared_ptr<const Executable>> made_;
};

// Numbers the values between inputs and results, orders the nodes (in `order`, a topological
// order of the results' nodes; depth-first when empty) and marks each value's last reader. The
// numbering does not depend on the order: programs of one graph in different orders share their
// slots. The nodes that only one branch of an ifelse needs go into a block the program jumps over
// when the other branch is taken (nested ifelse: blocks within blocks).
Program emit_program(const std::vector<Var>& inputs, const std::vector<Var>& results, Executables& executables,
                     std::vector<Node*> order = {});

// The program as text, one instruction per line ("3: tanh  s4 <- s2   built at main.cpp:12"),
// for KILN_DEBUG.
std::string program_text(const Program& program);

// The next instruction after k: follows jumps (the condition is read from slots).
size_t next_instruction(const Program& program, size_t k, const std::vector<Tensor>& slots);

}  // namespace kiln

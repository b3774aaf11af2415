#pragma once
#include <span>
#include <string>
#include <vector>

#include "exec/backend.hpp"

namespace kiln {

// The one way a node runs, for everyone who needs a node's value: the program loop, constant
// folding, the shape arithmetic computed while planning, eager operations. An error comes back
// with the op, its inputs' dtypes and shapes and where the user built the node ("built at
// main.cpp:42"), with its type kept; std::bad_alloc becomes a MemoryError naming the op. Kernels
// enter OpenMP only through parallel_region, which carries an exception raised on any thread
// back here with its type.
void run_node(const Node& node, const Executable& executable, InputValues inputs, OutputValues outputs,
              std::span<std::byte> scratch);

// The shapes of a node's inputs and, by its executable's shape inference on these values, of its
// outputs. An
// undefined input (a value of a branch not taken) counts as unknown: empty shape, no value.
struct NodeShapes {
  std::vector<Shape> inputs, outputs;
};
NodeShapes node_shapes(const Node& node, const Executable& executable, InputValues inputs);

// A node run outside any plan: its outputs (views excepted) and its scratch allocated through the
// backend for this run, with the shapes inferred from the inputs.
std::vector<Tensor> evaluate_node(const Node& node, const Executable& executable, InputValues inputs,
                                  const Backend& backend);

// "\n  while running <op> on <inputs>, built at <file:line>": what run_node adds to an error.
std::string node_context(const Node& node, InputValues inputs);

// "f32(2,3), i64(4,)": how errors describe a node's inputs.
std::string describe_values(InputValues values);

}  // namespace kiln

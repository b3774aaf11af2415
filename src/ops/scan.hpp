#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "graph/executable.hpp"
#include "graph/op.hpp"

namespace kiln {

// What a list of taps asks of the loop. Of a sequence's taps: the smallest offset (step 0 reads
// the sequence's row 0 at that tap) and the spread (the rows a loop of n steps reads are n plus
// the spread). Of a fed-back output's taps: the rows before the first step's (lead_rows: the
// initial rows the taps reach back to; 0 for an output not fed back) and the rows its initial
// value holds (initial_rows: none, the initial value being the value itself, for the single tap
// -1; else the largest offset).
int first_tap(const std::vector<int>& taps);
int64_t tap_spread(const std::vector<int>& taps);
int64_t lead_rows(const std::vector<int>& output_taps);
int64_t initial_rows(const std::vector<int>& output_taps);

// What a scan's loop is: its body, an inner graph, and how the loop feeds it. The body's inputs,
// in order: one per sequence tap (the sequence's row at that offset from the current step), one per
// output tap (the output that many steps before), then one per non-sequence (the same every step).
// Its outputs: one per loop output (its value at this step), then the stop condition when there
// is one (until).
struct ScanLoop {
  InnerGraph body;
  std::vector<std::vector<int>> sequence_taps;  // per sequence, offsets from the current step
  std::vector<std::vector<int>> output_taps;    // per output, negative offsets; empty: not fed back
  size_t n_non_sequences = 0;
  bool steps_from_sequences = false;  // n_steps not given: the shortest sequence decides
  bool has_until = false;
  int64_t truncate_gradient = -1;  // back-propagation through the last this many steps; -1: all
  // Per output: 0 keeps every row; k > 0 only the last k (save memory: a ring buffer of k rows,
  // handed back in order). An output fed back keeps more rows than its taps reach back.
  std::vector<int64_t> keep;

  size_t n_sequences() const { return sequence_taps.size(); }
  size_t n_outputs() const { return output_taps.size(); }
  // Where the body's inputs for sequence i, output j and the non-sequences begin.
  size_t first_sequence_input(size_t i) const;
  size_t first_output_input(size_t j) const;
  size_t first_non_sequence_input() const;
  // The functions above, of sequence i's and output j's taps.
  int64_t spread(size_t i) const { return tap_spread(sequence_taps[i]); }
  int first_tap(size_t i) const { return kiln::first_tap(sequence_taps[i]); }
  int64_t initial_rows(size_t j) const { return kiln::initial_rows(output_taps[j]); }
  int64_t lead_rows(size_t j) const { return kiln::lead_rows(output_taps[j]); }
};

// scan: the outer inputs are [n_steps, sequences..., the initial value of each fed-back output...,
// non-sequences...]; n_steps is an i64 scalar (ignored when the sequences decide). The outputs are,
// per loop output, its values stacked on axis 0: the initial rows its taps read (lead_rows), then
// one row per step; then, when the loop has a stop condition, the number of steps it ran (the
// stacked outputs then hold room for the most steps it may run; RowRange hands back the rows
// written). Gradients read the values the steps read from the same rows.
class Scan final : public Op {
 public:
  explicit Scan(ScanLoop loop) : loop_(std::move(loop)) {}
  const ScanLoop& loop() const { return loop_; }
  void params(OpParams& out) const override;  // the loop's wiring and its body, node by node
  std::string name() const override;
  std::vector<Type> infer_types(const std::vector<Type>& inputs) const override;
  std::vector<Shape> infer_shapes(const std::vector<Shape>& inputs, const std::vector<const Tensor*>& values) const override;
  std::vector<int> needs_input_values() const override { return {0}; }
  std::vector<Var> L_op(const Node& node, const std::vector<Var>& output_grads) const override;
  // One loop carrying the tangents, reading the states from this loop's rows.
  std::optional<std::vector<Var>> R_op(const Node& node, const std::vector<Var>& input_tangents) const override;
  const InnerGraph* inner_graph() const override { return &loop_.body; }

  // The number of steps for these outer input shapes and n_steps; ShapeError, naming the scan,
  // when n_steps is negative or more than the sequences allow.
  int64_t steps(const std::vector<Shape>& inputs, int64_t n_steps) const;
  // The shapes of the outputs, from the shapes of the body's outputs for given input shapes.
  std::vector<Shape> stacked_shapes(const std::vector<Shape>& inputs, const std::vector<const Tensor*>& values,
                                    const std::function<std::vector<Shape>(const std::vector<Shape>&)>& body_shapes) const;
  // The shapes of the body's inputs for these outer input shapes.
  std::vector<Shape> body_input_shapes(const std::vector<Shape>& inputs) const;

 private:
  ScanLoop loop_;
};

// Rows [start, start + count) of x, start and count 0-d integer values: a view (the rows a loop
// that stopped early wrote).
class RowRange final : public Op {
 public:
  // reads_loop_steps: the rows a loop's steps read of a sequence, count being the loop's n_steps:
  // too few rows is then the loop's error, said in its terms.
  explicit RowRange(bool reads_loop_steps = false) : reads_loop_steps_(reads_loop_steps) {}
  void params(OpParams& p) const override { p << reads_loop_steps_; }
  std::string name() const override { return "row_range"; }
  std::vector<Type> infer_types(const std::vector<Type>& inputs) const override;
  std::vector<Shape> infer_shapes(const std::vector<Shape>& inputs, const std::vector<const Tensor*>& values) const override;
  std::vector<int> needs_input_values() const override { return {1, 2}; }
  std::vector<std::pair<int, int>> view_map() const override { return {{0, 0}}; }
  std::vector<Var> L_op(const Node& node, const std::vector<Var>& output_grads) const override;
  bool may_fail_on_values() const override { return false; }

 private:
  bool reads_loop_steps_;
};

// Its transpose: zeros in the shape of `like`, with g's rows at [start, start + rows of g).
class PadRows final : public Op {
 public:
  void params(OpParams&) const override {}
  std::string name() const override { return "pad_rows"; }
  std::vector<Type> infer_types(const std::vector<Type>& inputs) const override;
  std::vector<Shape> infer_shapes(const std::vector<Shape>& inputs, const std::vector<const Tensor*>& values) const override;
  std::vector<Var> L_op(const Node& node, const std::vector<Var>& output_grads) const override;
};

Var row_range(const Var& x, const Var& start, const Var& count, const Loc& loc, bool reads_loop_steps = false);
Var pad_rows(const Var& g, const Var& like, const Var& start, const Loc& loc);

// The shapes of a graph's outputs for inputs of these shapes, by each node's shape inference (the
// values it reads being constants or shapes); ShapeError where a shape depends on other values.
std::vector<Shape> infer_graph_shapes(const InnerGraph& graph, const std::vector<Shape>& input_shapes);

void add_scan_kernels(KernelTable& table);

}  // namespace kiln

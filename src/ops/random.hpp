#pragma once
#include "graph/executable.hpp"
#include "graph/op.hpp"
#include "kiln/random.hpp"

namespace kiln {

// choice: integers in [0, high), the positions RandomStreams::choice takes from its vector.
enum class Distribution : int { uniform, normal, integers, binomial, choice };

// Random numbers from a counter-based generator (Philox4x32-10): inputs the stream's state (a
// shared i64 vector {key, counter}), the output shape (a 1-D i64 value), then the distribution's
// parameters as 0-d values of the output dtype (uniform: low, high; normal: mean, std; integers:
// low, high; binomial: n, p). Outputs the values and the state after them. Element i of a draw
// takes block counter + i / per_block of the generator, so the numbers depend on the key, the
// counter and the shape only: the same for any thread count.
class RandomDraw final : public Op {
 public:
  RandomDraw(Distribution distribution, DType dtype, int64_t ndim) : distribution_(distribution), dtype_(dtype), ndim_(ndim) {}
  Distribution distribution() const { return distribution_; }
  DType dtype() const { return dtype_; }
  void params(OpParams& out) const override { out << distribution_ << dtype_ << ndim_; }
  std::string name() const override;
  std::vector<Type> infer_types(const std::vector<Type>& inputs) const override;
  std::vector<Shape> infer_shapes(const std::vector<Shape>& inputs, const std::vector<const Tensor*>& values) const override;
  std::vector<int> needs_input_values() const override { return {1}; }
  std::vector<Var> L_op(const Node& node, const std::vector<Var>& output_grads) const override;
  std::optional<std::pair<int, int>> state_update() const override { return std::pair<int, int>{0, 1}; }
  // The next state may be written over the state read (the kernel reads it first): a steady call
  // advances a stream in its shared variable's own buffer.
  std::vector<std::pair<int, int>> inplace_options() const override { return {{1, 0}}; }
  bool may_fail_on_values() const override { return true; }  // a negative n, a p outside [0, 1]
  bool checks_values_before_writing() const override { return true; }

 private:
  Distribution distribution_;
  DType dtype_;
  int64_t ndim_;  // of the values: the shape vector's length
};

void add_random_kernels(KernelTable& table);

}  // namespace kiln

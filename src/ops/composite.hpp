#pragma once
#include <optional>

#include "graph/executable.hpp"
#include "graph/op.hpp"
#include "ops/reduce.hpp"
#include "ops/scalar_ops.hpp"

namespace kiln {

// One step of a fused program: op applied to registers `args`. Registers 0..n_inputs-1 hold the
// inputs; instruction k writes register n_inputs + k.
struct ScalarInstruction {
  ScalarOp op;
  DType dtype;  // of the result
  std::vector<int> args;
  std::string origin = {};  // the fused node's ("built at main.cpp:7"), for errors; not part of the op's meaning
};

// A sum or mean over all axes, a leading run of axes or a trailing run of axes (the ones a
// row-major walk can accumulate without revisiting outputs).
struct FusedReduction {
  ReduceKind kind;
  std::vector<int64_t> axes;
  bool keepdims;
};

// A connected group of elementwise ops fused into one pass over memory: the program runs block
// by block (cache-sized), temporaries never reach main memory, and an optional reduction
// accumulates the result instead of writing it.
//
// Output 0 is the last instruction's register. Without a reduction, extra_outputs name further
// instruction registers that are written too (output 1, 2, ...), each in its instruction's dtype
// and the result's broadcast pattern: values needed outside the group (an optimizer's new state
// beside its new parameter) come out of the same pass instead of a pass of their own.
class Composite final : public Op {
 public:
  Composite(int n_inputs, std::vector<ScalarInstruction> program, Type result, std::optional<FusedReduction> reduction,
            std::vector<int> extra_outputs = {});
  const std::vector<ScalarInstruction>& program() const { return program_; }
  const std::optional<FusedReduction>& reduction() const { return reduction_; }
  // The registers of outputs 1, 2, ...
  const std::vector<int>& extra_outputs() const { return extra_outputs_; }
  // The inputs extra output e is computed from: its shape is theirs broadcast, which may be
  // smaller than the result's when a dimension not declared broadcastable is 1 at run time.
  const std::vector<int>& inputs_of_extra_output(size_t e) const { return extra_inputs_[e]; }
  void params(OpParams& out) const override;  // the whole program: ops, wiring, dtypes, outputs, reduction
  std::string name() const override;
  std::vector<Type> infer_types(const std::vector<Type>& inputs) const override;
  std::vector<Shape> infer_shapes(const std::vector<Shape>& inputs, const std::vector<const Tensor*>&) const override;
  std::vector<Var> L_op(const Node& node, const std::vector<Var>&) const override;
  // Each output may overwrite an input of its shape and dtype: a block of the inputs is read before
  // that block of the result is written (except an n-ary last instruction's later operands), extra
  // outputs are written after the whole block's program ran, and a reduction writes only at the end.
  std::vector<std::pair<int, int>> inplace_options() const override;
  // Inputs the program reads only as fill's shape operand.
  std::vector<int> shape_only_inputs() const override;

  // Whether a reduction over these axes of an ndim-dimensional value can be fused.
  static bool fusable_axes(const std::vector<int64_t>& axes, int64_t ndim);
  // Where inputs of these shapes first fail to broadcast: "; in add, built at main.cpp:7, (3,) vs
  // (2,)", or empty.
  std::string where_broadcast_fails(const std::vector<Shape>& inputs) const;
  bool may_fail_on_values() const override { return false; }

 private:
  int n_inputs_;
  std::vector<ScalarInstruction> program_;
  Type result_;
  std::optional<FusedReduction> reduction_;
  std::vector<int> extra_outputs_;
  std::vector<std::vector<int>> extra_inputs_;
};

void add_composite_kernels(KernelTable& table);

}  // namespace kiln

#pragma once
#include <vector>

#include "graph/executable.hpp"
#include "graph/node.hpp"
#include "graph/op.hpp"
#include "ops/scalar_ops.hpp"

namespace kiln {


// One op for all of them: NumPy broadcasting over inputs of equal ndim and (after the builder's
// casts) equal dtype; fill's first input only gives the shape, where's first is the b8 condition.
// add and mul take two or more inputs (flattened chains).
class Elemwise final : public Op {
 public:
  explicit Elemwise(ScalarOp op, DType cast_to = DType::f32, int arity = 0)
      : op_(op), cast_to_(cast_to), arity_(arity ? arity : scalar_op_arity(op)) {}
  ScalarOp scalar_op() const { return op_; }
  DType cast_to() const { return cast_to_; }
  void params(OpParams& out) const override { out << op_ << cast_to_ << arity_; }
  std::string name() const override;
  std::vector<Type> infer_types(const std::vector<Type>& inputs) const override;
  std::vector<Shape> infer_shapes(const std::vector<Shape>& inputs, const std::vector<const Tensor*>&) const override;
  std::vector<Var> L_op(const Node& node, const std::vector<Var>& output_grads) const override;
  std::vector<std::pair<int, int>> inplace_options() const override;
  std::vector<int> shape_only_inputs() const override { return op_ == ScalarOp::fill ? std::vector<int>{0} : std::vector<int>{}; }
  bool may_fail_on_values() const override { return false; }

 private:
  ScalarOp op_;
  DType cast_to_;
  int arity_;
};


// Builds an elementwise node: promotes dtypes (docs/ops.md), pads lower-rank inputs with
// broadcastable axes, casts inputs to the common dtype.
Var elemwise(ScalarOp op, std::vector<Var> inputs, const Loc& loc);
// value broadcast to like's shape (like's values are not read).
Var fill_like(const Var& like, const Var& value, const Loc& loc);
// The NumPy result dtype of combining these values (bare numbers are weak).
DType result_dtype(const std::vector<Var>& inputs);
// A weak integer combined with an i32 tensor is cast to i32: TypeError when it does not fit (a
// wrapped number would make comparisons and sums silently wrong).
void check_fits_i32(int64_t number, const Loc& loc);

void add_elemwise_kernels(KernelTable& table);

}  // namespace kiln

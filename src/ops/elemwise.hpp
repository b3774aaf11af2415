#pragma once
#include <vector>

#include "graph/node.hpp"
#include "graph/op.hpp"

namespace kiln {

// The closed set of scalar operations every elementwise node applies (tinygrad's few primitives).
enum class ScalarOp {
  neg, exp, log, log1p, expm1, sqrt, sqr, tanh, sigmoid, softplus, relu, abs, sign, sin, cos, cast,
  add, sub, mul, div, pow, maximum, minimum, lt, le, gt, ge, eq, ne, fill, where
};
const char* scalar_op_name(ScalarOp op);
int scalar_op_arity(ScalarOp op);

// One op for all of them: NumPy broadcasting over inputs of equal ndim and (after the builder's
// casts) equal dtype; fill's first input only gives the shape, where's first is the b8 condition.
// add and mul take two or more inputs (flattened chains).
class Elemwise final : public Op {
 public:
  explicit Elemwise(ScalarOp op, DType cast_to = DType::f32, int arity = 0)
      : op_(op), cast_to_(cast_to), arity_(arity ? arity : scalar_op_arity(op)) {}
  ScalarOp scalar_op() const { return op_; }
  DType cast_to() const { return cast_to_; }
  std::string name() const override;
  std::vector<Type> infer_types(const std::vector<Type>& inputs) const override;
  std::vector<Shape> infer_shapes(const std::vector<Shape>& inputs, const std::vector<const Tensor*>&) const override;
  void perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const override;
  std::vector<Var> L_op(const Node& node, const std::vector<Var>& output_grads) const override;
  std::vector<std::pair<int, int>> inplace_options() const override;

 private:
  ScalarOp op_;
  DType cast_to_;
  int arity_;
};

bool is_variadic(ScalarOp op);  // add, mul

// Builds an elementwise node: promotes dtypes (docs/ops.md), pads lower-rank inputs with
// broadcastable axes, casts inputs to the common dtype.
Var elemwise(ScalarOp op, std::vector<Var> inputs, const Loc& loc);
// value broadcast to like's shape (like's values are not read).
Var fill_like(const Var& like, const Var& value, const Loc& loc);
// The NumPy result dtype of combining these values (bare numbers are weak).
DType result_dtype(const std::vector<Var>& inputs);

}  // namespace kiln

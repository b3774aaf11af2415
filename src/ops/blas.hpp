#pragma once
#include "graph/op.hpp"

namespace kiln {

// C = alpha * op(A) * op(B) + beta * C, row-major, for f32 and f64. The backend is chosen per
// call by shape (docs/performance.md has the measurements behind the choice).
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const Tensor& a,
          const Tensor& b, double beta, Tensor& c);

// NumPy dot for inputs of up to 2 dimensions (0-d inputs are handled as multiplication by the builder).
class Dot final : public Op {
 public:
  void params(OpParams&) const override {}
  std::string name() const override { return "dot"; }
  std::vector<Type> infer_types(const std::vector<Type>& inputs) const override;
  std::vector<Shape> infer_shapes(const std::vector<Shape>& inputs, const std::vector<const Tensor*>&) const override;
  void perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const override;
  std::vector<Var> L_op(const Node& node, const std::vector<Var>& output_grads) const override;
  bool may_fail_on_values() const override { return false; }
};

// beta * c + alpha * dot(a, b) in one call of the matrix product (c broadcast to the product's
// shape; alpha and beta 0-d). specialize builds it from dot, scaling and addition.
class Gemm final : public Op {
 public:
  void params(OpParams&) const override {}
  std::string name() const override { return "gemm"; }
  std::vector<Type> infer_types(const std::vector<Type>& inputs) const override;
  std::vector<Shape> infer_shapes(const std::vector<Shape>& inputs, const std::vector<const Tensor*>&) const override;
  void perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const override;
  std::vector<Var> L_op(const Node& node, const std::vector<Var>& output_grads) const override;
  std::vector<std::pair<int, int>> inplace_options() const override { return {{0, 0}}; }
  bool may_fail_on_values() const override { return false; }
};

// NumPy matmul of two inputs of equal ndim >= 3: a batch of matrix products, batch axes broadcast.
class BatchedMatmul final : public Op {
 public:
  void params(OpParams&) const override {}
  std::string name() const override { return "batched_matmul"; }
  std::vector<Type> infer_types(const std::vector<Type>& inputs) const override;
  std::vector<Shape> infer_shapes(const std::vector<Shape>& inputs, const std::vector<const Tensor*>&) const override;
  void perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const override;
  std::vector<Var> L_op(const Node& node, const std::vector<Var>& output_grads) const override;
  bool may_fail_on_values() const override { return false; }
};

}  // namespace kiln

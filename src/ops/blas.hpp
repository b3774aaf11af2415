#pragma once
#include <span>

#include "graph/executable.hpp"
#include "graph/op.hpp"

namespace kiln {

// A matrix operand: element (i, j) at data[i * row_stride + j * col_stride] (in elements; 0
// broadcasts).
struct MatrixView {
  const std::byte* data;
  int64_t rows, cols, row_stride, col_stride;
};

// The scratch gemm needs for a product of these sizes (kiln's own kernels pack B's last columns).
int64_t gemm_scratch_bytes(DType dtype, int64_t m, int64_t n, int64_t k);

// C = alpha * A B + beta * C for f32 and f64, C row-major with leading dimension ldc (beta = 0
// ignores what C held, NaN included). The kernel is chosen by shape (docs/performance.md has the
// measurements behind the choice); any strides work, those without a unit stride through a copy
// in blocks on the stack.
void gemm(DType dtype, int64_t m, int64_t n, int64_t k, double alpha, const MatrixView& a, const MatrixView& b, double beta,
          std::byte* c, int64_t ldc, std::span<std::byte> scratch);
// The same on 2-D tensors, scratch allocated here: for tests and benchmarks, not for kernels.
void gemm(double alpha, const Tensor& a, const Tensor& b, double beta, const Tensor& c);

// NumPy dot for inputs of up to 2 dimensions (0-d inputs are handled as multiplication by the builder).
class Dot final : public Op {
 public:
  void params(OpParams&) const override {}
  std::string name() const override { return "dot"; }
  std::vector<Type> infer_types(const std::vector<Type>& inputs) const override;
  std::vector<Shape> infer_shapes(const std::vector<Shape>& inputs, const std::vector<const Tensor*>&) const override;
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
  std::vector<Var> L_op(const Node& node, const std::vector<Var>& output_grads) const override;
  bool may_fail_on_values() const override { return false; }
};

void add_blas_kernels(KernelTable& table);

}  // namespace kiln

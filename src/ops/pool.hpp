#pragma once
#include <array>

#include "graph/executable.hpp"
#include "graph/op.hpp"

namespace kiln {

// The windows of a 2-D pooling, every option resolved (the stride defaulted to the window): the
// parameters all four pooling ops share, so that a gradient sees the windows its pooling saw.
struct PoolWindows {
  std::array<int64_t, 2> window{2, 2}, stride{2, 2}, padding{0, 0};
  bool ignore_border = true;
  bool count_include_pad = true;  // average pooling only; max pooling keeps it true

  // The output's height and width for an input of this height and width: with ignore_border,
  // floor((in + 2 pad - window) / stride) + 1; without, rounded up, less a last window that would
  // start in the right padding (PyTorch's ceil_mode). ShapeError naming `op`, the input shape and
  // the options when the window does not fit in the padded input, or the images are empty (H or W
  // is 0). Every window then holds an input element.
  std::array<int64_t, 2> output_size(const Shape& input, const std::string& op) const;
  // "window=2x2,stride=2x2,padding=0x0,ignore_border=true": for names and error messages.
  std::string str() const;
  void write(OpParams& out) const;
};

enum class PoolMode : uint8_t { max, avg };

// What every pooling op has: its windows, as its parameters; values never make it fail.
class PoolOp : public Op {
 public:
  explicit PoolOp(PoolWindows windows) : windows_(windows) {}
  const PoolWindows& windows() const { return windows_; }
  void params(OpParams& out) const override { windows_.write(out); }
  bool may_fail_on_values() const override { return false; }

 protected:
  std::string named(const char* what) const { return std::string(what) + "{" + windows_.str() + "}"; }

 private:
  PoolWindows windows_;
};

// max_pool2d / avg_pool2d of an N x C x H x W input (f32 or f64), each channel apart. Max pads with
// -infinity and propagates NaN (NumPy's max); average divides by the window's size within the
// padded input (count_include_pad) or by its count of input elements.
class Pool2d final : public PoolOp {
 public:
  Pool2d(PoolMode mode, PoolWindows windows);
  PoolMode mode() const { return mode_; }
  void params(OpParams& out) const override;
  std::string name() const override;
  std::vector<Type> infer_types(const std::vector<Type>& inputs) const override;
  std::vector<Shape> infer_shapes(const std::vector<Shape>& inputs, const std::vector<const Tensor*>&) const override;
  // Max: the output's gradient goes to each window's first maximum (MaxPool2dGrad). Average: it
  // is spread over each window (AvgPool2dGrad).
  std::vector<Var> L_op(const Node& node, const std::vector<Var>& output_grads) const override;

 private:
  PoolMode mode_;
};

// The gradient of max pooling, (x, y, gy) -> gx: gy[window] added at the window's first maximum,
// found again from x and the pooled y (the first element equal to y, or the first NaN when y is
// NaN); zero elsewhere.
class MaxPool2dGrad final : public PoolOp {
 public:
  using PoolOp::PoolOp;
  std::string name() const override { return named("max_pool2d_grad"); }
  std::vector<Type> infer_types(const std::vector<Type>& inputs) const override;
  std::vector<Shape> infer_shapes(const std::vector<Shape>& inputs, const std::vector<const Tensor*>&) const override;
  // Linear in gy (its transpose is MaxPool2dGradGrad); piecewise constant in x and y, whose
  // gradients are zero.
  std::vector<Var> L_op(const Node& node, const std::vector<Var>& output_grads) const override;
};

// The gradient of MaxPool2dGrad with respect to gy, (x, y, ggx) -> ggy of y's shape: ggx read at
// each window's first maximum. It is also max pooling's Jacobian-vector product.
class MaxPool2dGradGrad final : public PoolOp {
 public:
  using PoolOp::PoolOp;
  std::string name() const override { return named("max_pool2d_grad_grad"); }
  std::vector<Type> infer_types(const std::vector<Type>& inputs) const override;
  std::vector<Shape> infer_shapes(const std::vector<Shape>& inputs, const std::vector<const Tensor*>&) const override;
  // Linear in ggx (its transpose is MaxPool2dGrad); zero gradients for x and y.
  std::vector<Var> L_op(const Node& node, const std::vector<Var>& output_grads) const override;
};

// The gradient of average pooling, (gy, x) -> gx: gy[window] / divisor added to each input element
// of the window. x gives the shape alone.
class AvgPool2dGrad final : public PoolOp {
 public:
  using PoolOp::PoolOp;
  std::string name() const override { return named("avg_pool2d_grad"); }
  std::vector<Type> infer_types(const std::vector<Type>& inputs) const override;
  std::vector<Shape> infer_shapes(const std::vector<Shape>& inputs, const std::vector<const Tensor*>&) const override;
  // Linear in gy: its transpose is average pooling with the same windows. x's gradient is zero.
  std::vector<Var> L_op(const Node& node, const std::vector<Var>& output_grads) const override;
  std::vector<int> shape_only_inputs() const override { return {1}; }
};

void add_pool_kernels(KernelTable& table);

}  // namespace kiln

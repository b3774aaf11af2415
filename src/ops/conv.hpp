#pragma once
#include "graph/executable.hpp"
#include "graph/op.hpp"
#include "kiln/conv.hpp"

namespace kiln {

// The sizes of one convolution, resolved for concrete input and filter shapes.
struct ConvGeometry {
  int64_t batch, channels, height, width;  // the input
  int64_t filters, kernel_h, kernel_w;     // the filters: filters x (channels / groups) x kernel_h x kernel_w
  int64_t groups;
  int64_t stride_h, stride_w, dilation_h, dilation_w;
  int64_t pad_top, pad_left;  // the bottom and right padding are what out_h and out_w leave
  int64_t out_h, out_w;

  int64_t group_channels() const { return channels / groups; }
  int64_t group_filters() const { return filters / groups; }
  int64_t patch() const { return group_channels() * kernel_h * kernel_w; }  // one output pixel's inputs, per group
  int64_t pixels() const { return out_h * out_w; }
  Shape input_shape() const { return {batch, channels, height, width}; }
  Shape filter_shape() const { return {filters, group_channels(), kernel_h, kernel_w}; }
  Shape output_shape() const { return {batch, filters, out_h, out_w}; }
};

// What a convolution and its two gradients share: the options, and the geometry they give for
// concrete shapes.
class ConvOp : public Op {
 public:
  explicit ConvOp(const Conv2dOptions& options) : options_(options) {}
  const Conv2dOptions& options() const { return options_; }
  void params(OpParams& out) const override;
  // The geometry of input x filters; ShapeError naming the op and both shapes when they do not fit.
  ConvGeometry geometry(const Shape& input, const Shape& filters) const;
  // The same, for a gradient given the output's gradient, checked to have the output's shape.
  ConvGeometry gradient_geometry(const Shape& input, const Shape& filters, const Shape& output_gradient) const;
  bool may_fail_on_values() const override { return false; }

 protected:
  std::string name_with(const char* what) const;  // "conv2d{stride=2x2,padding=same}"
  // input and filters float 4-D of one dtype; the output type follows.
  Type checked_type(const Type& input, const Type& filters, const char* input_role, const char* filter_role) const;

 private:
  Conv2dOptions options_;
};

// conv2d(x, w): x N x C x H x W, w O x C/groups x KH x KW.
class Conv2d final : public ConvOp {
 public:
  using ConvOp::ConvOp;
  std::string name() const override { return name_with("conv2d"); }
  std::vector<Type> infer_types(const std::vector<Type>& inputs) const override;
  std::vector<Shape> infer_shapes(const std::vector<Shape>& inputs, const std::vector<const Tensor*>&) const override;
  std::vector<Var> L_op(const Node& node, const std::vector<Var>& output_grads) const override;
  // Bilinear: conv(tx, w) + conv(x, tw).
  std::optional<std::vector<Var>> R_op(const Node& node, const std::vector<Var>& input_tangents) const override;
};

// The gradient of conv2d for its input: (gy, w, x) -> gx, x read for its shape alone (a stride
// above 1 leaves the input's size ambiguous from gy's).
class Conv2dGradInput final : public ConvOp {
 public:
  using ConvOp::ConvOp;
  std::string name() const override { return name_with("conv2d_grad_input"); }
  std::vector<Type> infer_types(const std::vector<Type>& inputs) const override;
  std::vector<Shape> infer_shapes(const std::vector<Shape>& inputs, const std::vector<const Tensor*>&) const override;
  std::vector<Var> L_op(const Node& node, const std::vector<Var>& output_grads) const override;
  std::vector<int> shape_only_inputs() const override { return {2}; }
};

// The gradient of conv2d for its filters: (x, gy, w) -> gw, w read for its shape alone.
class Conv2dGradFilters final : public ConvOp {
 public:
  using ConvOp::ConvOp;
  std::string name() const override { return name_with("conv2d_grad_filters"); }
  std::vector<Type> infer_types(const std::vector<Type>& inputs) const override;
  std::vector<Shape> infer_shapes(const std::vector<Shape>& inputs, const std::vector<const Tensor*>&) const override;
  std::vector<Var> L_op(const Node& node, const std::vector<Var>& output_grads) const override;
  std::vector<int> shape_only_inputs() const override { return {2}; }
};

void add_conv_kernels(KernelTable& table);

}  // namespace kiln

#pragma once
#include "graph/executable.hpp"
#include "graph/op.hpp"

namespace kiln {

// softmax / log_softmax along one axis, computed stably (the row maximum is subtracted first).
class Softmax final : public Op {
 public:
  Softmax(int64_t axis, bool log) : axis_(axis), log_(log) {}
  int64_t axis() const { return axis_; }
  bool is_log() const { return log_; }
  void params(OpParams& out) const override { out << axis_ << log_; }
  std::string name() const override { return std::string(log_ ? "log_softmax" : "softmax") + "{axis=" + std::to_string(axis_) + "}"; }
  std::vector<Type> infer_types(const std::vector<Type>& inputs) const override;
  std::vector<Shape> infer_shapes(const std::vector<Shape>& inputs, const std::vector<const Tensor*>&) const override;
  std::vector<Var> L_op(const Node& node, const std::vector<Var>& output_grads) const override;
  // softmax may overwrite its input (each element is read before it is written); log_softmax reads
  // its input again after writing, so it may not.
  std::vector<std::pair<int, int>> inplace_options() const override {
    return log_ ? std::vector<std::pair<int, int>>{} : std::vector<std::pair<int, int>>{{0, 0}};
  }
  bool may_fail_on_values() const override { return false; }

 private:
  int64_t axis_;
  bool log_;
};

// The gradient of softmax along an axis from (gy, y): (gy - sum(gy * y, axis)) * y, one node so
// that stabilize can recognise it after cross-entropy.
class SoftmaxGrad final : public Op {
 public:
  explicit SoftmaxGrad(int64_t axis) : axis_(axis) {}
  int64_t axis() const { return axis_; }
  void params(OpParams& out) const override { out << axis_; }
  std::string name() const override { return "softmax_grad{axis=" + std::to_string(axis_) + "}"; }
  std::vector<Type> infer_types(const std::vector<Type>& inputs) const override;
  std::vector<Shape> infer_shapes(const std::vector<Shape>& inputs, const std::vector<const Tensor*>&) const override;
  std::vector<Var> L_op(const Node& node, const std::vector<Var>& output_grads) const override;
  bool may_fail_on_values() const override { return false; }

 private:
  int64_t axis_;
};

// -log(probs[i, labels[i]]) per row; probs is N x C, labels N integers in [0, C).
class CrossEntropy final : public Op {
 public:
  void params(OpParams&) const override {}
  std::string name() const override { return "categorical_crossentropy"; }
  std::vector<Type> infer_types(const std::vector<Type>& inputs) const override;
  std::vector<Shape> infer_shapes(const std::vector<Shape>& inputs, const std::vector<const Tensor*>&) const override;
  std::vector<Var> L_op(const Node& node, const std::vector<Var>& output_grads) const override;
};

// Its gradient with respect to probs: -g[i] / probs[i, labels[i]] at the label, 0 elsewhere.
class CrossEntropyGrad final : public Op {
 public:
  void params(OpParams&) const override {}
  std::string name() const override { return "categorical_crossentropy_grad"; }
  std::vector<Type> infer_types(const std::vector<Type>& inputs) const override;
  std::vector<Shape> infer_shapes(const std::vector<Shape>& inputs, const std::vector<const Tensor*>&) const override;
  std::vector<Var> L_op(const Node& node, const std::vector<Var>& output_grads) const override;
};

// onehot(labels, like): 1 at [i, labels[i]], 0 elsewhere, with like's shape (N x C) and dtype.
// Only like's shape is read, so no gradient flows to it.
class OneHot final : public Op {
 public:
  void params(OpParams&) const override {}
  std::string name() const override { return "onehot"; }
  std::vector<Type> infer_types(const std::vector<Type>& inputs) const override;
  std::vector<Shape> infer_shapes(const std::vector<Shape>& inputs, const std::vector<const Tensor*>&) const override;
  std::vector<Var> L_op(const Node&, const std::vector<Var>&) const override { return {Var(), Var()}; }
};

// categorical_crossentropy(softmax(x), labels) in one stable op: logsumexp(x_i) - x_i[label].
class CrossEntropySoftmax final : public Op {
 public:
  void params(OpParams&) const override {}
  std::string name() const override { return "crossentropy_softmax"; }
  std::vector<Type> infer_types(const std::vector<Type>& inputs) const override;
  std::vector<Shape> infer_shapes(const std::vector<Shape>& inputs, const std::vector<const Tensor*>&) const override;
  std::vector<Var> L_op(const Node& node, const std::vector<Var>& output_grads) const override;
};

// Its gradient with respect to x from (g, x, labels): g[i] * (softmax(x)_i - onehot(labels[i])).
class CrossEntropySoftmaxGrad final : public Op {
 public:
  void params(OpParams&) const override {}
  std::string name() const override { return "crossentropy_softmax_grad"; }
  std::vector<Type> infer_types(const std::vector<Type>& inputs) const override;
  std::vector<Shape> infer_shapes(const std::vector<Shape>& inputs, const std::vector<const Tensor*>&) const override;
  std::vector<Var> L_op(const Node& node, const std::vector<Var>& output_grads) const override;
  // The result may overwrite the logits: a row is read whole (its log-sum-exp) before it is
  // written, each element from the same element.
  std::vector<std::pair<int, int>> inplace_options() const override { return {{0, 1}}; }
};

void add_nnet_kernels(KernelTable& table);

}  // namespace kiln

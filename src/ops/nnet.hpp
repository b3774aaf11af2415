#pragma once
#include "graph/op.hpp"

namespace kiln {

// softmax / log_softmax along one axis, computed stably (the row maximum is subtracted first).
class Softmax final : public Op {
 public:
  Softmax(int64_t axis, bool log) : axis_(axis), log_(log) {}
  std::string name() const override { return std::string(log_ ? "log_softmax" : "softmax") + "{axis=" + std::to_string(axis_) + "}"; }
  std::vector<Type> infer_types(const std::vector<Type>& inputs) const override;
  std::vector<Shape> infer_shapes(const std::vector<Shape>& inputs, const std::vector<const Tensor*>&) const override;
  void perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const override;
  std::vector<Var> L_op(const Node& node, const std::vector<Var>& output_grads) const override;
  std::vector<std::pair<int, int>> inplace_options() const override { return {{0, 0}}; }

 private:
  int64_t axis_;
  bool log_;
};

// -log(probs[i, labels[i]]) per row; probs is N x C, labels N integers in [0, C).
class CrossEntropy final : public Op {
 public:
  std::string name() const override { return "categorical_crossentropy"; }
  std::vector<Type> infer_types(const std::vector<Type>& inputs) const override;
  std::vector<Shape> infer_shapes(const std::vector<Shape>& inputs, const std::vector<const Tensor*>&) const override;
  void perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const override;
  std::vector<Var> L_op(const Node& node, const std::vector<Var>& output_grads) const override;
};

// Its gradient with respect to probs: -g[i] / probs[i, labels[i]] at the label, 0 elsewhere.
class CrossEntropyGrad final : public Op {
 public:
  std::string name() const override { return "categorical_crossentropy_grad"; }
  std::vector<Type> infer_types(const std::vector<Type>& inputs) const override;
  std::vector<Shape> infer_shapes(const std::vector<Shape>& inputs, const std::vector<const Tensor*>&) const override;
  void perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const override;
};

}  // namespace kiln

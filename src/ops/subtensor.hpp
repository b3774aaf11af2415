#pragma once
#include <memory>
#include <optional>
#include <span>

#include "graph/executable.hpp"
#include "graph/op.hpp"

namespace kiln {

// One entry per leading axis: an integer (drops the axis) or a slice with NumPy semantics.
struct IndexEntry {
  bool is_integer = false;
  int64_t index = 0;
  std::optional<int64_t> start, stop;
  int64_t step = 1;
  bool operator==(const IndexEntry&) const = default;
};

inline void write_entries(OpParams& out, const std::vector<IndexEntry>& entries) {
  out << entries.size();
  for (const IndexEntry& e : entries) out << e.is_integer << e.index << e.start << e.stop << e.step;
}

// x[entries]: always a view.
class Subtensor final : public Op {
 public:
  explicit Subtensor(std::vector<IndexEntry> entries) : entries_(std::move(entries)) {}
  const std::vector<IndexEntry>& entries() const { return entries_; }
  void params(OpParams& out) const override { write_entries(out, entries_); }
  std::string name() const override;
  std::vector<Type> infer_types(const std::vector<Type>& inputs) const override;
  std::vector<Shape> infer_shapes(const std::vector<Shape>& inputs, const std::vector<const Tensor*>&) const override;
  std::vector<Var> L_op(const Node& node, const std::vector<Var>& output_grads) const override;
  std::vector<std::pair<int, int>> view_map() const override { return {{0, 0}}; }

 private:
  std::vector<IndexEntry> entries_;
};

// A copy of x whose region x[entries] is set to (or incremented by) y, broadcast.
class IncSubtensor final : public Op {
 public:
  IncSubtensor(std::vector<IndexEntry> entries, bool set) : entries_(std::move(entries)), set_(set) {}
  const std::vector<IndexEntry>& entries() const { return entries_; }
  bool set() const { return set_; }
  void params(OpParams& out) const override { write_entries(out, entries_); out << set_; }
  std::string name() const override;
  std::vector<Type> infer_types(const std::vector<Type>& inputs) const override;
  std::vector<Shape> infer_shapes(const std::vector<Shape>& inputs, const std::vector<const Tensor*>&) const override;
  std::vector<Var> L_op(const Node& node, const std::vector<Var>& output_grads) const override;
  std::vector<std::pair<int, int>> inplace_options() const override { return {{0, 0}}; }

 private:
  std::vector<IndexEntry> entries_;
  bool set_;
};

// x[start:stop:step] along one axis with bounds known only when it runs: inputs x, then, in this
// order, the bounds the op has (0-d integers); a missing one is NumPy's default. Always a view;
// its shape depends on the bounds' values.
class DynamicSlice final : public Op {
 public:
  DynamicSlice(int64_t axis, bool has_start, bool has_stop, bool has_step)
      : axis_(axis), has_start_(has_start), has_stop_(has_stop), has_step_(has_step) {}
  int64_t axis() const { return axis_; }
  // The slice's entry on its axis for the bounds' values (inputs[first_bound] onwards).
  IndexEntry entry(std::span<const Tensor* const> bounds) const;
  int n_bounds() const { return int{has_start_} + int{has_stop_} + int{has_step_}; }
  void params(OpParams& out) const override { out << axis_ << has_start_ << has_stop_ << has_step_; }
  std::string name() const override;
  std::vector<Type> infer_types(const std::vector<Type>& inputs) const override;
  std::vector<Shape> infer_shapes(const std::vector<Shape>& inputs, const std::vector<const Tensor*>& values) const override;
  std::vector<int> needs_input_values() const override;
  std::vector<Var> L_op(const Node& node, const std::vector<Var>& output_grads) const override;
  std::vector<std::pair<int, int>> view_map() const override { return {{0, 0}}; }

 private:
  int64_t axis_;
  bool has_start_, has_stop_, has_step_;
};

// A copy of x whose slice (as DynamicSlice's) is set to, or incremented by, y broadcast: inputs
// x, y, then the bounds.
class DynamicSliceUpdate final : public Op {
 public:
  DynamicSliceUpdate(std::shared_ptr<const DynamicSlice> slice, bool set) : slice_(std::move(slice)), set_(set) {}
  const DynamicSlice& slice() const { return *slice_; }
  bool set() const { return set_; }
  void params(OpParams& out) const override { slice_->params(out), out << set_; }
  std::string name() const override;
  std::vector<Type> infer_types(const std::vector<Type>& inputs) const override;
  std::vector<Shape> infer_shapes(const std::vector<Shape>& inputs, const std::vector<const Tensor*>& values) const override;
  std::vector<int> needs_input_values() const override;
  std::vector<Var> L_op(const Node& node, const std::vector<Var>& output_grads) const override;
  std::vector<std::pair<int, int>> inplace_options() const override { return {{0, 0}}; }

 private:
  std::shared_ptr<const DynamicSlice> slice_;
  bool set_;
};

// take(x, indices, axis): NumPy take with integer indices of any shape (negative ones wrap).
class Take final : public Op {
 public:
  explicit Take(int64_t axis) : axis_(axis) {}
  int64_t axis() const { return axis_; }
  void params(OpParams& out) const override { out << axis_; }
  std::string name() const override { return "take{axis=" + std::to_string(axis_) + "}"; }
  std::vector<Type> infer_types(const std::vector<Type>& inputs) const override;
  std::vector<Shape> infer_shapes(const std::vector<Shape>& inputs, const std::vector<const Tensor*>&) const override;
  std::vector<Var> L_op(const Node& node, const std::vector<Var>& output_grads) const override;

 private:
  int64_t axis_;
};

// one_hot(indices, n): a new last axis of n values, 1 at each index and 0 elsewhere, as NumPy's
// eye(n)[indices] (negative indices count from n; beyond, a ShapeError when it runs).
class OneHotEncode final : public Op {
 public:
  OneHotEncode(int64_t n, DType dtype) : n_(n), dtype_(dtype) {}
  void params(OpParams& out) const override { out << n_ << dtype_; }
  std::string name() const override { return "one_hot{" + std::to_string(n_) + "," + dtype_name(dtype_) + "}"; }
  std::vector<Type> infer_types(const std::vector<Type>& inputs) const override;
  std::vector<Shape> infer_shapes(const std::vector<Shape>& inputs, const std::vector<const Tensor*>&) const override;
  std::vector<Var> L_op(const Node&, const std::vector<Var>&) const override { return {Var()}; }
  bool checks_values_before_writing() const override { return true; }
  int64_t n() const { return n_; }

 private:
  int64_t n_;
  DType dtype_;
};

// A copy of x whose rows take(x, indices, axis) are set to (or incremented by) y; repeated
// indices accumulate when incrementing.
class TakeInc final : public Op {
 public:
  TakeInc(int64_t axis, bool set) : axis_(axis), set_(set) {}
  int64_t axis() const { return axis_; }
  bool set() const { return set_; }
  void params(OpParams& out) const override { out << axis_ << set_; }
  std::string name() const override { return std::string(set_ ? "set" : "inc") + "_take{axis=" + std::to_string(axis_) + "}"; }
  std::vector<Type> infer_types(const std::vector<Type>& inputs) const override;
  std::vector<Shape> infer_shapes(const std::vector<Shape>& inputs, const std::vector<const Tensor*>&) const override;
  std::vector<Var> L_op(const Node& node, const std::vector<Var>& output_grads) const override;
  std::vector<std::pair<int, int>> inplace_options() const override { return {{0, 0}}; }
  bool checks_values_before_writing() const override { return true; }  // every index, then the rows

 private:
  int64_t axis_;
  bool set_;
};

// 1 where an index is the last to name its row along x's axis, 0 where a later one repeats it:
// with repeated indices the last write of a set wins, so only it receives a gradient.
class LastOccurrence final : public Op {
 public:
  explicit LastOccurrence(int64_t axis) : axis_(axis) {}
  int64_t axis() const { return axis_; }
  void params(OpParams& out) const override { out << axis_; }
  std::string name() const override { return "last_occurrence{axis=" + std::to_string(axis_) + "}"; }
  std::vector<Type> infer_types(const std::vector<Type>& inputs) const override;
  std::vector<Shape> infer_shapes(const std::vector<Shape>& inputs, const std::vector<const Tensor*>&) const override;
  std::vector<Var> L_op(const Node&, const std::vector<Var>&) const override { return {Var(), Var()}; }

 private:
  int64_t axis_;
};

void add_subtensor_kernels(KernelTable& table);

}  // namespace kiln

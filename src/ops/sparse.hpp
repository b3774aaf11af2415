#pragma once
#include "graph/executable.hpp"
#include "graph/op.hpp"
#include "kiln/sparse.hpp"

namespace kiln {

// The sparse ops read a matrix as its parts (include/kiln/sparse_var.hpp): data, indices and
// indptr in the layout of `format`, and, where they need it, its shape as an i64 vector. Every
// op checks the pattern it reads (indptr from 0 to nnz, never decreasing; indices in range)
// before it writes, and names itself and the part that is wrong.

// An op whose one parameter is the format of the sparse matrix it reads.
class SparseFormatOp : public Op {
 public:
  explicit SparseFormatOp(SparseFormat format) : format_(format) {}
  SparseFormat format() const { return format_; }
  void params(OpParams& out) const override { out << format_; }

 private:
  SparseFormat format_;
};

// x . d for sparse x (rows x cols) and dense d (cols x n): inputs data, indices, indptr, shape, d.
class SparseDot final : public SparseFormatOp {
 public:
  using SparseFormatOp::SparseFormatOp;
  std::string name() const override;
  std::vector<Type> infer_types(const std::vector<Type>& inputs) const override;
  std::vector<Shape> infer_shapes(const std::vector<Shape>& inputs, const std::vector<const Tensor*>& values) const override;
  // A CSC product has as many rows as the shape says, which its parts do not tell.
  std::vector<int> needs_input_values() const override;
  std::vector<Var> L_op(const Node& node, const std::vector<Var>& output_grads) const override;
  bool checks_values_before_writing() const override { return true; }
};

// The stored entries' values of a . b^T (a: rows x k, b: cols x k) at a pattern: inputs a, b,
// indices, indptr. The structured gradient of a sparse product.
class SamplingDot final : public SparseFormatOp {
 public:
  using SparseFormatOp::SparseFormatOp;
  std::string name() const override;
  std::vector<Type> infer_types(const std::vector<Type>& inputs) const override;
  std::vector<Shape> infer_shapes(const std::vector<Shape>& inputs, const std::vector<const Tensor*>& values) const override;
  std::vector<Var> L_op(const Node& node, const std::vector<Var>& output_grads) const override;
  bool checks_values_before_writing() const override { return true; }
};

// g's values at a pattern's stored entries, g broadcast (NumPy) to the matrix's shape: inputs g,
// indices, indptr, shape. The structured gradient of dense() and of the sums.
class SparseGather final : public SparseFormatOp {
 public:
  using SparseFormatOp::SparseFormatOp;
  std::string name() const override;
  std::vector<Type> infer_types(const std::vector<Type>& inputs) const override;
  std::vector<Shape> infer_shapes(const std::vector<Shape>& inputs, const std::vector<const Tensor*>& values) const override;
  std::vector<Var> L_op(const Node& node, const std::vector<Var>& output_grads) const override;
  bool checks_values_before_writing() const override { return true; }
};

// Sums of a sparse matrix over its rows or columns, or the dense matrix itself: inputs data,
// indices, indptr, shape; output rows x cols (dense), or the sums over `axis` as a vector.
class SparseReduce final : public Op {
 public:
  // axis -1: no reduction (the dense matrix); 0: column sums; 1: row sums.
  SparseReduce(SparseFormat format, int64_t axis) : format_(format), axis_(axis) {}
  SparseFormat format() const { return format_; }
  int64_t axis() const { return axis_; }
  void params(OpParams& out) const override { out << format_ << axis_; }
  std::string name() const override;
  std::vector<Type> infer_types(const std::vector<Type>& inputs) const override;
  std::vector<Shape> infer_shapes(const std::vector<Shape>& inputs, const std::vector<const Tensor*>& values) const override;
  std::vector<int> needs_input_values() const override { return {3}; }
  std::vector<Var> L_op(const Node& node, const std::vector<Var>& output_grads) const override;
  bool checks_values_before_writing() const override { return true; }

 private:
  SparseFormat format_;
  int64_t axis_;
};

// Segments [start, stop) of a pattern (rows of CSR, columns of CSC), bounds clamped as NumPy's
// slices (negative counts from the end): inputs data, indices, indptr, start, stop (0-d i64);
// outputs the slice's data, indices and indptr (from 0). Sizes depend on the values.
class SparseMajorSlice final : public Op {
 public:
  // single: segment `start` alone (stop unused), which must exist (-n <= start < n), as NumPy's x[i].
  explicit SparseMajorSlice(bool single = false) : single_(single) {}
  bool single() const { return single_; }
  std::string name() const override { return single_ ? "sparse_major_index" : "sparse_major_slice"; }
  void params(OpParams& out) const override { out << single_; }
  std::vector<Type> infer_types(const std::vector<Type>& inputs) const override;
  std::vector<Shape> infer_shapes(const std::vector<Shape>& inputs, const std::vector<const Tensor*>& values) const override;
  std::vector<int> needs_input_values() const override { return {2, 3, 4}; }
  std::vector<Var> L_op(const Node& node, const std::vector<Var>& output_grads) const override;
  bool may_fail_on_values() const override { return single_; }

 private:
  bool single_;
};

// The gradient of a slice's data: g placed where the slice's entries lie in the whole data, zero
// elsewhere. Inputs g, data (for its length), indptr, start, stop.
class SparseMajorSliceGrad final : public Op {
 public:
  explicit SparseMajorSliceGrad(bool single) : single_(single) {}
  bool single() const { return single_; }
  std::string name() const override { return "sparse_major_slice_grad"; }
  void params(OpParams& out) const override { out << single_; }
  std::vector<Type> infer_types(const std::vector<Type>& inputs) const override;
  std::vector<Shape> infer_shapes(const std::vector<Shape>& inputs, const std::vector<const Tensor*>& values) const override;
  std::vector<Var> L_op(const Node& node, const std::vector<Var>& output_grads) const override;
  bool may_fail_on_values() const override { return false; }

 private:
  bool single_;
};

// Two sparse matrices of one format joined into one: inputs a's parts then b's (data, indices,
// indptr, shape each); outputs data, indices, indptr, shape. `how`: add (the sum, equal shapes;
// each segment holds a's entries then b's, repeats summed as everywhere), or stack along `axis`
// (0: b's rows below a's, 1: b's columns right of a's). All sizes follow from the inputs' shapes.
class SparseJoin final : public Op {
 public:
  enum class How { add, stack_rows, stack_columns };
  SparseJoin(SparseFormat format, How how) : format_(format), how_(how) {}
  SparseFormat format() const { return format_; }
  How how() const { return how_; }
  // Whether b's segments follow a's (stacking along the compressed axis) rather than each of a's
  // segments being followed by b's same segment.
  bool appends_segments() const { return (how_ == How::stack_rows) == (format_ == SparseFormat::csr) && how_ != How::add; }
  void params(OpParams& out) const override { out << format_ << how_; }
  std::string name() const override;
  std::vector<Type> infer_types(const std::vector<Type>& inputs) const override;
  std::vector<Shape> infer_shapes(const std::vector<Shape>& inputs, const std::vector<const Tensor*>& values) const override;
  std::vector<Var> L_op(const Node& node, const std::vector<Var>& output_grads) const override;
  bool checks_values_before_writing() const override { return true; }

 private:
  SparseFormat format_;
  How how_;
};

// The gradient of a SparseJoin with respect to one side's data: the joined data's gradient g, the
// entries that came from that side. Inputs g, then the join's eight inputs.
class SparseJoinSplit final : public Op {
 public:
  SparseJoinSplit(SparseFormat format, SparseJoin::How how, int side) : join_(format, how), side_(side) {}
  const SparseJoin& join() const { return join_; }
  int side() const { return side_; }
  void params(OpParams& out) const override { out << join_.format() << join_.how() << side_; }
  std::string name() const override { return join_.name() + "_split{" + std::to_string(side_) + "}"; }
  std::vector<Type> infer_types(const std::vector<Type>& inputs) const override;
  std::vector<Shape> infer_shapes(const std::vector<Shape>& inputs, const std::vector<const Tensor*>& values) const override;
  std::vector<Var> L_op(const Node& node, const std::vector<Var>& output_grads) const override;
  bool checks_values_before_writing() const override { return true; }

 private:
  SparseJoin join_;
  int side_;
};

// The pattern of the same matrix in the other format: inputs indices, indptr, shape (of `from`);
// outputs the other format's indices and indptr, and for each of its entries the position of that
// entry in the input (the data follow with take(data, positions)). Within a row (column) the
// result's entries keep their input order, so the result's indices are sorted.
class SparseConvert final : public Op {
 public:
  explicit SparseConvert(SparseFormat from) : from_(from) {}
  SparseFormat from() const { return from_; }
  void params(OpParams& out) const override { out << from_; }
  std::string name() const override;
  std::vector<Type> infer_types(const std::vector<Type>& inputs) const override;
  std::vector<Shape> infer_shapes(const std::vector<Shape>& inputs, const std::vector<const Tensor*>& values) const override;
  std::vector<int> needs_input_values() const override { return {2}; }
  std::vector<Var> L_op(const Node& node, const std::vector<Var>& output_grads) const override;
  bool checks_values_before_writing() const override { return true; }

 private:
  SparseFormat from_;
};

// A sparse matrix's values at another pattern of the same shape: inputs the first's data,
// indices, indptr, shape, then the pattern's indices, indptr, shape; output one value per entry
// of the pattern (the sum of the first's entries at that place, 0 where it has none). Sorted
// segments are merged; unsorted ones searched.
class SparseSample final : public SparseFormatOp {
 public:
  using SparseFormatOp::SparseFormatOp;
  std::string name() const override { return with_format_name(); }
  std::vector<Type> infer_types(const std::vector<Type>& inputs) const override;
  std::vector<Shape> infer_shapes(const std::vector<Shape>& inputs, const std::vector<const Tensor*>& values) const override;
  std::vector<Var> L_op(const Node& node, const std::vector<Var>& output_grads) const override;
  bool checks_values_before_writing() const override { return true; }

 private:
  std::string with_format_name() const { return std::string("sparse_sample{") + sparse_format_name(format()) + "}"; }
};

// x + d for sparse x and dense d broadcast to x's shape (NumPy): inputs data, indices, indptr,
// shape, d; output the dense sum. The planner may write it over d (d of the sum's shape, dying here
// or the shared variable the sum updates): then only x's stored entries are touched.
class SparseAddDense final : public SparseFormatOp {
 public:
  using SparseFormatOp::SparseFormatOp;
  std::string name() const override { return std::string("sparse_add_dense{") + sparse_format_name(format()) + "}"; }
  std::vector<Type> infer_types(const std::vector<Type>& inputs) const override;
  std::vector<Shape> infer_shapes(const std::vector<Shape>& inputs, const std::vector<const Tensor*>& values) const override;
  std::vector<int> needs_input_values() const override { return {3}; }
  std::vector<Var> L_op(const Node& node, const std::vector<Var>& output_grads) const override;
  std::vector<std::pair<int, int>> inplace_options() const override { return {{0, 4}}; }
  bool checks_values_before_writing() const override { return true; }
};

// The gradient of row lookups take(W, rows) as a CSR matrix of W's shape (Theano's sparse_grad):
// inputs rows (1-D i64, negative counted from the end), g (one gradient row per lookup:
// len(rows) x cols) and W (read for its shape). Outputs data, indices and indptr, where row r
// stores the cols entries of each lookup of r in lookup order (repeats sum, as everywhere), and
// positions: where lookup i's row landed, counted in rows of the data.
class RowLookupGrad final : public Op {
 public:
  void params(OpParams&) const override {}
  std::string name() const override { return "row_lookup_grad"; }
  std::vector<Type> infer_types(const std::vector<Type>& inputs) const override;
  std::vector<Shape> infer_shapes(const std::vector<Shape>& inputs, const std::vector<const Tensor*>&) const override;
  std::vector<Var> L_op(const Node& node, const std::vector<Var>& output_grads) const override;
  std::vector<int> shape_only_inputs() const override { return {2}; }
};

// a . b for two sparse matrices of one format (a: rows x inner, b: inner x cols): inputs a's
// data, indices, indptr, shape, then b's; outputs the product's data, indices (sorted in each
// segment) and indptr. How many entries it has depends on the patterns, so its sizes and its
// working memory (a row accumulator as long as a segment of the result) are found when it runs.
class SparseProduct final : public SparseFormatOp {
 public:
  using SparseFormatOp::SparseFormatOp;
  std::string name() const override { return std::string("sparse_product{") + sparse_format_name(format()) + "}"; }
  std::vector<Type> infer_types(const std::vector<Type>& inputs) const override;
  std::vector<Shape> infer_shapes(const std::vector<Shape>& inputs, const std::vector<const Tensor*>& values) const override;
  std::vector<int> needs_input_values() const override { return {1, 2, 3, 5, 6, 7}; }
  std::vector<Var> L_op(const Node& node, const std::vector<Var>& output_grads) const override;
  bool checks_values_before_writing() const override { return true; }
};

// The pattern that stores every entry of a matrix of a given shape: input the shape (i64 vector
// of 2); outputs indices and indptr in `format`'s layout (the data is the dense matrix's elements
// in that order). regular_grad rebuilds a cost on it.
class FullPattern final : public SparseFormatOp {
 public:
  using SparseFormatOp::SparseFormatOp;
  std::string name() const override { return std::string("full_pattern{") + sparse_format_name(format()) + "}"; }
  std::vector<Type> infer_types(const std::vector<Type>& inputs) const override;
  std::vector<Shape> infer_shapes(const std::vector<Shape>& inputs, const std::vector<const Tensor*>& values) const override;
  std::vector<int> needs_input_values() const override { return {0}; }
  std::vector<Var> L_op(const Node&, const std::vector<Var>&) const override { return {Var()}; }
  bool may_fail_on_values() const override { return false; }
};

SparseFormat transposed(SparseFormat format);

void add_sparse_kernels(KernelTable& table);

}  // namespace kiln

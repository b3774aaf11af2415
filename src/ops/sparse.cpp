#include "ops/sparse.hpp"

#include <omp.h>

#include <algorithm>
#include <cstring>

#include "graph/function_graph.hpp"
#include "graph/node.hpp"
#include "tensor/tensor_book.hpp"
#include "kiln/grad.hpp"
#include "kiln/ops.hpp"
#include "kiln/sparse_var.hpp"
#include "ops/elemwise.hpp"
#include "ops/reduce.hpp"
#include "ops/subtensor.hpp"
#include "tensor/copy.hpp"
#include "tensor/dispatch.hpp"
#include "tensor/isa.hpp"
#include "tensor/parallel.hpp"

namespace kiln {

SparseFormat transposed(SparseFormat format) { return format == SparseFormat::csr ? SparseFormat::csc : SparseFormat::csr; }

namespace {

std::string with_format(const char* name, SparseFormat format) { return std::string(name) + "{" + sparse_format_name(format) + "}"; }

void expect_vector(const std::string& op, const char* part, const Type& t, bool want_float) {
  const bool dtype_ok = want_float ? is_float(t.dtype) : t.dtype == DType::i64;
  if (t.ndim() != 1 || !dtype_ok)
    throw TypeError(op + ": " + part + " must be a 1-D " + (want_float ? "float (f32 or f64)" : "i64") + " vector, got " +
                    t.str());
}

void expect_matrix(const std::string& op, const char* part, const Type& t, DType dtype) {
  if (t.ndim() != 2 || t.dtype != dtype)
    throw TypeError(op + ": " + part + " must be a " + dtype_name(dtype) + " matrix, got " + t.str() +
                    (t.ndim() == 2 ? "; cast it to the sparse matrix's dtype" : ""));
}

// The checked view of a pattern: n_major segments (rows for CSR), entry k of segment m stores
// minor index indices[k] (its column for CSR).
struct Pattern {
  const int64_t* indices;
  const int64_t* indptr;
  int64_t n_major, n_minor, nnz;
  // The row and the column of entry k, stored in segment `major`.
  int64_t row(SparseFormat f, int64_t major, int64_t k) const { return f == SparseFormat::csr ? major : indices[k]; }
  int64_t col(SparseFormat f, int64_t major, int64_t k) const { return f == SparseFormat::csr ? indices[k] : major; }
};

Pattern checked_pattern(const Op& op, const Tensor& indices, const Tensor& indptr, int64_t n_minor) {
  if (!indices.is_contiguous() || !indptr.is_contiguous())
    throw ShapeError(op.name() + ": indices and indptr must be contiguous vectors; pass contiguous copies");
  Pattern p{indices.data<int64_t>(), indptr.data<int64_t>(), indptr.numel() - 1, n_minor, indices.numel()};
  if (p.n_major < 0) throw ShapeError(op.name() + ": indptr is empty; it needs one entry per row (column) and one more");
  if (p.indptr[0] != 0) throw ShapeError(op.name() + ": indptr[0] must be 0, got " + std::to_string(p.indptr[0]));
  for (int64_t m = 0; m < p.n_major; ++m)
    if (p.indptr[m + 1] < p.indptr[m])
      throw ShapeError(op.name() + ": indptr must not decrease, but indptr[" + std::to_string(m + 1) + "] = " +
                       std::to_string(p.indptr[m + 1]) + " < indptr[" + std::to_string(m) + "] = " + std::to_string(p.indptr[m]));
  if (p.indptr[p.n_major] != p.nnz)
    throw ShapeError(op.name() + ": indptr ends at " + std::to_string(p.indptr[p.n_major]) + " but there are " +
                     std::to_string(p.nnz) + " indices");
  for (int64_t k = 0; k < p.nnz; ++k)
    if (p.indices[k] < 0 || p.indices[k] >= n_minor)
      throw ShapeError(op.name() + ": indices[" + std::to_string(k) + "] = " + std::to_string(p.indices[k]) + " is out of range [0, " +
                       std::to_string(n_minor) + ")");
  return p;
}

// rows, cols from a shape vector, checked against the parts.
std::pair<int64_t, int64_t> shape_value(const Op& op, const Tensor& shape) {
  if (shape.numel() != 2) throw ShapeError(op.name() + ": the shape vector must have 2 entries, got " + shape_str(shape.shape()));
  const int64_t* s = shape.data<int64_t>();
  const int64_t rows = s[0], cols = s[shape.strides()[0]];
  if (rows < 0 || cols < 0) throw ShapeError(op.name() + ": a sparse matrix's shape must not be negative, got " + shape_str({rows, cols}));
  return {rows, cols};
}

int threads_for(int64_t work, int64_t items) {
  if (work < (1 << 15) || omp_in_parallel()) return 1;
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(num_threads(), items)));
}

// Splits segments [0, n) among threads so that each gets about the same number of entries.
int64_t segment_split(const Pattern& p, int t, int nt) {
  if (t == 0) return 0;
  if (t == nt) return p.n_major;
  const int64_t target = p.nnz * t / nt;
  return std::lower_bound(p.indptr, p.indptr + p.n_major + 1, target) - p.indptr;
}

Var reversed_shape(const Var& shape, const Loc& loc) { return stack({shape[1], shape[0]}, 0, loc); }

std::vector<Var> parts(const SparseVar& x) { return {x.data(), x.indices(), x.indptr(), x.shape()}; }

}  // namespace

// ---- SparseDot

std::string SparseDot::name() const { return with_format("sparse_dot", format()); }

std::vector<Type> SparseDot::infer_types(const std::vector<Type>& in) const {
  if (in.size() != 5) throw TypeError(name() + ": takes data, indices, indptr, shape and a dense matrix");
  expect_vector(name(), "data", in[0], true);
  expect_vector(name(), "indices", in[1], false);
  expect_vector(name(), "indptr", in[2], false);
  expect_vector(name(), "shape", in[3], false);
  expect_matrix(name(), "the dense operand", in[4], in[0].dtype);
  return {Type{in[0].dtype, {false, in[4].broadcastable[1]}}};
}

std::vector<int> SparseDot::needs_input_values() const {
  return format() == SparseFormat::csc ? std::vector<int>{3} : std::vector<int>{};
}

std::vector<Shape> SparseDot::infer_shapes(const std::vector<Shape>& in, const std::vector<const Tensor*>& values) const {
  if (in[0] != in[1])
    throw ShapeError(name() + ": data " + shape_str(in[0]) + " and indices " + shape_str(in[1]) + " must have one entry per stored value");
  if (format() == SparseFormat::csr) return {{in[2][0] - 1, in[4][1]}};
  if (!values[3]) throw ShapeError(name() + ": the number of rows of a CSC matrix is known only from its shape's value");
  return {{shape_value(*this, *values[3]).first, in[4][1]}};
}

std::vector<Var> SparseDot::L_op(const Node& node, const std::vector<Var>& g) const {
  const Var &data = node.inputs[0], &indices = node.inputs[1], &indptr = node.inputs[2], &shape = node.inputs[3],
            &d = node.inputs[4];
  const Var g_data = apply1(std::make_shared<SamplingDot>(format()), {g[0], d, indices, indptr}, node.loc);
  const Var g_dense = apply1(std::make_shared<SparseDot>(transposed(format())),
                             {data, indices, indptr, reversed_shape(shape, node.loc), g[0]}, node.loc);
  return {g_data, Var(), Var(), Var(), g_dense};
}

// ---- SamplingDot

std::string SamplingDot::name() const { return with_format("sampling_dot", format()); }

std::vector<Type> SamplingDot::infer_types(const std::vector<Type>& in) const {
  if (in.size() != 4) throw TypeError(name() + ": takes a, b, indices and indptr");
  if (in[0].ndim() != 2 || !is_float(in[0].dtype)) throw TypeError(name() + ": a must be a float matrix, got " + in[0].str());
  expect_matrix(name(), "b", in[1], in[0].dtype);
  expect_vector(name(), "indices", in[2], false);
  expect_vector(name(), "indptr", in[3], false);
  return {Type{in[0].dtype, {false}}};
}

std::vector<Shape> SamplingDot::infer_shapes(const std::vector<Shape>& in, const std::vector<const Tensor*>&) const {
  if (in[0][1] != in[1][1])
    throw ShapeError(name() + ": a " + shape_str(in[0]) + " and b " + shape_str(in[1]) + " must have the same number of columns");
  return {{in[2][0]}};
}

std::vector<Var> SamplingDot::L_op(const Node& node, const std::vector<Var>& g) const {
  const Var &a = node.inputs[0], &b = node.inputs[1], &indices = node.inputs[2], &indptr = node.inputs[3];
  const Var shape = stack({shape_of(a, node.loc)[0], shape_of(b, node.loc)[0]}, 0, node.loc);
  const Var g_a = apply1(std::make_shared<SparseDot>(format()), {g[0], indices, indptr, shape, b}, node.loc);
  const Var g_b = apply1(std::make_shared<SparseDot>(transposed(format())),
                         {g[0], indices, indptr, reversed_shape(shape, node.loc), a}, node.loc);
  return {g_a, g_b, Var(), Var()};
}

// ---- SparseGather

std::string SparseGather::name() const { return with_format("sparse_gather", format()); }

std::vector<Type> SparseGather::infer_types(const std::vector<Type>& in) const {
  if (in.size() != 4) throw TypeError(name() + ": takes g, indices, indptr and shape");
  if (in[0].ndim() != 2 || !is_float(in[0].dtype)) throw TypeError(name() + ": g must be a float matrix, got " + in[0].str());
  expect_vector(name(), "indices", in[1], false);
  expect_vector(name(), "indptr", in[2], false);
  expect_vector(name(), "shape", in[3], false);
  return {Type{in[0].dtype, {false}}};
}

std::vector<Shape> SparseGather::infer_shapes(const std::vector<Shape>& in, const std::vector<const Tensor*>&) const {
  return {{in[1][0]}};
}

std::vector<Var> SparseGather::L_op(const Node& node, const std::vector<Var>& g) const {
  const Var scattered = apply1(std::make_shared<SparseReduce>(format(), -1),
                               {g[0], node.inputs[1], node.inputs[2], node.inputs[3]}, node.loc);
  return {sum_to_shape_of(scattered, node.inputs[0], node.loc), Var(), Var(), Var()};
}

// ---- SparseReduce

std::string SparseReduce::name() const {
  return axis_ < 0 ? with_format("sparse_to_dense", format_)
                   : with_format(axis_ == 0 ? "sparse_sum_columns" : "sparse_sum_rows", format_);
}

std::vector<Type> SparseReduce::infer_types(const std::vector<Type>& in) const {
  if (in.size() != 4) throw TypeError(name() + ": takes data, indices, indptr and shape");
  expect_vector(name(), "data", in[0], true);
  expect_vector(name(), "indices", in[1], false);
  expect_vector(name(), "indptr", in[2], false);
  expect_vector(name(), "shape", in[3], false);
  if (axis_ < 0) return {Type{in[0].dtype, {false, false}}};
  return {Type{in[0].dtype, {false}}};
}

std::vector<Shape> SparseReduce::infer_shapes(const std::vector<Shape>& in, const std::vector<const Tensor*>& values) const {
  if (in[0] != in[1])
    throw ShapeError(name() + ": data " + shape_str(in[0]) + " and indices " + shape_str(in[1]) + " must have one entry per stored value");
  if (!values[3]) throw ShapeError(name() + ": the result's shape is known only from the sparse matrix's shape value");
  const auto [rows, cols] = shape_value(*this, *values[3]);
  if (axis_ < 0) return {{rows, cols}};
  return {{axis_ == 0 ? cols : rows}};
}

std::vector<Var> SparseReduce::L_op(const Node& node, const std::vector<Var>& g) const {
  Var spread = g[0];
  if (axis_ == 0) spread = dimshuffle(g[0], {-1, 0}, node.loc);
  if (axis_ == 1) spread = dimshuffle(g[0], {0, -1}, node.loc);
  const Var g_data = apply1(std::make_shared<SparseGather>(format_), {spread, node.inputs[1], node.inputs[2], node.inputs[3]},
                            node.loc);
  return {g_data, Var(), Var(), Var()};
}

// ---- SparseMajorSlice

namespace {

// [first, last) of n segments for a slice's bounds, clamped as NumPy's.
std::pair<int64_t, int64_t> clamped_bounds(int64_t start, int64_t stop, int64_t n) {
  const int64_t first = start < 0 ? std::max<int64_t>(0, start + n) : std::min(start, n);
  const int64_t last = stop < 0 ? std::max<int64_t>(0, stop + n) : std::min(stop, n);
  return {first, std::max(first, last)};
}

// The slice's bounds and where its entries lie in the whole data, checked against the data's
// length and indptr's order over the slice.
struct SliceExtent {
  int64_t first, last, entry_begin, entry_end;
};

SliceExtent slice_extent(const Op& op, bool single, const Tensor& indptr, const Tensor& start, const Tensor& stop,
                         int64_t n_entries) {
  if (!indptr.is_contiguous()) throw ShapeError(op.name() + ": indptr must be a contiguous vector");
  const int64_t n = indptr.numel() - 1;
  if (n < 0) throw ShapeError(op.name() + ": indptr is empty; it needs one entry per row (column) and one more");
  const int64_t index = start.item<int64_t>();
  if (single && (index < -n || index >= n))
    throw ShapeError(op.name() + ": index " + std::to_string(index) + " is out of range for a matrix of " + std::to_string(n) +
                     " rows if it is CSR, columns if CSC (counted from 0, or from the end when negative)");
  const auto [first, last] = single ? std::pair<int64_t, int64_t>{index < 0 ? index + n : index, (index < 0 ? index + n : index) + 1}
                                    : clamped_bounds(index, stop.item<int64_t>(), n);
  const int64_t* ptr = indptr.data<int64_t>();
  for (int64_t m = first; m < last; ++m)
    if (ptr[m + 1] < ptr[m])
      throw ShapeError(op.name() + ": indptr must not decrease, but indptr[" + std::to_string(m + 1) + "] = " + std::to_string(ptr[m + 1]) +
                       " < indptr[" + std::to_string(m) + "] = " + std::to_string(ptr[m]));
  if (ptr[first] < 0 || ptr[last] > n_entries)
    throw ShapeError(op.name() + ": indptr points at entries [" + std::to_string(ptr[first]) + ", " + std::to_string(ptr[last]) +
                     ") but there are " + std::to_string(n_entries));
  return {first, last, ptr[first], ptr[last]};
}

}  // namespace

std::vector<Type> SparseMajorSlice::infer_types(const std::vector<Type>& in) const {
  if (in.size() != 5) throw TypeError(name() + ": takes data, indices, indptr, start and stop");
  expect_vector(name(), "data", in[0], true);
  expect_vector(name(), "indices", in[1], false);
  expect_vector(name(), "indptr", in[2], false);
  for (size_t i : {3, 4})
    if (in[i].ndim() != 0 || (in[i].dtype != DType::i64 && in[i].dtype != DType::i32))
      throw TypeError(name() + ": the bounds must be 0-d integers, got " + in[i].str());
  return {in[0], in[1], in[2]};
}

std::vector<Shape> SparseMajorSlice::infer_shapes(const std::vector<Shape>& in, const std::vector<const Tensor*>& values) const {
  if (!values[2] || !values[3] || !values[4]) throw ShapeError(name() + ": its sizes are known only from indptr's and the bounds' values");
  if (in[0] != in[1])
    throw ShapeError(name() + ": data " + shape_str(in[0]) + " and indices " + shape_str(in[1]) + " must have one entry per stored value");
  const SliceExtent e = slice_extent(*this, single_, *values[2], *values[3], *values[4], in[0][0]);
  return {{e.entry_end - e.entry_begin}, {e.entry_end - e.entry_begin}, {e.last - e.first + 1}};
}

std::vector<Var> SparseMajorSlice::L_op(const Node& node, const std::vector<Var>& g) const {
  if (!g[0].defined()) return {Var(), Var(), Var(), Var(), Var()};
  const Var& in0 = node.inputs[0];
  const Var g_data = apply1(std::make_shared<SparseMajorSliceGrad>(single_),
                            {g[0], in0, node.inputs[1], node.inputs[2], node.inputs[3], node.inputs[4]}, node.loc);
  return {g_data, Var(), Var(), Var(), Var()};
}

std::vector<Type> SparseMajorSliceGrad::infer_types(const std::vector<Type>& in) const {
  if (in.size() != 6) throw TypeError(name() + ": takes g, data, indices, indptr, start and stop");
  return {in[1]};
}

std::vector<Shape> SparseMajorSliceGrad::infer_shapes(const std::vector<Shape>& in, const std::vector<const Tensor*>&) const {
  return {in[1]};
}

std::vector<Var> SparseMajorSliceGrad::L_op(const Node& node, const std::vector<Var>& g) const {
  const std::vector<Var> sliced = apply(std::make_shared<SparseMajorSlice>(single_),
                                        {g[0], node.inputs[2], node.inputs[3], node.inputs[4], node.inputs[5]}, node.loc);
  return {sliced[0], Var(), Var(), Var(), Var(), Var()};
}

// ---- SparseJoin

std::string SparseJoin::name() const {
  const char* what = how_ == How::add ? "sparse_add" : how_ == How::stack_rows ? "sparse_vstack" : "sparse_hstack";
  return with_format(what, format_);
}

std::vector<Type> SparseJoin::infer_types(const std::vector<Type>& in) const {
  if (in.size() != 8) throw TypeError(name() + ": takes the parts of two sparse matrices (data, indices, indptr, shape each)");
  for (size_t side : {0, 4}) {
    expect_vector(name(), "data", in[side], true);
    expect_vector(name(), "indices", in[side + 1], false);
    expect_vector(name(), "indptr", in[side + 2], false);
    expect_vector(name(), "shape", in[side + 3], false);
  }
  if (in[0].dtype != in[4].dtype) throw TypeError(name() + ": the two matrices hold " + in[0].str() + " and " + in[4].str() + " values");
  return {in[0], in[1], in[2], in[3]};
}

std::vector<Shape> SparseJoin::infer_shapes(const std::vector<Shape>& in, const std::vector<const Tensor*>&) const {
  for (size_t side : {0, 4})
    if (in[side] != in[side + 1])
      throw ShapeError(name() + ": data " + shape_str(in[side]) + " and indices " + shape_str(in[side + 1]) +
                       " must have one entry per stored value");
  const int64_t nnz = in[0][0] + in[4][0];
  if (appends_segments()) return {{nnz}, {nnz}, {in[2][0] + in[6][0] - 1}, {2}};
  if (in[2] != in[6])
    throw ShapeError(name() + ": the matrices have " + std::to_string(in[2][0] - 1) + " and " + std::to_string(in[6][0] - 1) +
                     (format_ == SparseFormat::csr ? " rows" : " columns") + "; they must have the same number");
  return {{nnz}, {nnz}, in[2], {2}};
}

std::vector<Var> SparseJoin::L_op(const Node& node, const std::vector<Var>& g) const {
  std::vector<Var> grads(8);
  if (!g[0].defined()) return grads;
  for (int side : {0, 1}) {
    std::vector<Var> inputs{g[0]};
    inputs.insert(inputs.end(), node.inputs.begin(), node.inputs.end());
    grads[side * 4] = apply1(std::make_shared<SparseJoinSplit>(format_, how_, side), inputs, node.loc);
  }
  return grads;
}

std::vector<Type> SparseJoinSplit::infer_types(const std::vector<Type>& in) const {
  if (in.size() != 9) throw TypeError(name() + ": takes g and the join's eight inputs");
  return {in[1 + side_ * 4]};
}

std::vector<Shape> SparseJoinSplit::infer_shapes(const std::vector<Shape>& in, const std::vector<const Tensor*>&) const {
  return {in[1 + side_ * 4]};
}

std::vector<Var> SparseJoinSplit::L_op(const Node& node, const std::vector<Var>& g) const {
  std::vector<Var> inputs(node.inputs.begin() + 1, node.inputs.end());
  inputs[0] = side_ == 0 ? g[0] : zeros_like(inputs[0], node.loc);
  inputs[4] = side_ == 1 ? g[0] : zeros_like(inputs[4], node.loc);
  std::vector<Var> grads(9);
  grads[0] = apply(std::make_shared<SparseJoin>(join_.format(), join_.how()), inputs, node.loc)[0];
  return grads;
}

// ---- SparseConvert

std::string SparseConvert::name() const {
  return std::string("sparse_convert{") + sparse_format_name(from_) + "->" + sparse_format_name(transposed(from_)) + "}";
}

std::vector<Type> SparseConvert::infer_types(const std::vector<Type>& in) const {
  if (in.size() != 3) throw TypeError(name() + ": takes indices, indptr and shape");
  expect_vector(name(), "indices", in[0], false);
  expect_vector(name(), "indptr", in[1], false);
  expect_vector(name(), "shape", in[2], false);
  return {in[0], in[1], in[0]};
}

std::vector<Shape> SparseConvert::infer_shapes(const std::vector<Shape>& in, const std::vector<const Tensor*>& values) const {
  if (!values[2]) throw ShapeError(name() + ": the result's indptr length is known only from the shape's value");
  const auto [rows, cols] = shape_value(*this, *values[2]);
  return {in[0], {(from_ == SparseFormat::csr ? cols : rows) + 1}, in[0]};
}

std::vector<Var> SparseConvert::L_op(const Node&, const std::vector<Var>&) const { return {Var(), Var(), Var()}; }

// ---- SparseSample

std::vector<Type> SparseSample::infer_types(const std::vector<Type>& in) const {
  if (in.size() != 7) throw TypeError(name() + ": takes a matrix's data, indices, indptr, shape and a pattern's indices, indptr, shape");
  expect_vector(name(), "data", in[0], true);
  for (size_t i : {1, 2, 3, 4, 5, 6}) expect_vector(name(), i == 3 || i == 6 ? "shape" : i == 2 || i == 5 ? "indptr" : "indices", in[i], false);
  return {Type{in[0].dtype, {false}}};
}

std::vector<Shape> SparseSample::infer_shapes(const std::vector<Shape>& in, const std::vector<const Tensor*>&) const {
  if (in[0] != in[1])
    throw ShapeError(name() + ": data " + shape_str(in[0]) + " and indices " + shape_str(in[1]) + " must have one entry per stored value");
  return {in[4]};
}

std::vector<Var> SparseSample::L_op(const Node& node, const std::vector<Var>& g) const {
  // Sampling is linear in the first matrix's data; its transpose samples g, on the pattern, at
  // the first matrix's entries.
  const std::vector<Var>& in = node.inputs;
  const Var g_data = apply1(std::make_shared<SparseSample>(format()), {g[0], in[4], in[5], in[6], in[1], in[2], in[3]}, node.loc);
  return {g_data, Var(), Var(), Var(), Var(), Var(), Var()};
}

// ---- SparseAddDense

std::vector<Type> SparseAddDense::infer_types(const std::vector<Type>& in) const {
  if (in.size() != 5) throw TypeError(name() + ": takes data, indices, indptr, shape and a dense value");
  expect_vector(name(), "data", in[0], true);
  expect_vector(name(), "indices", in[1], false);
  expect_vector(name(), "indptr", in[2], false);
  expect_vector(name(), "shape", in[3], false);
  if (in[4].ndim() > 2 || in[4].dtype != in[0].dtype)
    throw TypeError(name() + ": the dense value must have at most 2 dimensions and the sparse matrix's dtype " +
                    dtype_name(in[0].dtype) + ", got " + in[4].str());
  return {Type{in[0].dtype, {false, false}}};
}

std::vector<Shape> SparseAddDense::infer_shapes(const std::vector<Shape>& in, const std::vector<const Tensor*>& values) const {
  if (in[0] != in[1])
    throw ShapeError(name() + ": data " + shape_str(in[0]) + " and indices " + shape_str(in[1]) + " must have one entry per stored value");
  if (!values[3]) throw ShapeError(name() + ": the result's shape is known only from the sparse matrix's shape value");
  const auto [rows, cols] = shape_value(*this, *values[3]);
  const Shape& d = in[4];
  const int64_t d_rows = d.size() == 2 ? d[0] : 1, d_cols = d.empty() ? 1 : d.back();
  if ((d_rows != rows && d_rows != 1) || (d_cols != cols && d_cols != 1))
    throw ShapeError(name() + ": the dense value " + shape_str(d) + " does not broadcast to the sparse matrix's shape " + shape_str({rows, cols}));
  return {{rows, cols}};
}

std::vector<Var> SparseAddDense::L_op(const Node& node, const std::vector<Var>& g) const {
  const Var g_data = apply1(std::make_shared<SparseGather>(format()), {g[0], node.inputs[1], node.inputs[2], node.inputs[3]}, node.loc);
  // The dense value's axes that broadcasting added (a vector's rows, a number's both) are summed
  // away first.
  const Var& d = node.inputs[4];
  Var g_dense = g[0];
  if (d.ndim() < 2) g_dense = d.ndim() == 1 ? sum(g_dense, {0}, false, node.loc) : sum(g_dense, {}, false, node.loc);
  return {g_data, Var(), Var(), Var(), sum_to_shape_of(g_dense, d, node.loc)};
}

// ---- RowLookupGrad

std::vector<Type> RowLookupGrad::infer_types(const std::vector<Type>& in) const {
  if (in.size() != 3) throw TypeError(name() + ": takes the looked-up rows, their gradients and the matrix");
  expect_vector(name(), "rows", in[0], false);
  if (in[2].ndim() != 2 || !is_float(in[2].dtype))
    throw TypeError(name() + ": the looked-up matrix must be a float matrix, got " + in[2].str());
  expect_matrix(name(), "the rows' gradient", in[1], in[2].dtype);
  return {Type{in[2].dtype, {false}}, Type{DType::i64, {false}}, Type{DType::i64, {false}}, Type{DType::i64, {false}}};
}

std::vector<Shape> RowLookupGrad::infer_shapes(const std::vector<Shape>& in, const std::vector<const Tensor*>&) const {
  const int64_t n = in[0][0], cols = in[2][1];
  if (in[1] != Shape{n, cols})
    throw ShapeError(name() + ": " + std::to_string(n) + " rows looked up in a matrix " + shape_str(in[2]) +
                     " need a gradient of shape " + shape_str({n, cols}) + ", got " + shape_str(in[1]));
  return {{n * cols}, {n * cols}, {in[2][0] + 1}, {n}};
}

// data[positions[i] * cols + c] = g[i, c]: linear in g, its gradient reads the data's gradient back
// at each lookup's place.
std::vector<Var> RowLookupGrad::L_op(const Node& node, const std::vector<Var>& g) const {
  if (!g[0].defined()) return {Var(), Var(), Var()};
  const Var& rows_gradient = node.inputs[1];
  const Var by_row = reshape(g[0], shape_of(rows_gradient, node.loc), 2, node.loc);
  return {Var(), take(by_row, node.output(3), 0, node.loc), Var()};
}

// ---- SparseProduct

std::vector<Type> SparseProduct::infer_types(const std::vector<Type>& in) const {
  if (in.size() != 8) throw TypeError(name() + ": takes two sparse matrices' data, indices, indptr and shape");
  for (size_t side : {0, 4}) {
    expect_vector(name(), "data", in[side], true);
    expect_vector(name(), "indices", in[side + 1], false);
    expect_vector(name(), "indptr", in[side + 2], false);
    expect_vector(name(), "shape", in[side + 3], false);
  }
  if (in[0].dtype != in[4].dtype)
    throw TypeError(name() + ": both matrices must have one dtype, got " + in[0].str() + " and " + in[4].str());
  return {Type{in[0].dtype, {false}}, Type{DType::i64, {false}}, Type{DType::i64, {false}}};
}

namespace {

// The product in segment terms: CSR multiplies a's rows by b's rows (first a, then b), CSC b's
// columns by a's columns (first b, then a); segment i of the result gathers, for each entry
// (k, v) of the first's segment i, the second's segment k times v.
struct ProductOperands {
  Pattern first, second;
  int64_t first_data, second_data;  // input positions of their data
  int64_t rows, cols;               // the product's shape
};

ProductOperands product_operands(const Op& op, SparseFormat format, const Tensor& a_indices, const Tensor& a_indptr, const Tensor& a_shape,
                                 const Tensor& b_indices, const Tensor& b_indptr, const Tensor& b_shape);

// The entries of each segment of the product, counted with `marker` (one entry per minor index
// of the result, -1 or a segment index); returns the total.
int64_t count_product(const ProductOperands& p, int64_t* marker, int64_t* counts) {
  std::fill_n(marker, p.second.n_minor, int64_t{-1});
  int64_t total = 0;
  for (int64_t i = 0; i < p.first.n_major; ++i) {
    int64_t count = 0;
    for (int64_t e = p.first.indptr[i]; e < p.first.indptr[i + 1]; ++e) {
      const int64_t k = p.first.indices[e];
      for (int64_t f = p.second.indptr[k]; f < p.second.indptr[k + 1]; ++f)
        if (marker[p.second.indices[f]] != i) marker[p.second.indices[f]] = i, ++count;
    }
    if (counts) counts[i + 1] = count;
    total += count;
  }
  return total;
}

}  // namespace

std::vector<Shape> SparseProduct::infer_shapes(const std::vector<Shape>& in, const std::vector<const Tensor*>& values) const {
  for (size_t side : {0, 4})
    if (in[side] != in[side + 1])
      throw ShapeError(name() + ": data " + shape_str(in[side]) + " and indices " + shape_str(in[side + 1]) +
                       " must have one entry per stored value");
  for (int i : needs_input_values())
    if (!values[static_cast<size_t>(i)]) throw ShapeError(name() + ": the product's size is known only from both patterns' values");
  const ProductOperands p = product_operands(*this, format(), *values[1], *values[2], *values[3], *values[5], *values[6], *values[7]);
  std::vector<int64_t> marker(static_cast<size_t>(std::max<int64_t>(p.second.n_minor, 1)));
  const int64_t nnz = count_product(p, marker.data(), nullptr);
  return {{nnz}, {nnz}, {p.first.n_major + 1}};
}

// Structured, as the products with dense matrices: the gradient of each side's data is the
// product of g's matrix with the other side transposed, sampled at that side's pattern.
std::vector<Var> SparseProduct::L_op(const Node& node, const std::vector<Var>& g) const {
  const std::vector<Var>& in = node.inputs;
  const Loc loc = node.loc;
  const SparseVar a(format(), in[0], in[1], in[2], in[3], loc), b(format(), in[4], in[5], in[6], in[7], loc);
  const SparseVar grad_c(format(), g[0], node.output(1), node.output(2), stack({in[3][0], in[7][1]}, 0, loc), loc);
  auto in_format = [&](const SparseVar& x) { return format() == SparseFormat::csr ? to_csr(x, loc) : to_csc(x, loc); };
  auto sampled_at = [&](const SparseVar& value, const SparseVar& pattern) {
    return apply1(std::make_shared<SparseSample>(format()),
                  {value.data(), value.indices(), value.indptr(), value.shape(), pattern.indices(), pattern.indptr(), pattern.shape()}, loc);
  };
  const Var g_a = sampled_at(dot(grad_c, in_format(transpose(b, loc)), loc), a);
  const Var g_b = sampled_at(dot(in_format(transpose(a, loc)), grad_c, loc), b);
  return {g_a, Var(), Var(), Var(), g_b, Var(), Var(), Var()};
}

// ---- FullPattern

std::vector<Type> FullPattern::infer_types(const std::vector<Type>& in) const {
  if (in.size() != 1) throw TypeError(name() + ": takes a shape");
  expect_vector(name(), "shape", in[0], false);
  return {Type{DType::i64, {false}}, Type{DType::i64, {false}}};
}

std::vector<Shape> FullPattern::infer_shapes(const std::vector<Shape>&, const std::vector<const Tensor*>& values) const {
  if (!values[0]) throw ShapeError(name() + ": the pattern's size is known only from the shape's value");
  const auto [rows, cols] = shape_value(*this, *values[0]);
  return {{rows * cols}, {(format() == SparseFormat::csr ? rows : cols) + 1}};
}

// ---- kernels

namespace {

// The dimensions of a sparse matrix whose parts a kernel reads: (rows, cols) from the shape
// value, checked against the number of segments.
std::pair<int64_t, int64_t> checked_dims(const Op& op, SparseFormat format, const Tensor& indptr, const Tensor& shape) {
  const auto [rows, cols] = shape_value(op, shape);
  const int64_t n_major = format == SparseFormat::csr ? rows : cols;
  if (indptr.numel() != n_major + 1)
    throw ShapeError(op.name() + ": a " + sparse_format_name(format) + " matrix of shape " + shape_str({rows, cols}) + " needs " + std::to_string(n_major + 1) + " indptr entries, got " +
                     std::to_string(indptr.numel()));
  return {rows, cols};
}

// A sparse matrix a kernel reads: its dimensions from its shape value, its pattern checked
// against them.
struct CheckedMatrix {
  int64_t rows, cols;
  Pattern p;
};

CheckedMatrix checked_matrix(const Op& op, SparseFormat format, const Tensor& indices, const Tensor& indptr,
                             const Tensor& shape) {
  const auto [rows, cols] = checked_dims(op, format, indptr, shape);
  return {rows, cols, checked_pattern(op, indices, indptr, format == SparseFormat::csr ? cols : rows)};
}

// The product's loops, compiled per instruction set (for_this_cpu); every operand by value.
template <class T> struct SparseDotLoops {
  // Four 64-byte vectors of product columns (64 floats, 32 doubles) stay in registers while a
  // row's entries are added in; GCC's vector type is split into what the instruction set has.
  using Vec [[gnu::vector_size(64)]] = T;
  static constexpr int kLanes = 64 / sizeof(T), kVectors = 4, kBlock = kLanes * kVectors;
  Pattern p;
  const T* v;
  const T* d;
  T* o;
  int64_t vs, drs, dcs, ors, ocs, n, rows;

  // CSR: row r of the product gathers the dense rows its entries name; rows are independent.
  void rows_range(int64_t r0, int64_t r1) const {
    const bool unit = ocs == 1 && dcs == 1;
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t k0 = p.indptr[r], k1 = p.indptr[r + 1];
      T* orow = o + r * ors;
      if (unit && n == 1) {  // a matrix times a vector: one sum per row, kept in a register
        T total = 0;
        for (int64_t k = k0; k < k1; ++k) total += v[k * vs] * d[p.indices[k] * drs];
        orow[0] = total;
        continue;
      }
      int64_t j0 = 0;
      if (unit) {
        // Blocks of kBlock product columns accumulate in registers over the row's entries.
        for (; j0 + kBlock <= n; j0 += kBlock) {
          Vec acc[kVectors] = {};
          for (int64_t k = k0; k < k1; ++k) {
            const T x = v[k * vs];
            const T* drow = d + p.indices[k] * drs + j0;
            for (int q = 0; q < kVectors; ++q) {
              Vec row_part;
              std::memcpy(&row_part, drow + q * kLanes, sizeof(Vec));
              acc[q] += x * row_part;
            }
          }
          std::memcpy(orow + j0, acc, sizeof(acc));
        }
      }
      for (int64_t j = j0; j < n; ++j) orow[j * ocs] = T(0);
      for (int64_t k = k0; k < k1 && j0 < n; ++k) {
        const T x = v[k * vs];
        const T* drow = d + p.indices[k] * drs;
        for (int64_t j = j0; j < n; ++j) orow[j * ocs] += x * drow[j * dcs];
      }
    }
  }
  // CSC: column c of the sparse matrix scatters d's row c into the rows its entries name, for
  // columns [c0, c1) of the sparse matrix and [j0, j1) of the product, into `into` (the product,
  // or a thread's partial product laid out like it).
  void scatter(int64_t c0, int64_t c1, int64_t j0, int64_t j1, T* into) const {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = j0; j < j1; ++j) into[r * ors + j * ocs] = T(0);
    for (int64_t c = c0; c < c1; ++c) {
      const T* drow = d + c * drs;
      for (int64_t k = p.indptr[c]; k < p.indptr[c + 1]; ++k) {
        const T x = v[k * vs];
        T* orow = into + p.indices[k] * ors;
        if (ocs == 1 && dcs == 1)
          for (int64_t j = j0; j < j1; ++j) orow[j] += x * drow[j];
        else
          for (int64_t j = j0; j < j1; ++j) orow[j * ocs] += x * drow[j * dcs];
      }
    }
  }
  // Adds the partial products in rows [r0, r1) to the product.
  void add_partials(const T* partials, int n_partials, int64_t r0, int64_t r1) const {
    for (int q = 0; q < n_partials; ++q) {
      const T* part = partials + q * rows * n;
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t j = 0; j < n; ++j) o[r * ors + j * ocs] += part[r * ors + j * ocs];
    }
  }
};

// A CSC product with fewer columns than there are threads to split them among (x^T . g with g
// one column, the gradient of x . w) gives each thread a share of the sparse columns and a partial
// product of its own, in scratch, added up at the end.
bool csc_uses_partials(int64_t n) { return num_threads() > 1 && n < 8 * num_threads(); }

class SparseDotKernel final : public KernelOf<SparseDot> {
 public:
  using KernelOf::KernelOf;
  void run(InputValues in, OutputValues out, std::span<std::byte> scratch) const override {
    const SparseFormat format = op().format();
    const Tensor &data = in[0], &d = in[4];
    const auto [rows, cols, p] = checked_matrix(op(), format, in[1], in[2], in[3]);
    if (d.shape()[0] != cols)
      throw ShapeError(op().name() + ": the sparse matrix is " + shape_str({rows, cols}) + " but the dense operand is " +
                       shape_str(d.shape()) + "; its rows must equal the sparse columns");
    Tensor& o = out[0];
    dispatch_float(data.dtype(), "sparse_dot", [&](auto zero) {
      using T = decltype(zero);
      const SparseDotLoops<T> loops{p,        data.data<T>(),   d.data<T>(),      o.data<T>(),   data.strides()[0],
                                    d.strides()[0], d.strides()[1], o.strides()[0], o.strides()[1], d.shape()[1], rows};
      const int64_t n = loops.n;
      if (format == SparseFormat::csr) {
        const int threads = threads_for(p.nnz * n, rows);
        if (threads <= 1) return for_this_cpu([loops, rows] { loops.rows_range(0, rows); });
        parallel_region(threads, [&](int t, int nt) {
          const int64_t r0 = segment_split(p, t, nt), r1 = segment_split(p, t + 1, nt);
          for_this_cpu([loops, r0, r1] { loops.rows_range(r0, r1); });
        });
        return;
      }
      const int64_t product_elements = rows * n;
      const int partials = product_elements > 0 && csc_uses_partials(n)
                               ? static_cast<int>(std::min<int64_t>(num_threads() - 1, static_cast<int64_t>(scratch.size() / sizeof(T)) / product_elements))
                               : 0;
      const int threads = threads_for(p.nnz * n, partials > 0 ? p.n_major : n);
      if (threads <= 1) return for_this_cpu([loops, n, major = p.n_major] { loops.scatter(0, major, 0, n, loops.o); });
      if (partials > 0 && o.is_contiguous()) {
        const int nt = std::min(threads, partials + 1);
        T* partial_base = reinterpret_cast<T*>(scratch.data());
        parallel_region(nt, [&](int t, int team) {
          const int64_t c0 = segment_split(p, t, team), c1 = segment_split(p, t + 1, team);
          T* into = t == 0 ? loops.o : partial_base + (t - 1) * product_elements;
          for_this_cpu([loops, c0, c1, n, into] { loops.scatter(c0, c1, 0, n, into); });
#pragma omp barrier
          const int64_t r0 = rows * t / team, r1 = rows * (t + 1) / team;
          for_this_cpu([loops, partial_base, team, r0, r1] { loops.add_partials(partial_base, team - 1, r0, r1); });
        });
        return;
      }
      parallel_region(threads, [&](int t, int nt) {
        const int64_t j0 = n * t / nt, j1 = n * (t + 1) / nt;
        for_this_cpu([loops, j0, j1, major = p.n_major] { loops.scatter(0, major, j0, j1, loops.o); });
      });
    });
  }

  int64_t scratch_bytes(const std::vector<Shape>& inputs, const std::vector<Shape>& outputs) const override {
    if (op().format() != SparseFormat::csc || !csc_uses_partials(inputs[4][1])) return 0;
    return (num_threads() - 1) * shape_numel(outputs[0]) * static_cast<int64_t>(dtype_size(output_dtype(0)));
  }
};

class SamplingDotKernel final : public KernelOf<SamplingDot> {
 public:
  using KernelOf::KernelOf;
  void run(InputValues in, OutputValues out, std::span<std::byte>) const override {
    const SparseFormat format = op().format();
    const Tensor &a = in[0], &b = in[1];
    const Tensor& major_side = format == SparseFormat::csr ? a : b;
    const Tensor& minor_side = format == SparseFormat::csr ? b : a;
    if (in[3].numel() != major_side.shape()[0] + 1)
      throw ShapeError(op().name() + ": the pattern has " + std::to_string(in[3].numel() - 1) + (format == SparseFormat::csr ? " rows" : " columns") +
                       " but a is " + shape_str(a.shape()) + " and b is " + shape_str(b.shape()));
    const Pattern p = checked_pattern(op(), in[2], in[3], minor_side.shape()[0]);
    const int64_t kdim = a.shape()[1], ars = a.strides()[0], acs = a.strides()[1], brs = b.strides()[0], bcs = b.strides()[1];
    dispatch_float(a.dtype(), "sampling_dot", [&](auto zero) {
      using T = decltype(zero);
      const T* ap = a.data<T>();
      const T* bp = b.data<T>();
      T* o = out[0].data<T>();
      const int64_t os = out[0].strides()[0];
      auto run_segments = [&](int64_t m0, int64_t m1) {
        for (int64_t m = m0; m < m1; ++m)
          for (int64_t k = p.indptr[m]; k < p.indptr[m + 1]; ++k) {
            const int64_t r = p.row(format, m, k), c = p.col(format, m, k);
            const T* arow = ap + r * ars;
            const T* brow = bp + c * brs;
            T total = 0;
            for (int64_t j = 0; j < kdim; ++j) total += arow[j * acs] * brow[j * bcs];
            o[k * os] = total;
          }
      };
      const int threads = threads_for(p.nnz * kdim, p.n_major);
      if (threads <= 1) return run_segments(0, p.n_major);
      parallel_region(threads, [&](int t, int nt) { run_segments(segment_split(p, t, nt), segment_split(p, t + 1, nt)); });
    });
  }
};

class SparseGatherKernel final : public KernelOf<SparseGather> {
 public:
  using KernelOf::KernelOf;
  void run(InputValues in, OutputValues out, std::span<std::byte>) const override {
    const SparseFormat format = op().format();
    const Tensor& g = in[0];
    const auto [rows, cols, p] = checked_matrix(op(), format, in[1], in[2], in[3]);
    const bool rows_ok = g.shape()[0] == rows || g.shape()[0] == 1, cols_ok = g.shape()[1] == cols || g.shape()[1] == 1;
    if (!rows_ok || !cols_ok)
      throw ShapeError(op().name() + ": g " + shape_str(g.shape()) + " does not broadcast to the sparse matrix's shape " + shape_str({rows, cols}));
    const int64_t grs = g.shape()[0] == 1 ? 0 : g.strides()[0], gcs = g.shape()[1] == 1 ? 0 : g.strides()[1];
    dispatch_float(g.dtype(), "sparse_gather", [&](auto zero) {
      using T = decltype(zero);
      const T* gp = g.data<T>();
      T* o = out[0].data<T>();
      const int64_t os = out[0].strides()[0];
      for (int64_t m = 0; m < p.n_major; ++m)
        for (int64_t k = p.indptr[m]; k < p.indptr[m + 1]; ++k) {
          o[k * os] = gp[p.row(format, m, k) * grs + p.col(format, m, k) * gcs];
        }
    });
  }
};

class SparseReduceKernel final : public KernelOf<SparseReduce> {
 public:
  using KernelOf::KernelOf;
  // Row and column sums of f32 values accumulate in f64, as dense sums do (in f32 a million
  // entries of 0.1 summed to 100958).
  int64_t scratch_bytes(const std::vector<Shape>&, const std::vector<Shape>& out) const override {
    return op().axis() >= 0 && output_dtype(0) == DType::f32 ? shape_numel(out[0]) * static_cast<int64_t>(sizeof(double)) : 0;
  }
  void run(InputValues in, OutputValues out, std::span<std::byte> scratch) const override {
    const SparseFormat format = op().format();
    const auto [rows, cols, p] = checked_matrix(op(), format, in[1], in[2], in[3]);
    const int64_t axis = op().axis();
    Tensor& o = out[0];
    dispatch_float(in[0].dtype(), "sparse_reduce", [&](auto zero) {
      using T = decltype(zero);
      const T* v = in[0].data<T>();
      const int64_t vs = in[0].strides()[0];
      T* op_ = o.data<T>();
      const int64_t ors = o.strides()[0], ocs = axis < 0 ? o.strides()[1] : 0;
      const int64_t n_out = axis < 0 ? rows * cols : o.shape()[0];
      if (axis < 0) {
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t c = 0; c < cols; ++c) op_[r * ors + c * ocs] = T(0);
        for (int64_t m = 0; m < p.n_major; ++m)
          for (int64_t k = p.indptr[m]; k < p.indptr[m + 1]; ++k) op_[p.row(format, m, k) * ors + p.col(format, m, k) * ocs] += v[k * vs];
        return;
      }
      double* sums = reinterpret_cast<double*>(scratch.data());  // f32 only: an f64 sum accumulates in its output
      auto sum_at = [&](int64_t i) -> auto& {
        if constexpr (std::is_same_v<T, double>) return op_[i * ors];
        else return sums[i];
      };
      for (int64_t i = 0; i < n_out; ++i) sum_at(i) = 0;
      for (int64_t m = 0; m < p.n_major; ++m)
        for (int64_t k = p.indptr[m]; k < p.indptr[m + 1]; ++k) {
          const int64_t r = p.row(format, m, k), c = p.col(format, m, k);
          sum_at(axis == 0 ? c : r) += static_cast<double>(v[k * vs]);
        }
      if constexpr (!std::is_same_v<T, double>)
        for (int64_t i = 0; i < n_out; ++i) op_[i * ors] = static_cast<T>(sums[i]);
    });
  }
};

class SparseMajorSliceKernel final : public KernelOf<SparseMajorSlice> {
 public:
  using KernelOf::KernelOf;
  void run(InputValues in, OutputValues out, std::span<std::byte>) const override {
    const SliceExtent e = slice_extent(op(), op().single(), in[2], in[3], in[4], in[0].numel());
    const int64_t count = e.entry_end - e.entry_begin;
    copy_broadcast(out[0], in[0].view({count}, in[0].strides(), in[0].offset() + e.entry_begin * in[0].strides()[0]));
    copy_broadcast(out[1], in[1].view({count}, in[1].strides(), in[1].offset() + e.entry_begin * in[1].strides()[0]));
    const int64_t* ptr = in[2].data<int64_t>();
    int64_t* o = out[2].data<int64_t>();
    const int64_t os = out[2].strides()[0];
    for (int64_t m = e.first; m <= e.last; ++m) o[(m - e.first) * os] = ptr[m] - e.entry_begin;
  }
};

class SparseMajorSliceGradKernel final : public KernelOf<SparseMajorSliceGrad> {
 public:
  using KernelOf::KernelOf;
  void run(InputValues in, OutputValues out, std::span<std::byte>) const override {
    const SliceExtent e = slice_extent(op(), op().single(), in[3], in[4], in[5], in[1].numel());
    Tensor& o = out[0];
    dispatch_float(o.dtype(), "sparse_major_slice_grad", [&](auto zero) {
      using T = decltype(zero);
      T* p = o.data<T>();
      for (int64_t k = 0; k < o.numel(); ++k) p[k * o.strides()[0]] = T(0);
    });
    const int64_t count = e.entry_end - e.entry_begin;
    copy_broadcast(o.view({count}, o.strides(), o.offset() + e.entry_begin * o.strides()[0]), in[0]);
  }
};

// Both matrices of a join, checked: dimensions that agree for the join and valid patterns.
struct JoinOperands {
  int64_t a_rows, a_cols, b_rows, b_cols;
  Pattern a, b;
  int64_t minor_offset;  // added to b's indices
};

// The join's inputs are in[first] .. in[first + 7].
JoinOperands join_operands(const SparseJoin& join, InputValues in, size_t first) {
  const SparseFormat format = join.format();
  auto part = [&](size_t i) -> const Tensor& { return in[first + i]; };
  const CheckedMatrix a = checked_matrix(join, format, part(1), part(2), part(3));
  const CheckedMatrix b = checked_matrix(join, format, part(5), part(6), part(7));
  const int64_t ar = a.rows, ac = a.cols, br = b.rows, bc = b.cols;
  const bool rows_agree = ar == br, cols_agree = ac == bc;
  const bool ok = join.how() == SparseJoin::How::add ? rows_agree && cols_agree
                  : join.how() == SparseJoin::How::stack_rows ? cols_agree
                                                              : rows_agree;
  if (!ok)
    throw ShapeError(join.name() + ": shapes " + shape_str({ar, ac}) + " and " + shape_str({br, bc}) + " " +
                     (join.how() == SparseJoin::How::add ? "differ; a sum needs equal shapes"
                      : join.how() == SparseJoin::How::stack_rows ? "have different numbers of columns; vstack needs equal ones"
                                                                  : "have different numbers of rows; hstack needs equal ones"));
  const bool csr = format == SparseFormat::csr;
  JoinOperands j{ar, ac, br, bc, a.p, b.p, 0};
  if (join.how() != SparseJoin::How::add && !join.appends_segments()) j.minor_offset = csr ? ac : ar;
  return j;
}

class SparseJoinKernel final : public KernelOf<SparseJoin> {
 public:
  using KernelOf::KernelOf;
  void run(InputValues in, OutputValues out, std::span<std::byte>) const override {
    const JoinOperands j = join_operands(op(), in, 0);
    int64_t* indices = out[1].data<int64_t>();
    int64_t* indptr = out[2].data<int64_t>();
    int64_t* shape = out[3].data<int64_t>();
    const int64_t is = out[1].strides()[0], ps = out[2].strides()[0], ss = out[3].strides()[0];
    const bool rows = op().how() == SparseJoin::How::stack_rows, columns = op().how() == SparseJoin::How::stack_columns;
    shape[0] = rows ? j.a_rows + j.b_rows : j.a_rows;
    shape[ss] = columns ? j.a_cols + j.b_cols : j.a_cols;
    dispatch_float(in[0].dtype(), "sparse_join", [&](auto zero) {
      using T = decltype(zero);
      const T* av = in[0].data<T>();
      const T* bv = in[4].data<T>();
      T* data = out[0].data<T>();
      const int64_t as = in[0].strides()[0], bs = in[4].strides()[0], ds = out[0].strides()[0];
      int64_t at = 0;
      auto put = [&](T value, int64_t index) {
        data[at * ds] = value;
        indices[at * is] = index;
        ++at;
      };
      if (op().appends_segments()) {
        for (int64_t k = 0; k < j.a.nnz; ++k) put(av[k * as], j.a.indices[k]);
        for (int64_t k = 0; k < j.b.nnz; ++k) put(bv[k * bs], j.b.indices[k]);
        for (int64_t m = 0; m <= j.a.n_major; ++m) indptr[m * ps] = j.a.indptr[m];
        for (int64_t m = 1; m <= j.b.n_major; ++m) indptr[(j.a.n_major + m) * ps] = j.a.nnz + j.b.indptr[m];
        return;
      }
      indptr[0] = 0;
      for (int64_t m = 0; m < j.a.n_major; ++m) {
        for (int64_t k = j.a.indptr[m]; k < j.a.indptr[m + 1]; ++k) put(av[k * as], j.a.indices[k]);
        for (int64_t k = j.b.indptr[m]; k < j.b.indptr[m + 1]; ++k) put(bv[k * bs], j.b.indices[k] + j.minor_offset);
        indptr[(m + 1) * ps] = at;
      }
    });
  }
};

class SparseJoinSplitKernel final : public KernelOf<SparseJoinSplit> {
 public:
  using KernelOf::KernelOf;
  void run(InputValues in, OutputValues out, std::span<std::byte>) const override {
    const JoinOperands j = join_operands(op().join(), in, 1);
    const int side = op().side();
    dispatch_float(in[0].dtype(), "sparse_join_split", [&](auto zero) {
      using T = decltype(zero);
      const T* g = in[0].data<T>();
      T* o = out[0].data<T>();
      const int64_t gs = in[0].strides()[0], os = out[0].strides()[0];
      if (op().join().appends_segments()) {
        const int64_t first = side == 0 ? 0 : j.a.nnz, count = side == 0 ? j.a.nnz : j.b.nnz;
        for (int64_t k = 0; k < count; ++k) o[k * os] = g[(first + k) * gs];
        return;
      }
      const Pattern& mine = side == 0 ? j.a : j.b;
      for (int64_t m = 0; m < mine.n_major; ++m) {
        // The joined segment m starts at a's start plus b's, and holds a's entries first.
        const int64_t joined = j.a.indptr[m] + j.b.indptr[m] + (side == 0 ? 0 : j.a.indptr[m + 1] - j.a.indptr[m]);
        for (int64_t k = mine.indptr[m]; k < mine.indptr[m + 1]; ++k) o[k * os] = g[(joined + k - mine.indptr[m]) * gs];
      }
    });
  }
};

class SparseConvertKernel final : public KernelOf<SparseConvert> {
 public:
  using KernelOf::KernelOf;
  void run(InputValues in, OutputValues out, std::span<std::byte>) const override {
    const SparseFormat from = op().from();
    const auto [rows, cols, p] = checked_matrix(op(), from, in[0], in[1], in[2]);
    const int64_t n_minor = from == SparseFormat::csr ? cols : rows;
    int64_t* indices = out[0].data<int64_t>();
    int64_t* indptr = out[1].data<int64_t>();
    int64_t* positions = out[2].data<int64_t>();
    const int64_t is = out[0].strides()[0], ps = out[1].strides()[0], qs = out[2].strides()[0];
    // A counting sort of the entries by their minor index; indptr serves as the running cursor of
    // each new segment (one place ahead), then holds the segments' starts.
    for (int64_t c = 0; c <= n_minor; ++c) indptr[c * ps] = 0;
    for (int64_t k = 0; k < p.nnz; ++k) ++indptr[(p.indices[k] + 1) * ps];
    for (int64_t c = 1; c <= n_minor; ++c) indptr[c * ps] += indptr[(c - 1) * ps];
    for (int64_t m = 0; m < p.n_major; ++m)
      for (int64_t k = p.indptr[m]; k < p.indptr[m + 1]; ++k) {
        const int64_t at = indptr[p.indices[k] * ps]++;
        indices[at * is] = m;
        positions[at * qs] = k;
      }
    for (int64_t c = n_minor; c > 0; --c) indptr[c * ps] = indptr[(c - 1) * ps];
    indptr[0] = 0;
  }
};

class SparseSampleKernel final : public KernelOf<SparseSample> {
 public:
  using KernelOf::KernelOf;
  void run(InputValues in, OutputValues out, std::span<std::byte>) const override {
    const SparseFormat format = op().format();
    const auto [rows, cols] = checked_dims(op(), format, in[2], in[3]);
    const auto [p_rows, p_cols] = checked_dims(op(), format, in[5], in[6]);
    if (rows != p_rows || cols != p_cols)
      throw ShapeError(op().name() + ": shapes " + shape_str({rows, cols}) + " and " + shape_str({p_rows, p_cols}) +
                       " differ; elementwise products need equal shapes");
    const Pattern from = checked_matrix(op(), format, in[1], in[2], in[3]).p, at = checked_matrix(op(), format, in[4], in[5], in[6]).p;
    dispatch_float(in[0].dtype(), "sparse_sample", [&](auto zero) {
      using T = decltype(zero);
      const T* v = in[0].data<T>();
      T* o = out[0].data<T>();
      const int64_t vs = in[0].strides()[0], os = out[0].strides()[0];
      auto sorted = [](const Pattern& p, int64_t m) {
        for (int64_t k = p.indptr[m] + 1; k < p.indptr[m + 1]; ++k)
          if (p.indices[k] <= p.indices[k - 1]) return false;
        return true;
      };
      std::vector<std::pair<int64_t, double>> places;  // only for rows that are not sorted
      for (int64_t m = 0; m < at.n_major; ++m) {
        const int64_t f0 = from.indptr[m], f1 = from.indptr[m + 1];
        if (sorted(from, m) && sorted(at, m)) {
          int64_t f = f0;
          for (int64_t k = at.indptr[m]; k < at.indptr[m + 1]; ++k) {
            while (f < f1 && from.indices[f] < at.indices[k]) ++f;
            o[k * os] = f < f1 && from.indices[f] == at.indices[k] ? v[f * vs] : T(0);
          }
          continue;
        }
        // Unsorted or repeated: the row's entries sorted by index and summed per place, then each
        // of the pattern's places looked up (r log r, not r^2: structured() samples a matrix at
        // its own pattern).
        places.clear();
        for (int64_t f = f0; f < f1; ++f) places.push_back({from.indices[f], static_cast<double>(v[f * vs])});
        std::sort(places.begin(), places.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
        size_t unique = 0;
        for (size_t i = 0; i < places.size(); ++i) {
          if (unique > 0 && places[unique - 1].first == places[i].first) places[unique - 1].second += places[i].second;
          else places[unique++] = places[i];
        }
        places.resize(unique);
        for (int64_t k = at.indptr[m]; k < at.indptr[m + 1]; ++k) {
          const auto it = std::lower_bound(places.begin(), places.end(), at.indices[k],
                                           [](const auto& place, int64_t index) { return place.first < index; });
          o[k * os] = it != places.end() && it->first == at.indices[k] ? static_cast<T>(it->second) : T(0);
        }
      }
    });
  }
};


class SparseAddDenseKernel final : public KernelOf<SparseAddDense> {
 public:
  using KernelOf::KernelOf;
  void run(InputValues in, OutputValues out, std::span<std::byte>) const override {
    const SparseFormat format = op().format();
    const auto [rows, cols, p] = checked_matrix(op(), format, in[1], in[2], in[3]);
    Tensor& o = out[0];
    const Tensor& d = in[4];
    // Written over d (in place), only the stored entries change.
    if (!(o.raw_data() == d.raw_data() && o.shape() == d.shape() && o.strides() == d.strides())) copy_broadcast(o, d);
    dispatch_float(in[0].dtype(), "sparse_add_dense", [&](auto zero) {
      using T = decltype(zero);
      const T* v = in[0].data<T>();
      const int64_t vs = in[0].strides()[0];
      T* po = o.data<T>();
      const int64_t ors = o.strides()[0], ocs = o.strides()[1];
      for (int64_t m = 0; m < p.n_major; ++m)
        for (int64_t k = p.indptr[m]; k < p.indptr[m + 1]; ++k) po[p.row(format, m, k) * ors + p.col(format, m, k) * ocs] += v[k * vs];
    });
  }
};

class RowLookupGradKernel final : public KernelOf<RowLookupGrad> {
 public:
  using KernelOf::KernelOf;
  void run(InputValues in, OutputValues out, std::span<std::byte>) const override {
    const Tensor &rows = in[0], &g = in[1];
    const int64_t n = rows.numel(), n_rows = in[2].shape()[0], cols = in[2].shape()[1];
    const int64_t* r = rows.data<int64_t>();
    const int64_t rs = rows.strides()[0];
    int64_t* indptr = out[2].data<int64_t>();
    int64_t* positions = out[3].data<int64_t>();
    auto row_of = [&](int64_t i) {
      const int64_t v = r[i * rs], row = v < 0 ? v + n_rows : v;
      if (row < 0 || row >= n_rows)
        throw ShapeError(op().name() + ": row " + std::to_string(v) + " (lookup " + std::to_string(i) + ") is out of range for a matrix of " +
                         std::to_string(n_rows) + " rows");
      return row;
    };
    // A counting sort of the lookups by row, stable: indptr[r + 1] counts row r, then its end;
    // placing the lookups from the last leaves indptr[r + 1] at row r's start. positions holds
    // each lookup's checked row until it is replaced by the lookup's place.
    std::fill_n(indptr, n_rows + 1, int64_t{0});
    for (int64_t i = 0; i < n; ++i) ++indptr[(positions[i] = row_of(i)) + 1];
    for (int64_t q = 0; q < n_rows; ++q) indptr[q + 1] += indptr[q];
    for (int64_t i = n; i-- > 0;) positions[i] = --indptr[positions[i] + 1];
    for (int64_t q = 0; q < n_rows; ++q) indptr[q] = indptr[q + 1];
    indptr[n_rows] = n;
    for (int64_t q = 0; q <= n_rows; ++q) indptr[q] *= cols;
    int64_t* indices = out[1].data<int64_t>();
    dispatch_float(g.dtype(), "row_lookup_grad", [&](auto zero) {
      using T = decltype(zero);
      const T* pg = g.data<T>();
      const int64_t grs = g.strides()[0], gcs = g.strides()[1];
      T* data = out[0].data<T>();
      for (int64_t i = 0; i < n; ++i) {
        const int64_t at = positions[i] * cols;
        for (int64_t c = 0; c < cols; ++c) {
          data[at + c] = pg[i * grs + c * gcs];
          indices[at + c] = c;
        }
      }
    });
  }
};

ProductOperands product_operands(const Op& op, SparseFormat format, const Tensor& a_indices, const Tensor& a_indptr, const Tensor& a_shape,
                                 const Tensor& b_indices, const Tensor& b_indptr, const Tensor& b_shape) {
  const CheckedMatrix a = checked_matrix(op, format, a_indices, a_indptr, a_shape);
  const CheckedMatrix b = checked_matrix(op, format, b_indices, b_indptr, b_shape);
  if (a.cols != b.rows)
    throw ShapeError(op.name() + ": a " + shape_str({a.rows, a.cols}) + " times b " + shape_str({b.rows, b.cols}) +
                     ": a's columns must match b's rows");
  const bool csr = format == SparseFormat::csr;
  return {csr ? a.p : b.p, csr ? b.p : a.p, csr ? 0 : 4, csr ? 4 : 0, a.rows, b.cols};
}

class SparseProductKernel final : public KernelOf<SparseProduct> {
 public:
  using KernelOf::KernelOf;
  bool scratch_depends_on_values() const override { return true; }
  // A marker and an accumulator per minor index of the result.
  int64_t scratch_bytes_of(InputValues in) const override {
    const ProductOperands p = product_operands(op(), op().format(), in[1], in[2], in[3], in[5], in[6], in[7]);
    return std::max<int64_t>(p.second.n_minor, 1) * static_cast<int64_t>(sizeof(int64_t) + dtype_size(output_dtype(0)));
  }
  void run(InputValues in, OutputValues out, std::span<std::byte> scratch) const override {
    const ProductOperands p = product_operands(op(), op().format(), in[1], in[2], in[3], in[5], in[6], in[7]);
    const int64_t minor = p.second.n_minor;
    if (static_cast<int64_t>(scratch.size()) < std::max<int64_t>(minor, 1) * static_cast<int64_t>(sizeof(int64_t) + dtype_size(output_dtype(0))))
      throw Error(op().name() + ": working memory too small (please report it)");
    int64_t* marker = reinterpret_cast<int64_t*>(scratch.data());
    int64_t* indptr = out[2].data<int64_t>();
    int64_t* indices = out[1].data<int64_t>();
    indptr[0] = 0;
    const int64_t nnz = count_product(p, marker, indptr);
    for (int64_t i = 0; i < p.first.n_major; ++i) indptr[i + 1] += indptr[i];
    if (nnz != out[1].numel()) throw Error(op().name() + ": the patterns changed while it ran (please report it)");
    dispatch_float(output_dtype(0), "sparse_product", [&](auto zero) {
      using T = decltype(zero);
      T* acc = reinterpret_cast<T*>(marker + std::max<int64_t>(minor, 1));
      const T* first = in[static_cast<size_t>(p.first_data)].template data<T>();
      const T* second = in[static_cast<size_t>(p.second_data)].template data<T>();
      const int64_t fs = in[static_cast<size_t>(p.first_data)].strides()[0], ss = in[static_cast<size_t>(p.second_data)].strides()[0];
      T* data = out[0].template data<T>();
      std::fill_n(marker, minor, int64_t{-1});
      for (int64_t i = 0; i < p.first.n_major; ++i) {
        int64_t* row = indices + indptr[i];
        int64_t n = 0;
        for (int64_t e = p.first.indptr[i]; e < p.first.indptr[i + 1]; ++e) {
          const int64_t k = p.first.indices[e];
          const T v = first[e * fs];
          for (int64_t f = p.second.indptr[k]; f < p.second.indptr[k + 1]; ++f) {
            const int64_t j = p.second.indices[f];
            if (marker[j] != i) {
              marker[j] = i;
              acc[j] = T(0);
              row[n++] = j;
            }
            acc[j] += v * second[f * ss];
          }
        }
        std::sort(row, row + n);
        for (int64_t q = 0; q < n; ++q) data[indptr[i] + q] = acc[row[q]];
      }
    });
  }
};

class FullPatternKernel final : public KernelOf<FullPattern> {
 public:
  using KernelOf::KernelOf;
  void run(InputValues in, OutputValues out, std::span<std::byte>) const override {
    const auto [rows, cols] = shape_value(op(), in[0]);
    const bool csr = op().format() == SparseFormat::csr;
    const int64_t n_major = csr ? rows : cols, n_minor = csr ? cols : rows;
    int64_t* indices = out[0].data<int64_t>();
    int64_t* indptr = out[1].data<int64_t>();
    for (int64_t m = 0; m <= n_major; ++m) indptr[m] = m * n_minor;
    for (int64_t m = 0; m < n_major; ++m)
      for (int64_t j = 0; j < n_minor; ++j) indices[m * n_minor + j] = j;
  }
};

}  // namespace

void add_sparse_kernels(KernelTable& table) {
  table.add<FullPattern, FullPatternKernel>();
  table.add<SparseProduct, SparseProductKernel>();
  table.add<SparseAddDense, SparseAddDenseKernel>();
  table.add<RowLookupGrad, RowLookupGradKernel>();
  table.add<SparseDot, SparseDotKernel>();
  table.add<SamplingDot, SamplingDotKernel>();
  table.add<SparseGather, SparseGatherKernel>();
  table.add<SparseReduce, SparseReduceKernel>();
  table.add<SparseMajorSlice, SparseMajorSliceKernel>();
  table.add<SparseMajorSliceGrad, SparseMajorSliceGradKernel>();
  table.add<SparseJoin, SparseJoinKernel>();
  table.add<SparseConvert, SparseConvertKernel>();
  table.add<SparseSample, SparseSampleKernel>();
  table.add<SparseJoinSplit, SparseJoinSplitKernel>();
}

// ---- the public operations

SparseVar::SparseVar(SparseFormat format, Var data, Var indices, Var indptr, Var shape, Loc loc)
    : format_(format), data_(std::move(data)), indices_(std::move(indices)), indptr_(std::move(indptr)), shape_(std::move(shape)) {
  const std::string op = std::string(sparse_format_name(format)) + " matrix from parts (at " + loc_str(loc) + ")";
  if (!data_.defined() || !indices_.defined() || !indptr_.defined() || !shape_.defined())
    throw TypeError(op + ": every part (data, indices, indptr, shape) must be defined");
  expect_vector(op, "data", data_.type(), true);
  expect_vector(op, "indices", indices_.type(), false);
  expect_vector(op, "indptr", indptr_.type(), false);
  expect_vector(op, "shape", shape_.type(), false);
}

std::string SparseVar::str() const {
  std::string name = data_.name();
  if (const size_t dot = name.rfind(".data"); dot != std::string::npos && dot + 5 == name.size()) name.resize(dot);
  return std::string(sparse_format_name(format_)) + " " + dtype_name(dtype()) + " matrix" + (name.empty() ? "" : " " + name);
}

namespace {

SparseVar sparse_input(SparseFormat format, const std::string& name, DType dtype) {
  if (!is_float(dtype))
    throw TypeError(std::string(sparse_format_name(format)) + "_matrix: a sparse matrix holds f32 or f64 values, not " + dtype_name(dtype));
  const std::string base = name.empty() ? std::string() : name + ".";
  return SparseVar(format, vector(base + "data", dtype), vector(base + "indices", DType::i64), vector(base + "indptr", DType::i64),
                   vector(base + "shape", DType::i64));
}

}  // namespace

SparseVar csr_matrix(const std::string& name, DType dtype) { return sparse_input(SparseFormat::csr, name, dtype); }
SparseVar csc_matrix(const std::string& name, DType dtype) { return sparse_input(SparseFormat::csc, name, dtype); }

SparseVar sparse_constant(const SparseTensor& value, const std::string& name) {
  if (!value.defined()) throw TypeError("sparse_constant: the value is empty (a default-made SparseTensor)");
  const std::string base = name.empty() ? std::string() : name + ".";
  const Tensor shape = Tensor::from(std::vector<int64_t>{value.shape()[0], value.shape()[1]});
  return SparseVar(value.format(), constant(value.data(), base + "data"), constant(value.indices(), base + "indices"),
                   constant(value.indptr(), base + "indptr"), constant(shape, base + "shape"));
}

SparseShared::SparseShared(SparseFormat format, Shared data, Shared indices, Shared indptr, Shared shape)
    : format_(format), data_(std::move(data)), indices_(std::move(indices)), indptr_(std::move(indptr)), shape_(std::move(shape)) {
  var();  // checks the parts' types
}

SparseVar SparseShared::var() const { return SparseVar(format_, data_, indices_, indptr_, shape_); }

SparseTensor SparseShared::get_value(GetValueOptions options, Loc loc) const {
  // The parts at one moment: a value set meanwhile is seen whole or not at all.
  std::vector<Tensor> parts;
  {
    const InternalTensors internal;
    parts = get_values_together({data_, indices_, indptr_, shape_}, {.borrow = options.borrow});
  }
  const Tensor &data = parts[0], &indices = parts[1], &indptr = parts[2], &shape = parts[3];
  const std::vector<int64_t> dims = shape.to_vector<int64_t>();
  if (dims.size() != 2) throw ShapeError("SparseShared::get_value: the shape variable holds " + shape.str() + ", not 2 dimensions");
  const SparseOptions sparse{.borrow = options.borrow};
  return format_ == SparseFormat::csr ? SparseTensor::csr(data, indices, indptr, {dims[0], dims[1]}, sparse, loc)
                                      : SparseTensor::csc(data, indices, indptr, {dims[0], dims[1]}, sparse, loc);
}

void SparseShared::set_value(const SparseTensor& value, SetValueOptions options) {
  if (!value.defined()) throw TypeError("SparseShared::set_value: the value is empty (a default-made SparseTensor)");
  if (value.format() != format_ || value.dtype() != data_.dtype())
    throw TypeError(std::string("SparseShared::set_value: the variable holds a ") + sparse_format_name(format_) + " " +
                    dtype_name(data_.dtype()) + " matrix, the value is " + value.str() +
                    "; convert it (to_csr/to_csc, or its data with .to(dtype)) first");
  // The parts are set at one moment (a call sees the old matrix or the new one, whole): the value
  // was checked as a whole when it was made.
  const InternalTensors internal;
  set_values_together({data_, indices_, indptr_, shape_}, sparse_parts(value), options);
}

SparseShared sparse_shared(const SparseTensor& value, const std::string& name, SharedOptions options) {
  if (!value.defined()) throw TypeError("sparse_shared: the value is empty (a default-made SparseTensor)");
  const std::string base = name.empty() ? std::string() : name + ".";
  const std::vector<Tensor> parts = sparse_parts(value);
  return SparseShared(value.format(), shared(parts[0], base + "data", options), shared(parts[1], base + "indices", options),
                      shared(parts[2], base + "indptr", options), shared(parts[3], base + "shape"));
}

Var dense(const SparseVar& x, Loc loc) { return apply1(std::make_shared<SparseReduce>(x.format(), -1), parts(x), loc); }

Var dense_from_sparse(const SparseVar& x, Loc loc) { return dense(x, loc); }

SparseVar csr_from_dense(const Var& x, Loc loc) {
  if (x.ndim() != 2) throw TypeError("csr_from_dense: x must be a matrix, got " + x.type().str() + " (at " + loc_str(loc) + ")");
  const Var flat = flatten(x, 1, loc);
  // The stored entries' positions in row-major order: a stable sort puts them (key false) before
  // the zeros (key true), and they are the first `stored` of its order.
  const Var stored = sum(cast(flat != 0.0, i64, loc), {}, false, loc);
  const Var positions = slice(argsort(flat == 0.0, -1, loc), 0, 0, stored, 1, loc);
  const Var shape = shape_of(x, loc);
  const Var per_row = sum(cast(x != 0.0, i64, loc), {1}, false, loc);
  const Var indptr = concatenate({constant(Tensor::zeros({1}, i64)), cumsum(per_row, 0, loc)}, 0, loc);
  return SparseVar(SparseFormat::csr, take(flat, positions, 0, loc), positions % shape[VarIndex(1, loc)], indptr, shape, loc);
}

SparseVar csc_from_dense(const Var& x, Loc loc) {
  if (x.ndim() != 2) throw TypeError("csc_from_dense: x must be a matrix, got " + x.type().str() + " (at " + loc_str(loc) + ")");
  return transpose(csr_from_dense(transpose(x, loc), loc), loc);
}

Var structured_dot(const SparseVar& x, const Var& dense_matrix, Loc loc) { return dot(x, dense_matrix, loc); }

SparseVar transpose(const SparseVar& x, Loc loc) {
  return SparseVar(transposed(x.format()), x.data(), x.indices(), x.indptr(), reversed_shape(x.shape(), loc), loc);
}

namespace {

// x's pattern with new values, one per stored entry.
SparseVar with_values(const SparseVar& x, const Var& values, Loc loc) {
  if (!values.defined() || values.ndim() != 1 || !is_float(values.dtype()))
    throw TypeError("structured: fn must map the stored values (" + x.data().type().str() +
                    ") elementwise to float values, got " + (values.defined() ? values.type().str() : "nothing") + " (at " +
                    loc_str(loc) + ")");
  return SparseVar(x.format(), values, x.indices(), x.indptr(), x.shape(), loc);
}

}  // namespace

SparseVar structured(const SparseVar& x, const std::function<Var(const Var&)>& fn, Loc loc) {
  // fn sees the value of each stored place: a place stored several times holds the sum of its
  // entries (SciPy sums repeats first), and each of them gets fn(sum) divided by their count, so
  // that together they hold fn(sum).
  auto at_own_places = [&](const Var& per_entry) {
    return apply1(std::make_shared<SparseSample>(x.format()),
                  {per_entry, x.indices(), x.indptr(), x.shape(), x.indices(), x.indptr(), x.shape()}, loc);
  };
  const Var values = fn(at_own_places(x.data()));
  if (!values.defined() || values.ndim() != 1 || !is_float(values.dtype())) return with_values(x, values, loc);
  const Var repeats = at_own_places(cast(ones_like(x.data(), loc), values.dtype(), loc));
  return with_values(x, Operand(values, loc) / Operand(repeats, loc), loc);
}

SparseVar structured(const SparseVar& x, Var (*fn)(const Var&, Loc), Loc loc) {
  return structured(x, [&](const Var& v) { return fn(v, loc); }, loc);
}

SparseVar operator-(const SparseOperand& x) {
  return with_values(x.var, -Operand(x.var.data(), x.loc), x.loc);  // linear: repeats may stay apart
}

SparseVar operator*(const SparseOperand& operand, const Operand& dense_value) {
  const SparseVar& x = operand.var;
  const Var& v = dense_value.var;
  const Loc& loc = operand.loc;
  if (v.ndim() == 0) return with_values(x, Operand(x.data(), loc) * Operand(v, loc), loc);  // linear, as negation
  if (v.ndim() > 2)
    throw TypeError("sparse * value: the value must have at most 2 dimensions to broadcast against " + x.str() + ", got " +
                    v.type().str() + " (at " + loc_str(loc) + ")");
  const Var matrix_value = v.ndim() == 1 ? dimshuffle(v, {-1, 0}, loc) : v;
  const DType dtype = result_dtype({x.data(), v});
  const DType float_dtype = is_float(dtype) ? dtype : DType::f64;
  const Var at_entries = apply1(std::make_shared<SparseGather>(x.format()),
                                {cast(matrix_value, float_dtype, loc), x.indices(), x.indptr(), x.shape()}, loc);
  return SparseVar(x.format(), Operand(cast(x.data(), float_dtype, loc), loc) * Operand(at_entries, loc), x.indices(), x.indptr(), x.shape(), loc);
}

SparseVar operator*(const Operand& dense_value, const SparseOperand& x) { return x * dense_value; }

SparseVar operator*(const SparseOperand& a, const SparseOperand& b) {
  const SparseVar &x = a.var, &y = b.var;
  if (x.format() != y.format())
    throw TypeError("sparse * sparse (" + x.str() + ", " + y.str() + "): the matrices must have one format; to_csr or to_csc converts (at " +
                    loc_str(a.loc) + ")");
  const DType dtype = result_dtype({x.data(), y.data()});
  const Var y_at_x = apply1(std::make_shared<SparseSample>(x.format()),
                            {cast(y.data(), dtype, a.loc), y.indices(), y.indptr(), y.shape(), x.indices(), x.indptr(), x.shape()}, a.loc);
  return SparseVar(x.format(), Operand(cast(x.data(), dtype, a.loc), a.loc) * Operand(y_at_x, a.loc), x.indices(), x.indptr(), x.shape(), a.loc);
}

SparseVar row_scale(const SparseVar& x, const Var& s, Loc loc) {
  if (s.ndim() != 1) throw TypeError("row_scale(" + x.str() + ", " + s.type().str() + "): s must be a vector, one value per row (at " + loc_str(loc) + ")");
  return SparseOperand(x, loc) * Operand(dimshuffle(s, {0, -1}, loc), loc);
}

SparseVar col_scale(const SparseVar& x, const Var& s, Loc loc) {
  if (s.ndim() != 1) throw TypeError("col_scale(" + x.str() + ", " + s.type().str() + "): s must be a vector, one value per column (at " + loc_str(loc) + ")");
  return SparseOperand(x, loc) * Operand(dimshuffle(s, {-1, 0}, loc), loc);
}

Var operator+(const SparseOperand& x, const Operand& dense_value) {
  const SparseVar& s = x.var;
  const Var& d = dense_value.var;
  if (!d.defined() || d.ndim() > 2 || !(is_float(d.dtype()) || d.dtype() == DType::i32 || d.dtype() == DType::i64 || d.dtype() == DType::b8))
    throw TypeError("sparse + dense: " + s.str() + " + " + (d.defined() ? d.type().str() : std::string("nothing")) +
                    ": the dense value must be a number, vector or matrix (at " + loc_str(x.loc) + ")");
  const Var weak_free = d.get()->weak ? cast(d, s.dtype(), x.loc) : d;
  const DType dtype = result_dtype({s.data(), weak_free});
  const DType float_dtype = is_float(dtype) ? dtype : DType::f64;
  return apply1(std::make_shared<SparseAddDense>(s.format()),
                {cast(s.data(), float_dtype, x.loc), s.indices(), s.indptr(), s.shape(), cast(weak_free, float_dtype, x.loc)}, x.loc);
}
Var operator+(const Operand& dense_value, const SparseOperand& x) { return x + dense_value; }
// The negation is built at the user's line too: an error while it runs names that line.
Var operator-(const SparseOperand& x, const Operand& dense_value) { return x + Operand(-Operand(dense_value.var, x.loc), x.loc); }
Var operator-(const Operand& dense_value, const SparseOperand& x) { return SparseOperand(-x, x.loc) + dense_value; }

SparseVar sparse_grad(const Var& cost, const Var& W, Loc loc) {
  const std::string what = "sparse_grad(cost, " + (W.defined() ? W.type().str() : std::string("nothing")) + ") at " + loc_str(loc);
  if (!cost.defined() || !W.defined()) throw GradError(what + ": the cost and the matrix must be defined");
  if (W.ndim() != 2 || !is_float(W.dtype()))
    throw GradError(what + ": the matrix must be a float matrix (an embedding); use grad() for other values");
  // Every use of W on the way to the cost must be a lookup of its rows.
  std::vector<Var> lookups;
  for (Node* n : topological_order({cost})) {
    for (size_t i = 0; i < n->inputs.size(); ++i) {
      if (n->inputs[i].get() != W.get()) continue;
      const auto* take_op = dynamic_cast<const Take*>(n->op.get());
      if (!take_op || take_op->axis() != 0 || i != 0)
        throw GradError(what + ": the matrix is read by " + n->op->name() + " (" + n->origin() +
                        "), not only by row lookups take(W, rows); use grad() for its dense gradient");
      lookups.push_back(n->output(0));
    }
  }
  if (lookups.empty()) throw GradError(what + ": the cost does not depend on the matrix");
  const std::vector<Var> gradients = grad(cost, lookups);
  std::vector<Var> rows, row_gradients;
  for (size_t k = 0; k < lookups.size(); ++k) {
    const Node& lookup = *lookups[k].get()->owner;
    const Var flat_rows = cast(flatten(lookup.inputs[1], 1, loc), DType::i64, loc);
    rows.push_back(flat_rows);
    row_gradients.push_back(reshape(gradients[k], stack({shape_of(flat_rows, loc)[0], shape_of(W, loc)[1]}, 0, loc), 2, loc));
  }
  const Var all_rows = rows.size() == 1 ? rows[0] : concatenate(rows, 0, loc);
  const Var all_gradients = row_gradients.size() == 1 ? row_gradients[0] : concatenate(row_gradients, 0, loc);
  const std::vector<Var> out = apply(std::make_shared<RowLookupGrad>(), {all_rows, cast(all_gradients, W.dtype(), loc), W}, loc);
  return SparseVar(SparseFormat::csr, out[0], out[1], out[2], shape_of(W, loc), loc);
}

Var dot(const SparseVar& x, const Var& dense_matrix, Loc loc) {
  if (dense_matrix.ndim() != 2 || !(is_float(dense_matrix.dtype()) || dense_matrix.dtype() == DType::i32 || dense_matrix.dtype() == DType::i64))
    throw TypeError("dot(" + x.str() + ", " + dense_matrix.type().str() + "): the dense operand must be a numeric matrix; "
                    "for a vector v use reshape(v, {-1, 1}) (at " + loc_str(loc) + ")");
  const DType dtype = result_dtype({x.data(), dense_matrix});
  const DType float_dtype = is_float(dtype) ? dtype : DType::f64;
  return apply1(std::make_shared<SparseDot>(x.format()),
                {cast(x.data(), float_dtype, loc), x.indices(), x.indptr(), x.shape(), cast(dense_matrix, float_dtype, loc)}, loc);
}

SparseVar dot(const SparseVar& a, const SparseVar& b, Loc loc) {
  if (a.format() != b.format())
    throw TypeError("dot(" + a.str() + ", " + b.str() + "): both matrices must have one format; to_csr or to_csc converts (at " +
                    loc_str(loc) + ")");
  const DType dtype = result_dtype({a.data(), b.data()});
  const std::vector<Var> out = apply(std::make_shared<SparseProduct>(a.format()),
                                     {cast(a.data(), dtype, loc), a.indices(), a.indptr(), a.shape(), cast(b.data(), dtype, loc),
                                      b.indices(), b.indptr(), b.shape()},
                                     loc);
  return SparseVar(a.format(), out[0], out[1], out[2], stack({a.shape()[0], b.shape()[1]}, 0, loc), loc);
}

Var dot(const Var& dense_matrix, const SparseVar& x, Loc loc) {
  return transpose(dot(transpose(x, loc), transpose(dense_matrix, loc), loc), loc);
}

SparseVar sampling_dot(const Var& a, const Var& b, const SparseVar& p, Loc loc) {
  const DType dtype = result_dtype({a, b, p.data()});
  if (!is_float(dtype) || a.ndim() != 2 || b.ndim() != 2)
    throw TypeError("sampling_dot: a and b must be float matrices, got " + a.type().str() + " and " + b.type().str() + " (at " +
                    loc_str(loc) + ")");
  const Var sampled = apply1(std::make_shared<SamplingDot>(p.format()), {cast(a, dtype, loc), cast(b, dtype, loc), p.indices(), p.indptr()}, loc);
  return SparseVar(p.format(), cast(p.data(), dtype, loc) * sampled, p.indices(), p.indptr(), p.shape(), loc);
}

namespace {

SparseVar major_slice(const SparseVar& x, const Var& start, const Var& stop, bool single, const Loc& loc) {
  const std::vector<Var> parts_of_slice =
      apply(std::make_shared<SparseMajorSlice>(single), {x.data(), x.indices(), x.indptr(), start, stop}, loc);
  const Var count = shape_of(parts_of_slice[2], loc)[0] - 1;
  const Var shape = x.format() == SparseFormat::csr ? stack({count, x.shape()[1]}, 0, loc) : stack({x.shape()[0], count}, 0, loc);
  return SparseVar(x.format(), parts_of_slice[0], parts_of_slice[1], parts_of_slice[2], shape, loc);
}

}  // namespace

SparseVar rows(const SparseVar& x, const Var& start, const Var& stop, Loc loc) {
  if (x.format() != SparseFormat::csr)
    throw TypeError("rows(" + x.str() + "): slicing rows needs a CSR matrix (a CSC matrix slices its columns: columns(x, ...)) (at " +
                    loc_str(loc) + ")");
  return major_slice(x, start, stop, false, loc);
}

SparseVar columns(const SparseVar& x, const Var& start, const Var& stop, Loc loc) {
  if (x.format() != SparseFormat::csc)
    throw TypeError("columns(" + x.str() + "): slicing columns needs a CSC matrix (a CSR matrix slices its rows: rows(x, ...)) (at " +
                    loc_str(loc) + ")");
  return major_slice(x, start, stop, false, loc);
}

SparseVar row(const SparseVar& x, const Var& r, Loc loc) {
  if (r.ndim() != 0) throw TypeError("row(" + x.str() + ", " + r.type().str() + "): the row must be a 0-d integer (at " + loc_str(loc) + ")");
  if (x.format() != SparseFormat::csr)
    throw TypeError("row(" + x.str() + "): taking a row needs a CSR matrix (at " + loc_str(loc) + ")");
  return major_slice(x, r, r, true, loc);
}

namespace {

SparseVar joined(const SparseVar& a, const SparseVar& b, SparseJoin::How how, const char* what, const Loc& loc) {
  if (a.format() != b.format())
    throw TypeError(std::string(what) + "(" + a.str() + ", " + b.str() + "): the matrices must have one format; "
                    "transpose(x) turns CSR into CSC of the transposed matrix (at " + loc_str(loc) + ")");
  const DType dtype = result_dtype({a.data(), b.data()});
  const std::vector<Var> out = apply(std::make_shared<SparseJoin>(a.format(), how),
                                     {cast(a.data(), dtype, loc), a.indices(), a.indptr(), a.shape(), cast(b.data(), dtype, loc),
                                      b.indices(), b.indptr(), b.shape()},
                                     loc);
  return SparseVar(a.format(), out[0], out[1], out[2], out[3], loc);
}

}  // namespace

SparseVar operator+(const SparseOperand& a, const SparseOperand& b) {
  return joined(a.var, b.var, SparseJoin::How::add, "sparse + sparse", a.loc);
}
SparseVar operator-(const SparseOperand& a, const SparseOperand& b) {
  return joined(a.var, -SparseOperand(b.var, a.loc), SparseJoin::How::add, "sparse - sparse", a.loc);
}

SparseVar vstack(const std::vector<SparseVar>& xs, Loc loc) {
  if (xs.empty()) throw TypeError("vstack: needs at least one sparse matrix (at " + loc_str(loc) + ")");
  SparseVar out = xs[0];
  for (size_t i = 1; i < xs.size(); ++i) out = joined(out, xs[i], SparseJoin::How::stack_rows, "vstack", loc);
  return out;
}

SparseVar hstack(const std::vector<SparseVar>& xs, Loc loc) {
  if (xs.empty()) throw TypeError("hstack: needs at least one sparse matrix (at " + loc_str(loc) + ")");
  SparseVar out = xs[0];
  for (size_t i = 1; i < xs.size(); ++i) out = joined(out, xs[i], SparseJoin::How::stack_columns, "hstack", loc);
  return out;
}

SparseVar to_csr(const SparseVar& x, Loc loc) {
  if (x.format() == SparseFormat::csr) return x;
  const std::vector<Var> pattern = apply(std::make_shared<SparseConvert>(x.format()), {x.indices(), x.indptr(), x.shape()}, loc);
  return SparseVar(SparseFormat::csr, take(x.data(), pattern[2], 0, loc), pattern[0], pattern[1], x.shape(), loc);
}

SparseVar to_csc(const SparseVar& x, Loc loc) {
  if (x.format() == SparseFormat::csc) return x;
  const std::vector<Var> pattern = apply(std::make_shared<SparseConvert>(x.format()), {x.indices(), x.indptr(), x.shape()}, loc);
  return SparseVar(SparseFormat::csc, take(x.data(), pattern[2], 0, loc), pattern[0], pattern[1], x.shape(), loc);
}

Var sum(const SparseVar& x, Loc loc) { return sum(x.data(), {}, false, loc); }

Var sum(const SparseVar& x, int64_t axis, Loc loc) {
  const int64_t a = axis < 0 ? axis + 2 : axis;
  if (a != 0 && a != 1)
    throw TypeError("sum(" + x.str() + ", axis=" + std::to_string(axis) + "): a sparse matrix has axes 0 and 1 (at " + loc_str(loc) + ")");
  return apply1(std::make_shared<SparseReduce>(x.format(), a), parts(x), loc);
}

Var regular_grad(const Var& cost, const SparseVar& x, Loc loc) {
  if (!cost.defined() || !x.defined()) throw GradError("regular_grad: the cost and the sparse matrix must be defined (at " + loc_str(loc) + ")");
  // The cost rebuilt on a matrix that stores every entry, whose data are the elements of a dense
  // stand-in P (a fresh variable, so that the rebuilt cost does not read x); its gradient with
  // respect to P, evaluated at P = dense(x).
  const Var P = tensor(x.dtype(), {false, false}, "regular_grad.dense");
  const std::vector<Var> full = apply(std::make_shared<FullPattern>(x.format()), {x.shape()}, loc);
  const Var full_data = x.format() == SparseFormat::csr ? flatten(P, 1, loc) : flatten(transpose(P, loc), 1, loc);
  const FunctionGraph rebuilt({}, {cost}, {{x.data(), full_data}, {x.indices(), full[0]}, {x.indptr(), full[1]}});
  const Var g = grad(rebuilt.outputs()[0], P);
  const FunctionGraph at_x({}, {g}, {{P, dense(x, loc)}});
  return at_x.outputs()[0];
}

SparseVar structured_grad(const Var& cost, const SparseVar& x, Loc loc) {
  return SparseVar(x.format(), grad(cost, x.data()), x.indices(), x.indptr(), x.shape(), loc);
}

}  // namespace kiln

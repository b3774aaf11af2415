#pragma once
#include <string>
#include <vector>

#include "kiln/tensor.hpp"

namespace kiln {

// Compressed sparse rows (each row's stored entries together) or columns.
enum class SparseFormat { csr, csc };
const char* sparse_format_name(SparseFormat format);  // "csr", "csc"

// A sparse matrix value, SciPy's layout (docs/sparse.md): for CSR, row r stores data[k] at
// column indices[k] for k in [indptr[r], indptr[r + 1]); CSC the same with rows and columns
// swapped. Indices need not be sorted within a row, a stored entry may be an explicit zero, and an
// entry stored twice counts as the sum of both (as SciPy's). The three tensors are owned copies:
// data is 1-D of any dtype, indices and indptr are i64. Building checks every index: a bad one is
// a ShapeError naming the array, the position and the value.
// borrow: the matrix keeps the parts given, without copying them, when they are already what it
// would hold (contiguous; indices and indptr i64), as a shared variable's borrow does; a change
// of one of them is then a change of the matrix (and must keep it valid). Otherwise they are copied.
struct SparseOptions { bool borrow = false; };

class SparseTensor {
 public:
  SparseTensor() = default;
  static SparseTensor csr(const Tensor& data, const Tensor& indices, const Tensor& indptr, Shape shape,
                          Loc loc = Loc::current());
  static SparseTensor csc(const Tensor& data, const Tensor& indices, const Tensor& indptr, Shape shape,
                          Loc loc = Loc::current());
  static SparseTensor csr(const Tensor& data, const Tensor& indices, const Tensor& indptr, Shape shape,
                          SparseOptions options, Loc loc = Loc::current());
  static SparseTensor csc(const Tensor& data, const Tensor& indices, const Tensor& indptr, Shape shape,
                          SparseOptions options, Loc loc = Loc::current());

  bool defined() const { return data_.defined(); }
  SparseFormat format() const { return format_; }
  const Shape& shape() const { return shape_; }
  DType dtype() const { return data_.dtype(); }
  int64_t nnz() const { return data_.numel(); }  // stored entries, explicit zeros and repeats included
  const Tensor& data() const { return data_; }
  const Tensor& indices() const { return indices_; }
  const Tensor& indptr() const { return indptr_; }
  bool has_sorted_indices() const { return sorted_; }  // increasing within each row (column): no repeats
  std::string str() const;  // "csr f32(3,4) nnz=5"

  Tensor to_dense(Loc loc = Loc::current()) const;
  SparseTensor to_csr() const;  // this, when it is CSR already
  SparseTensor to_csc() const;
  // The same matrix with each row's (column's) entries in increasing index, repeats summed.
  SparseTensor sorted() const;
  SparseTensor without_zeros() const;  // the explicit zeros dropped

 private:
  static SparseTensor make(SparseFormat format, const Tensor& data, const Tensor& indices, const Tensor& indptr,
                           Shape shape, SparseOptions options, const Loc& loc);
  SparseFormat format_ = SparseFormat::csr;
  Shape shape_;
  Tensor data_, indices_, indptr_;
  bool sorted_ = false;
};

// The four tensors a sparse function input takes, in order: data, indices, indptr and the shape
// as an i64 vector of 2 (for Function::call's list of tensors; f(x, ...) splits x itself).
std::vector<Tensor> sparse_parts(const SparseTensor& x);

// The stored entries of t are its nonzeros, each row's (column's) in increasing order.
SparseTensor sparse_from_dense(const Tensor& t, SparseFormat format, Loc loc = Loc::current());

}  // namespace kiln

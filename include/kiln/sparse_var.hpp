#pragma once
#include <functional>
#include <string>
#include <vector>

#include "kiln/graph.hpp"
#include "kiln/ops.hpp"
#include "kiln/sparse.hpp"

namespace kiln {

// A sparse matrix in a graph (docs/sparse.md): its four parts are ordinary variables, as a
// SparseTensor's are tensors: data (1-D, float), indices and indptr (1-D i64, SciPy's layout for
// the format) and shape (i64 vector of 2). Operations on it build ops that read the parts, so a
// sparse value's buffers are planned, merged and folded like any other; its gradient with respect
// to data is the structured one (only at the stored entries).
class SparseVar {
 public:
  SparseVar() = default;
  // From parts (Theano's CSM): types checked here, values (monotonic indptr, indices in range)
  // by every op that reads them, each call.
  SparseVar(SparseFormat format, Var data, Var indices, Var indptr, Var shape, Loc loc = Loc::current());

  SparseFormat format() const { return format_; }
  const Var& data() const { return data_; }
  const Var& indices() const { return indices_; }
  const Var& indptr() const { return indptr_; }
  const Var& shape() const { return shape_; }
  DType dtype() const { return data_.dtype(); }
  bool defined() const { return data_.defined(); }
  std::string str() const;  // "csr f32 matrix X"

 private:
  SparseFormat format_ = SparseFormat::csr;
  Var data_, indices_, indptr_, shape_;
};

// A sparse matrix input: parts named name.data, name.indices, name.indptr, name.shape. As a
// function input (In(x)) it takes a SparseTensor of its format and dtype.
SparseVar csr_matrix(const std::string& name = "", DType dtype = DType::f32);
SparseVar csc_matrix(const std::string& name = "", DType dtype = DType::f32);
SparseVar sparse_constant(const SparseTensor& value, const std::string& name = "");

// A sparse shared variable: its four parts are shared variables (Shared's borrow rules hold for
// each), used in graphs as var(). Updates name the parts: {x.data(), x.data() - rate * g.data()}
// keeps the pattern (a structured step); replacing the pattern means set_value.
class SparseShared {
 public:
  SparseShared() = default;
  SparseShared(SparseFormat format, Shared data, Shared indices, Shared indptr, Shared shape);
  SparseVar var() const;
  operator SparseVar() const { return var(); }  // NOLINT: usable wherever a SparseVar is
  SparseFormat format() const { return format_; }
  const Shared& data() const { return data_; }
  const Shared& indices() const { return indices_; }
  const Shared& indptr() const { return indptr_; }
  const Shared& shape() const { return shape_; }
  // The value, checked; with borrow, its parts are the variables' own buffers (no copy).
  SparseTensor get_value(GetValueOptions options = {}, Loc loc = Loc::current()) const;
  // A new value of the same format and dtype; its pattern and shape may differ.
  void set_value(const SparseTensor& value, SetValueOptions options = {});

 private:
  SparseFormat format_ = SparseFormat::csr;
  Shared data_, indices_, indptr_, shape_;
};
SparseShared sparse_shared(const SparseTensor& value, const std::string& name = "", SharedOptions options = {});

// A sparse operand of +, - and *, with the line that wrote the expression (as Operand for dense
// values).
struct SparseOperand {
  SparseOperand(const SparseVar& x, Loc loc = Loc::current()) : var(x), loc(loc) {}  // NOLINT
  SparseOperand(const SparseShared& x, Loc loc = Loc::current()) : var(x.var()), loc(loc) {}  // NOLINT
  SparseVar var;
  Loc loc;
};
// -x; a + b and a - b of two sparse matrices of one format: sparse, each segment storing a's
// entries then b's (repeats count as their sum).
SparseVar operator-(const SparseOperand& x);
SparseVar operator+(const SparseOperand& a, const SparseOperand& b);
SparseVar operator-(const SparseOperand& a, const SparseOperand& b);
// x times a dense value, elementwise with NumPy broadcasting (a scalar, a vector of x's columns, a
// column of its rows, or a matrix of its shape): only the stored entries are computed, and the
// result keeps x's pattern.
SparseVar operator*(const SparseOperand& x, const Operand& dense_value);
SparseVar operator*(const Operand& dense_value, const SparseOperand& x);
// The elementwise product of two sparse matrices of one format and shape: a's pattern, each entry
// times b's value there (0 where b stores nothing).
SparseVar operator*(const SparseOperand& a, const SparseOperand& b);
// x + a dense value (a number, a vector of x's columns or a matrix broadcast to x's shape):
// dense, as NumPy's sum of a sparse and a dense matrix. Where the dense value is a matrix of x's
// shape that is not needed afterwards (W <- W - rate * g for a sparse g), the sum is written over
// it and only x's stored entries are touched.
Var operator+(const SparseOperand& x, const Operand& dense_value);
Var operator+(const Operand& dense_value, const SparseOperand& x);
Var operator-(const SparseOperand& x, const Operand& dense_value);
Var operator-(const Operand& dense_value, const SparseOperand& x);

// The dense matrix (repeated entries summed); dense_from_sparse is Theano's name for it.
Var dense(const SparseVar& x, Loc loc = Loc::current());
Var dense_from_sparse(const SparseVar& x, Loc loc = Loc::current());
// A dense matrix as a sparse one storing its nonzero entries (NaN included), in row-major order
// for CSR, column-major for CSC; how many there are is found when the function runs. The gradient
// with respect to x is the data's gradient at the stored entries, zero elsewhere.
SparseVar csr_from_dense(const Var& x, Loc loc = Loc::current());
SparseVar csc_from_dense(const Var& x, Loc loc = Loc::current());
// The transpose: CSR becomes CSC of the same parts, and back; nothing moves.
SparseVar transpose(const SparseVar& x, Loc loc = Loc::current());
// The same matrix in the other format (x itself when it has that one already); the result's
// indices are sorted. The gradient flows back to x's data.
SparseVar to_csr(const SparseVar& x, Loc loc = Loc::current());
SparseVar to_csc(const SparseVar& x, Loc loc = Loc::current());
// fn applied to the stored entries only (Theano's structured functions: structured(x, sigmoid));
// fn must be elementwise. The pattern is kept: fn(0) is not added where nothing is stored.
SparseVar structured(const SparseVar& x, const std::function<Var(const Var&)>& fn, Loc loc = Loc::current());
// The same with one of kiln's unary functions by name: structured(x, exp).
SparseVar structured(const SparseVar& x, Var (*fn)(const Var&, Loc), Loc loc = Loc::current());
// Row r multiplied by s[r]; column c by s[c] (Theano's row_scale, col_scale).
SparseVar row_scale(const SparseVar& x, const Var& s, Loc loc = Loc::current());
SparseVar col_scale(const SparseVar& x, const Var& s, Loc loc = Loc::current());

// Products with a dense matrix. CSR runs row-parallel; CSC (and dense x CSR) through the transposed
// form. The gradient with respect to x.data() is structured (SciPy/Theano structured_dot): the
// product's gradient sampled at x's stored entries.
Var dot(const SparseVar& x, const Var& dense_matrix, Loc loc = Loc::current());
// Theano's name for dot(x, dense_matrix).
Var structured_dot(const SparseVar& x, const Var& dense_matrix, Loc loc = Loc::current());
Var dot(const Var& dense_matrix, const SparseVar& x, Loc loc = Loc::current());
// The product of two sparse matrices of one format: sparse, of that format, its indices sorted in
// each row (column). Its size depends on the patterns and is found when it runs. The gradients
// with respect to both sides' data are structured.
SparseVar dot(const SparseVar& a, const SparseVar& b, Loc loc = Loc::current());
// p * (a . b^T) computed only at p's stored entries (a: m x k, b: n x k, p: m x n).
SparseVar sampling_dot(const Var& a, const Var& b, const SparseVar& p, Loc loc = Loc::current());

// Stacks of sparse matrices of one format: vstack puts the matrices' rows one after another,
// hstack their columns (as SciPy's).
SparseVar vstack(const std::vector<SparseVar>& xs, Loc loc = Loc::current());
SparseVar hstack(const std::vector<SparseVar>& xs, Loc loc = Loc::current());

// Rows [start, stop) of a CSR matrix, columns [start, stop) of a CSC one, bounds clamped and
// counted from the end when negative as in NumPy; row(x, r): the 1 x cols matrix of row r. The
// gradient with respect to x.data() is zero outside the slice.
SparseVar rows(const SparseVar& x, const Var& start, const Var& stop, Loc loc = Loc::current());
SparseVar columns(const SparseVar& x, const Var& start, const Var& stop, Loc loc = Loc::current());
SparseVar row(const SparseVar& x, const Var& r, Loc loc = Loc::current());

// Sums: of every entry, or over axis 0 (a vector of the column sums) or 1 (the row sums).
Var sum(const SparseVar& x, Loc loc = Loc::current());
Var sum(const SparseVar& x, int64_t axis, Loc loc = Loc::current());

// The gradient of cost with respect to x's stored entries, with x's pattern (structured).
SparseVar structured_grad(const Var& cost, const SparseVar& x, Loc loc = Loc::current());
// The regular gradient (Theano's name): d cost / d X for the dense matrix X that x stands for,
// every entry counted, stored or not (a dense matrix of x's shape). The cost is read as a function
// of the whole matrix: its ops on x compute on every entry then, so a structured function of x
// (structured(x, exp)) counts fn(0) where x stores nothing.
Var regular_grad(const Var& cost, const SparseVar& x, Loc loc = Loc::current());
// The gradient of cost with respect to a dense float matrix W that cost reads only through row
// lookups take(W, rows) (an embedding), as a CSR matrix of W's shape that stores only the rows
// looked up (Theano's sparse_grad): a row looked up twice is stored twice, and repeats sum. An
// update {W, W - rate * g} then touches only those rows, written over W's own buffer. GradError
// when W is read any other way (grad() gives the dense gradient then).
SparseVar sparse_grad(const Var& cost, const Var& W, Loc loc = Loc::current());

}  // namespace kiln

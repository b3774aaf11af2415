#include "kiln/sparse.hpp"

#include <algorithm>
#include <numeric>
#include <vector>

#include "tensor/dispatch.hpp"
#include "tensor/tensor_book.hpp"

namespace kiln {
namespace {

// One stored entry while a matrix is rebuilt: its major and minor index and where its value is.
struct Entry {
  int64_t major, minor, source;
};

// The compressed form of entries sorted by major index, with values taken from data; an entry
// whose merge flag is set is added to the one before it.
SparseTensor compress(SparseFormat format, const std::vector<Entry>& entries, const Tensor& data, int64_t majors,
                      Shape shape, const std::vector<uint8_t>* merge = nullptr);

int64_t majors_of(SparseFormat format, const Shape& shape) { return format == SparseFormat::csr ? shape[0] : shape[1]; }
int64_t minors_of(SparseFormat format, const Shape& shape) { return format == SparseFormat::csr ? shape[1] : shape[0]; }

std::vector<int64_t> integers(const Tensor& t) { return t.to_vector<int64_t>(); }

std::vector<Entry> entries_of(const SparseTensor& s) {
  const std::vector<int64_t> indptr = integers(s.indptr()), indices = integers(s.indices());
  std::vector<Entry> entries;
  entries.reserve(indices.size());
  for (size_t m = 0; m + 1 < indptr.size(); ++m)
    for (int64_t k = indptr[m]; k < indptr[m + 1]; ++k)
      entries.push_back({static_cast<int64_t>(m), indices[static_cast<size_t>(k)], k});
  return entries;
}

// data[entries[i].source] for each entry, in order; where merge[i] is set, entry i is added to the
// one before it instead.
Tensor gather_values(const Tensor& data, const std::vector<Entry>& entries, const std::vector<uint8_t>* merge) {
  const InternalTensors internal;
  int64_t kept = 0;
  for (size_t i = 0; i < entries.size(); ++i) kept += !(merge && (*merge)[i]);
  Tensor out = Tensor::zeros({kept}, data.dtype());
  dispatch_dtype(data.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* in = data.data<T>();
    T* o = out.data<T>();
    int64_t at = -1;
    for (size_t i = 0; i < entries.size(); ++i) {
      const T v = in[entries[i].source];
      if (merge && (*merge)[i]) o[at] = static_cast<T>(o[at] + v);
      else o[++at] = v;
    }
  });
  return out;
}

SparseTensor compress(SparseFormat format, const std::vector<Entry>& entries, const Tensor& data, int64_t majors,
                      Shape shape, const std::vector<uint8_t>* merge) {
  const InternalTensors internal;
  std::vector<int64_t> indptr(static_cast<size_t>(majors) + 1, 0), indices;
  indices.reserve(entries.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    if (merge && (*merge)[i]) continue;
    ++indptr[static_cast<size_t>(entries[i].major) + 1];
    indices.push_back(entries[i].minor);
  }
  std::partial_sum(indptr.begin(), indptr.end(), indptr.begin());
  const Tensor values = gather_values(data, entries, merge);
  const Tensor index_tensor = Tensor::from(indices), pointer_tensor = Tensor::from(indptr);
  return format == SparseFormat::csr ? SparseTensor::csr(values, index_tensor, pointer_tensor, std::move(shape))
                                     : SparseTensor::csc(values, index_tensor, pointer_tensor, std::move(shape));
}

}  // namespace

const char* sparse_format_name(SparseFormat format) { return format == SparseFormat::csr ? "csr" : "csc"; }

SparseTensor SparseTensor::csr(const Tensor& data, const Tensor& indices, const Tensor& indptr, Shape shape, Loc loc) {
  return make(SparseFormat::csr, data, indices, indptr, std::move(shape), {}, loc);
}

SparseTensor SparseTensor::csc(const Tensor& data, const Tensor& indices, const Tensor& indptr, Shape shape, Loc loc) {
  return make(SparseFormat::csc, data, indices, indptr, std::move(shape), {}, loc);
}

SparseTensor SparseTensor::csr(const Tensor& data, const Tensor& indices, const Tensor& indptr, Shape shape,
                               SparseOptions options, Loc loc) {
  return make(SparseFormat::csr, data, indices, indptr, std::move(shape), options, loc);
}

SparseTensor SparseTensor::csc(const Tensor& data, const Tensor& indices, const Tensor& indptr, Shape shape,
                               SparseOptions options, Loc loc) {
  return make(SparseFormat::csc, data, indices, indptr, std::move(shape), options, loc);
}

SparseTensor SparseTensor::make(SparseFormat format, const Tensor& data, const Tensor& indices, const Tensor& indptr,
                                Shape shape, SparseOptions options, const Loc& loc) {
  const std::string op = std::string("SparseTensor::") + sparse_format_name(format);
  const std::string at = " (at " + loc_str(loc) + ")";
  if (shape.size() != 2 || shape[0] < 0 || shape[1] < 0)
    throw ShapeError(op + ": a sparse matrix has two dimensions of at least 0, got shape " + shape_str(shape) + at);
  for (const auto& [name, t] : {std::pair<const char*, const Tensor*>{"data", &data}, {"indices", &indices}, {"indptr", &indptr}})
    if (t->ndim() != 1) throw ShapeError(op + ": " + name + " must be 1-D, got " + t->str() + at);
  for (const auto& [name, t] : {std::pair<const char*, const Tensor*>{"indices", &indices}, {"indptr", &indptr}})
    if (t->dtype() != DType::i32 && t->dtype() != DType::i64)
      throw TypeError(op + ": " + name + " must be i32 or i64, got " + t->str() + at);
  const int64_t majors = majors_of(format, shape), minors = minors_of(format, shape), nnz = data.numel();
  const char* major_name = format == SparseFormat::csr ? "row" : "column";
  if (indptr.numel() - 1 != majors)
    throw ShapeError(op + ": indptr needs one entry per " + major_name + " and one more (" + std::to_string(majors + 1) +
                     " for shape " + shape_str(shape) + "), got " + std::to_string(indptr.numel()) + at);
  if (indices.numel() != nnz)
    throw ShapeError(op + ": data and indices must have one entry per stored value, got " + data.str() + " and " +
                     indices.str() + at);
  const std::vector<int64_t> pointers = integers(indptr), minor_indices = integers(indices);
  if (pointers[0] != 0) throw ShapeError(op + ": indptr[0] must be 0, got " + std::to_string(pointers[0]) + at);
  for (int64_t m = 0; m < majors; ++m)
    if (pointers[static_cast<size_t>(m) + 1] < pointers[static_cast<size_t>(m)])
      throw ShapeError(op + ": indptr must not decrease, but indptr[" + std::to_string(m + 1) + "] = " +
                       std::to_string(pointers[static_cast<size_t>(m) + 1]) + " < indptr[" + std::to_string(m) +
                       "] = " + std::to_string(pointers[static_cast<size_t>(m)]) + at);
  if (pointers.back() != nnz)
    throw ShapeError(op + ": indptr must end at the number of stored values, " + std::to_string(nnz) + ", got " +
                     std::to_string(pointers.back()) + at);
  bool sorted = true;
  for (int64_t m = 0; m < majors; ++m)
    for (int64_t k = pointers[static_cast<size_t>(m)]; k < pointers[static_cast<size_t>(m) + 1]; ++k) {
      const int64_t i = minor_indices[static_cast<size_t>(k)];
      if (i < 0 || i >= minors)
        throw ShapeError(op + ": indices[" + std::to_string(k) + "] = " + std::to_string(i) + " is out of range for " +
                         std::to_string(minors) + (format == SparseFormat::csr ? " columns" : " rows") + at);
      if (k > pointers[static_cast<size_t>(m)] && i <= minor_indices[static_cast<size_t>(k) - 1]) sorted = false;
    }
  const InternalTensors internal;  // the parts are the sparse value's own
  SparseTensor s;
  s.format_ = format;
  s.shape_ = std::move(shape);
  auto kept_as_given = [&](const Tensor& t, bool index) {
    return options.borrow && t.is_contiguous() && (!index || t.dtype() == DType::i64);
  };
  s.data_ = kept_as_given(data, false) ? data.alias() : data.clone();
  s.indices_ = kept_as_given(indices, true) ? indices.alias() : Tensor::from(minor_indices);
  s.indptr_ = kept_as_given(indptr, true) ? indptr.alias() : Tensor::from(pointers);
  s.sorted_ = sorted;
  return s;
}

std::string SparseTensor::str() const {
  if (!defined()) return "<empty sparse tensor>";
  return std::string(sparse_format_name(format_)) + " " + dtype_name(dtype()) + shape_str(shape_) +
         " nnz=" + std::to_string(nnz());
}

Tensor SparseTensor::to_dense(Loc loc) const {
  Tensor dense = Tensor::zeros(shape_, dtype(), loc);
  const std::vector<Entry> entries = entries_of(*this);
  const int64_t columns = shape_[1];
  dispatch_dtype(dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* values = data_.data<T>();
    T* out = dense.data<T>();
    for (const Entry& e : entries) {
      const int64_t row = format_ == SparseFormat::csr ? e.major : e.minor;
      const int64_t column = format_ == SparseFormat::csr ? e.minor : e.major;
      out[row * columns + column] = static_cast<T>(out[row * columns + column] + values[e.source]);
    }
  });
  return dense;
}

namespace {
// s in the other format: its entries counted out by their new major index, in order, so that each
// new row (column) lists its entries by increasing old major index.
SparseTensor in_other_format(const SparseTensor& s) {
  std::vector<Entry> entries = entries_of(s);
  for (Entry& e : entries) std::swap(e.major, e.minor);
  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.major < b.major; });
  const SparseFormat other = s.format() == SparseFormat::csr ? SparseFormat::csc : SparseFormat::csr;
  return compress(other, entries, s.data(), majors_of(other, s.shape()), s.shape());
}
}  // namespace

SparseTensor SparseTensor::to_csr() const { return format_ == SparseFormat::csr ? *this : in_other_format(*this); }
SparseTensor SparseTensor::to_csc() const { return format_ == SparseFormat::csc ? *this : in_other_format(*this); }

SparseTensor SparseTensor::sorted() const {
  std::vector<Entry> entries = entries_of(*this);
  std::stable_sort(entries.begin(), entries.end(),
                   [](const Entry& a, const Entry& b) { return a.major != b.major ? a.major < b.major : a.minor < b.minor; });
  std::vector<uint8_t> repeat(entries.size(), 0);
  for (size_t i = 1; i < entries.size(); ++i)
    repeat[i] = entries[i].major == entries[i - 1].major && entries[i].minor == entries[i - 1].minor;
  return compress(format_, entries, data_, majors_of(format_, shape_), shape_, &repeat);
}

SparseTensor SparseTensor::without_zeros() const {
  std::vector<Entry> entries = entries_of(*this), kept;
  dispatch_dtype(dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* values = data_.data<T>();
    for (const Entry& e : entries)
      if (values[e.source] != T{}) kept.push_back(e);
  });
  return compress(format_, kept, data_, majors_of(format_, shape_), shape_);
}

std::vector<Tensor> sparse_parts(const SparseTensor& x) {
  if (!x.defined()) throw TypeError("sparse_parts: the sparse matrix is empty (a default-made SparseTensor)");
  return {x.data(), x.indices(), x.indptr(), Tensor::from(std::vector<int64_t>{x.shape()[0], x.shape()[1]})};
}

SparseTensor sparse_from_dense(const Tensor& t, SparseFormat format, Loc loc) {
  if (t.ndim() != 2)
    throw ShapeError(std::string("sparse_from_dense: needs a matrix, got ") + t.str() + " (at " + loc_str(loc) + ")");
  const InternalTensors internal;
  const Tensor dense = t.contiguous();
  const int64_t rows = t.shape()[0], columns = t.shape()[1];
  std::vector<Entry> entries;
  dispatch_dtype(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* values = dense.data<T>();
    const int64_t majors = format == SparseFormat::csr ? rows : columns, minors = format == SparseFormat::csr ? columns : rows;
    for (int64_t m = 0; m < majors; ++m)
      for (int64_t i = 0; i < minors; ++i) {
        const int64_t flat = format == SparseFormat::csr ? m * columns + i : i * columns + m;
        if (values[flat] != T{}) entries.push_back({m, i, flat});
      }
  });
  return compress(format, entries, dense.reshape({rows * columns}), format == SparseFormat::csr ? rows : columns, t.shape());
}

}  // namespace kiln

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <ostream>
#include <sstream>

#include "kiln/tensor.hpp"
#include "tensor/copy.hpp"
#include "tensor/handles.hpp"
#include "tensor/small_vector.hpp"
#include "tensor/dispatch.hpp"
#include "tensor/nd_loop.hpp"
#include "tensor/tensor_book.hpp"

namespace kiln {

void Tensor::throw_unusable() const {
  if (!impl_) throw Error("Tensor: this tensor is empty (default-constructed); create it with Tensor::zeros, from or wrap");
  throw DisposedError(TensorBook::disposed_message(*impl_));
}

void Tensor::check_dtype(DType expected) const {
  if (dtype() != expected)
    throw TypeError(std::string("Tensor::data<T>: the tensor ") + str() + " holds " + dtype_name(dtype()) +
                    ", but T is " + dtype_name(expected) + "; convert with to(dtype) or to_vector<T>()");
}

namespace {
// A view must name elements of its storage only: ranks agree, sizes are non-negative and their
// product fits, and every element it can reach lies inside the storage's bytes.
void check_view(const Storage* storage, DType dtype, const Shape& shape, const Shape& strides, int64_t offset) {
  auto fail = [&](const std::string& why) {
    throw ShapeError("Tensor view " + std::string(dtype_name(dtype)) + shape_str(shape) + " with strides " +
                     shape_str(strides) + " at offset " + std::to_string(offset) + ": " + why);
  };
  if (shape.size() != strides.size())
    fail("has " + std::to_string(shape.size()) + " dimensions but " + std::to_string(strides.size()) + " strides");
  const int64_t n = shape_numel(shape);
  if (offset < 0) fail("the offset is negative");
  if (n == 0 || !storage) return;
  int64_t lo = offset, hi = offset;
  for (size_t d = 0; d < shape.size(); ++d) {
    int64_t span = 0;
    if (__builtin_mul_overflow(shape[d] - 1, strides[d], &span) || __builtin_add_overflow(span < 0 ? lo : hi, span, span < 0 ? &lo : &hi))
      fail("its extent overflows");
  }
  const int64_t es = static_cast<int64_t>(dtype_size(dtype));
  int64_t end = 0, count = 0;
  if (lo < 0 || __builtin_add_overflow(hi, 1, &count) || __builtin_mul_overflow(count, es, &end) ||
      end > static_cast<int64_t>(storage->nbytes()))
    fail("reaches elements " + std::to_string(lo) + " to " + std::to_string(hi) + ", outside its storage of " +
         std::to_string(storage->nbytes() / static_cast<size_t>(es)) + " elements");
}
}  // namespace

Tensor Tensor::view_of(std::shared_ptr<Storage> storage, DType dtype, Shape shape, Shape strides, int64_t offset,
                       Loc loc) {
  if (!storage) throw Error("Tensor::view_of: the storage is null; allocate one with Storage::allocate (at " + loc_str(loc) + ")");
  return TensorHandles::make(std::move(storage), dtype, shape, strides, offset, loc);
}

Tensor TensorHandles::make(std::shared_ptr<Storage> storage, DType dtype, std::span<const int64_t> shape,
                           std::span<const int64_t> strides, int64_t offset, Loc loc) {
  Tensor t;
  t.impl_ = fresh();
  Tensor::Impl& m = *t.impl_;
  m.shape.assign(shape.begin(), shape.end());
  m.strides.assign(strides.begin(), strides.end());
  check_view(storage.get(), dtype, m.shape, m.strides, offset);
  m.storage = std::move(storage);
  m.dtype = dtype;
  m.offset = offset;
  TensorBook::made(t.impl_, loc);
  return t;
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Loc loc) {
  const int64_t bytes = shape_nbytes(shape, dtype);
  std::shared_ptr<Storage> storage;
  try {
    storage = Storage::allocate(static_cast<size_t>(bytes));
  } catch (const MemoryError& e) {
    throw MemoryError(std::string(e.what()) + " for a tensor " + dtype_name(dtype) + shape_str(shape));
  }
  return view_of(std::move(storage), dtype, shape, contiguous_strides(shape), 0, loc);
}

Tensor Tensor::full(const Shape& shape, double value, DType dtype, Loc loc) {
  Tensor t = empty(shape, dtype, loc);
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    std::fill_n(reinterpret_cast<T*>(t.raw_data()), t.numel(), static_cast<T>(value));
  });
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Loc loc) {
  Tensor t = empty(shape, dtype, loc);
  std::memset(t.raw_data(), 0, t.nbytes());
  return t;
}

Tensor Tensor::ones(const Shape& shape, DType dtype, Loc loc) { return full(shape, 1.0, dtype, loc); }

template <class T> Tensor Tensor::from(const std::vector<T>& data, const Shape& shape, Loc loc) {
  if (shape_numel(shape) != static_cast<int64_t>(data.size()))
    throw ShapeError("Tensor::from: " + std::to_string(data.size()) + " values do not fill shape " + shape_str(shape) +
                     " (" + std::to_string(shape_numel(shape)) + " elements)");
  Tensor t = empty(shape, dtype_of<T>(), loc);
  T* out = reinterpret_cast<T*>(t.raw_data());
  for (size_t i = 0; i < data.size(); ++i) out[i] = data[i];
  return t;
}

Tensor Tensor::wrap_bytes(void* data, const Shape& shape, DType dtype, Loc loc) {
  const int64_t nbytes = shape_nbytes(shape, dtype);
  if (!data && nbytes > 0) throw Error("Tensor::wrap: a null pointer cannot hold " + std::string(dtype_name(dtype)) + shape_str(shape));
  return view_of(Storage::borrow(data, static_cast<size_t>(nbytes)), dtype, shape, contiguous_strides(shape), 0, loc);
}

bool Tensor::is_contiguous() const {
  const Impl& m = impl();
  int64_t expected = 1;
  for (size_t i = m.shape.size(); i-- > 0;) {
    if (m.shape[i] != 1 && m.strides[i] != expected) return false;
    expected *= m.shape[i];
  }
  return true;
}

std::string Tensor::str() const {
  if (!impl_) return "<empty tensor>";
  if (impl_->disposed) return "<disposed tensor>";
  return std::string(dtype_name(dtype())) + shape_str(shape());
}

namespace {
// The integer at row-major position flat, exactly (item_as_double rounds beyond 2^53).
// The element offset, from t's data, of the element at row-major position flat.
int64_t element_offset(const Tensor& t, int64_t flat) {
  int64_t offset = 0;
  for (size_t d = t.shape().size(); d-- > 0;) {
    offset += (flat % t.shape()[d]) * t.strides()[d];
    flat /= t.shape()[d];
  }
  return offset;
}

int64_t integer_at(const Tensor& t, int64_t flat) {
  const int64_t offset = element_offset(t, flat);
  return t.dtype() == DType::i64 ? reinterpret_cast<const int64_t*>(t.raw_data())[offset]
                                 : reinterpret_cast<const int32_t*>(t.raw_data())[offset];
}

// The values of t along axis (the indices before it fixed at flat_prefix), NumPy's way.
void print_values(const Tensor& t, size_t axis, int64_t flat_prefix, bool summarize, std::string& out) {
  if (axis == t.shape().size()) {
    char text[32];
    if (is_float(t.dtype())) std::snprintf(text, sizeof text, "%.6g", t.item_as_double(flat_prefix));
    else if (t.dtype() == DType::b8) std::snprintf(text, sizeof text, "%s", t.item_as_double(flat_prefix) != 0 ? "true" : "false");
    else std::snprintf(text, sizeof text, "%lld", static_cast<long long>(integer_at(t, flat_prefix)));
    out += text;
    return;
  }
  constexpr int64_t kEdge = 3;
  const int64_t n = t.shape()[axis];
  out += '[';
  for (int64_t i = 0; i < n; ++i) {
    if (i > 0) out += ", ";
    if (summarize && n > 2 * kEdge && i == kEdge) {
      out += "..., ";
      i = n - kEdge;
    }
    print_values(t, axis + 1, flat_prefix * n + i, summarize, out);
  }
  out += ']';
}
}  // namespace

std::string Tensor::values_str(int64_t max_elements) const {
  if (!impl_ || impl_->disposed) return str();
  std::string out = str() + " ";
  print_values(*this, 0, 0, numel() > max_elements, out);
  return out;
}

std::ostream& operator<<(std::ostream& out, const Tensor& t) { return out << t.values_str(); }

Tensor Tensor::operator[](Index index) const {
  if (ndim() == 0) throw ShapeError("Tensor::operator[]: " + str() + " has no axis to index (at " + loc_str(index.loc) + ")");
  const int64_t n = shape()[0];
  const int64_t i = index.i < 0 ? index.i + n : index.i;
  if (i < 0 || i >= n)
    throw ShapeError("Tensor::operator[]: index " + std::to_string(index.i) + " is out of range for " + str() + " (at " +
                     loc_str(index.loc) + ")");
  const std::span<const int64_t> dims(shape()), steps(strides());
  return TensorHandles::make(storage(), dtype(), dims.subspan(1), steps.subspan(1), offset() + i * steps[0], index.loc);
}

double Tensor::item_as_double(int64_t flat) const {
  if (flat < 0 || flat >= numel())
    throw ShapeError("item_as_double: index " + std::to_string(flat) + " is out of range for " + str() + " (0 to " +
                     std::to_string(numel() - 1) + ")");
  const int64_t off = element_offset(*this, flat);
  return dispatch_dtype(dtype(), [&](auto tag) {
    using T = decltype(tag);
    return static_cast<double>(reinterpret_cast<const T*>(raw_data())[off]);
  });
}

template <class T> T Tensor::item() const {
  if (numel() != 1)
    throw ShapeError("Tensor::item: needs exactly one element, the tensor is " + str());
  return dispatch_dtype(dtype(), [&](auto tag) {  // read in place: no conversion buffer
    using S = decltype(tag);
    return static_cast<T>(*reinterpret_cast<const S*>(raw_data()));
  });
}

template <class T> std::vector<T> Tensor::to_vector() const {
  const InternalTensors internal;
  Tensor c = dtype() == dtype_of<T>() ? contiguous() : to(dtype_of<T>());
  const T* p = reinterpret_cast<const T*>(c.raw_data());
  return std::vector<T>(p, p + c.numel());
}

Dims broadcast_strides(const Tensor& t, std::span<const int64_t> out_shape) { return broadcast_strides(t.shape(), t.strides(), out_shape); }

Dims broadcast_strides(std::span<const int64_t> shape, std::span<const int64_t> strides, std::span<const int64_t> out_shape) {
  Dims out(out_shape.size(), 0);
  const size_t lead = out_shape.size() - shape.size();
  for (size_t d = 0; d < shape.size(); ++d)
    if (shape[d] != 1) out[lead + d] = strides[d];
  return out;
}

namespace {
bool contiguous_geometry(std::span<const int64_t> shape, std::span<const int64_t> strides) {
  int64_t expected = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    if (shape[d] != 1 && strides[d] != expected) return false;
    expected *= shape[d];
  }
  return true;
}
}  // namespace

Region region_of(const Tensor& t) { return {t.raw_data(), t.dtype(), t.shape(), t.strides()}; }

void copy_broadcast(const Tensor& dst, const Tensor& src) { copy_broadcast(region_of(dst), region_of(src)); }

void copy_broadcast(const Region& dst, const Region& src) {
  int64_t numel = 1;
  for (int64_t d : dst.shape) numel *= d;
  const bool dst_contiguous = contiguous_geometry(dst.shape, dst.strides);
  if (dst.dtype == src.dtype && std::ranges::equal(dst.shape, src.shape) && dst_contiguous &&
      contiguous_geometry(src.shape, src.strides)) {
    if (dst.data != src.data) std::memmove(dst.data, src.data, static_cast<size_t>(numel) * dtype_size(dst.dtype));
    return;
  }
  // One contiguous row repeated over every row of dst (a bias spread over a batch): a copy per row.
  const std::span<const int64_t> ds = dst.shape, ss = src.shape;
  if (dst.dtype == src.dtype && !ds.empty() && ss.size() <= ds.size() && !ss.empty() && ss.back() == ds.back() &&
      (ss.back() == 1 || src.strides.back() == 1) && dst_contiguous &&
      std::all_of(ss.begin(), ss.end() - 1, [](int64_t d) { return d == 1; })) {
    const size_t row_bytes = static_cast<size_t>(ds.back()) * dtype_size(dst.dtype);
    const int64_t rows = ds.back() == 0 ? 0 : numel / ds.back();
    for (int64_t r = 0; r < rows; ++r) std::memmove(dst.data + static_cast<size_t>(r) * row_bytes, src.data, row_bytes);
    return;
  }
  const Dims src_strides = broadcast_strides(src.shape, src.strides, dst.shape);
  auto loop = collapse_loop<2>(dst.shape, {dst.strides, src_strides});
  dispatch_dtype(dst.dtype, [&](auto out_tag) {
    using O = decltype(out_tag);
    dispatch_dtype(src.dtype, [&](auto in_tag) {
      using I = decltype(in_tag);
      O* out = reinterpret_cast<O*>(dst.data);
      const I* in = reinterpret_cast<const I*>(src.data);
      run_loop(loop, [&](int64_t n, std::array<int64_t, 2> off, std::array<int64_t, 2> step) {
        O* o = out + off[0];
        const I* a = in + off[1];
        if (step[0] == 1 && step[1] == 1)
          for (int64_t i = 0; i < n; ++i) o[i] = static_cast<O>(a[i]);
        else
          for (int64_t i = 0; i < n; ++i) o[i * step[0]] = static_cast<O>(a[i * step[1]]);
      });
    });
  });
}

Dims contiguous_dims(std::span<const int64_t> shape) {
  Dims strides(shape.size(), 1);
  for (size_t d = shape.size(); d-- > 1;) strides[d - 1] = strides[d] * shape[d];
  return strides;
}

void copy_to_contiguous(std::byte* dst, const Tensor& src) {
  if (src.is_contiguous()) {
    if (dst != src.raw_data()) std::memmove(dst, src.raw_data(), src.nbytes());
    return;
  }
  const Dims dst_strides = contiguous_dims(src.shape());
  auto loop = collapse_loop<2>(src.shape(), {dst_strides, src.strides()});
  dispatch_dtype(src.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* out = reinterpret_cast<T*>(dst);
    const T* in = reinterpret_cast<const T*>(src.raw_data());
    run_loop(loop, [&](int64_t n, std::array<int64_t, 2> off, std::array<int64_t, 2> step) {
      for (int64_t i = 0; i < n; ++i) out[off[0] + i * step[0]] = in[off[1] + i * step[1]];
    });
  });
}

void check_writable_view(const Tensor& t, const char* what) {
  if (t.numel() == 0) return;  // nothing is written (an empty tensor's strides may be 0)
  for (int64_t d = 0; d < t.ndim(); ++d)
    if (t.shape()[d] > 1 && t.strides()[d] == 0)
      throw ShapeError(std::string(what) + ": " + t.str() + " is a broadcast view (stride 0 along axis " +
                       std::to_string(d) + "), whose elements share memory; writing it would write each of them " +
                       std::to_string(t.shape()[d]) + " times. Write a contiguous() copy instead (NumPy makes such "
                       "views read-only)");
}

void Tensor::copy_from(const Tensor& src) {
  if (src.shape() != shape())
    throw ShapeError("Tensor::copy_from: source " + src.str() + " and destination " + str() + " differ in shape");
  check_writable_view(*this, "Tensor::copy_from");
  const bool same_view = src.storage() == storage() && src.offset() == offset() && src.strides() == strides();
  if (!same_view && src.shares_memory(*this)) {  // a[:] = a.T: read all of the source before writing
    const InternalTensors internal;
    copy_broadcast(*this, src.clone());
    return;
  }
  copy_broadcast(*this, src);
}

Tensor Tensor::clone(Loc loc) const {
  Tensor t = empty(shape(), dtype(), loc);
  t.copy_from(*this);
  return t;
}

Tensor Tensor::contiguous(Loc loc) const { return is_contiguous() ? alias(loc) : clone(loc); }

Tensor Tensor::to(DType d, Loc loc) const {
  Tensor t = empty(shape(), d, loc);
  t.copy_from(*this);
  return t;
}

Tensor Tensor::view(Shape shape, Shape strides, int64_t offset, Loc loc) const {
  return view_of(storage(), dtype(), std::move(shape), std::move(strides), offset, loc);
}

namespace {
// t with new_shape: a view when t is contiguous, else a view of a contiguous copy. The strides are
// computed in place, so that a loop reshaping tensors allocates nothing for them.
Tensor reshaped(const Tensor& t, std::span<const int64_t> requested, Loc loc) {
  // One dimension may be -1: whatever the others leave.
  SmallVector<int64_t, 8> shape_buffer(requested);
  const std::span<int64_t> new_shape(shape_buffer.data(), shape_buffer.size());
  const auto cannot = [&] {
    return ShapeError("Tensor::reshape: cannot reshape " + t.str() + " to " +
                      shape_str(Shape(requested.begin(), requested.end())) + " (at " + loc_str(loc) + ")");
  };
  int64_t n = 1, inferred = -1;
  for (size_t i = 0; i < new_shape.size(); ++i) {
    if (new_shape[i] == -1 && inferred < 0) {
      inferred = static_cast<int64_t>(i);
      continue;
    }
    if (new_shape[i] < 0 || __builtin_mul_overflow(n, new_shape[i], &n)) throw cannot();
  }
  if (inferred >= 0) {
    if (n == 0 || t.numel() % n != 0) throw cannot();
    new_shape[static_cast<size_t>(inferred)] = t.numel() / n;
    n = t.numel();
  }
  if (n != t.numel()) throw cannot();
  SmallVector<int64_t, 8> strides(new_shape.size(), 0);
  for (size_t i = new_shape.size(), stride = 1; i-- > 0; stride *= static_cast<size_t>(new_shape[i]))
    strides[i] = static_cast<int64_t>(stride);
  if (t.is_contiguous()) return TensorHandles::make(t.storage(), t.dtype(), new_shape, strides, t.offset(), loc);
  Tensor copy;
  {
    const InternalTensors internal;
    copy = t.clone();
  }
  return TensorHandles::make(copy.storage(), copy.dtype(), new_shape, strides, 0, loc);
}
}  // namespace

Tensor Tensor::reshape(const Shape& new_shape, Loc loc) const { return reshaped(*this, new_shape, loc); }

Tensor Tensor::reshape(std::initializer_list<int64_t> new_shape, Loc loc) const {
  return reshaped(*this, std::span(new_shape.begin(), new_shape.size()), loc);
}

namespace {
// [first, last] byte offsets touched by a view within its storage.
std::pair<int64_t, int64_t> byte_extent(const Tensor& t) {
  int64_t lo = t.offset(), hi = t.offset();
  for (int64_t d = 0; d < t.ndim(); ++d) {
    if (t.shape()[d] == 0) return {0, -1};
    int64_t span = (t.shape()[d] - 1) * t.strides()[d];
    (span < 0 ? lo : hi) += span;
  }
  int64_t es = static_cast<int64_t>(dtype_size(t.dtype()));
  return {lo * es, hi * es + es - 1};
}

std::vector<std::pair<int64_t, int64_t>> byte_intervals(const Tensor& t) {
  std::vector<std::pair<int64_t, int64_t>> out;
  const int64_t es = static_cast<int64_t>(dtype_size(t.dtype()));
  auto collect = [&](int64_t n, std::array<int64_t, 1> off, std::array<int64_t, 1> step) {
    for (int64_t i = 0; i < n; ++i) out.push_back({(off[0] + i * step[0]) * es, (off[0] + i * step[0]) * es + es - 1});
  };
  auto loop = collapse_loop<1>(t.shape(), {t.strides()}, {t.offset()});
  const int64_t n_inner = loop.shape.empty() ? 1 : loop.shape.back();
  run_loop_range(loop, 0, t.numel() / std::max<int64_t>(n_inner, 1), 0, n_inner, collect);
  std::sort(out.begin(), out.end());
  return out;
}
}  // namespace

bool Tensor::same_storage(const Tensor& other) const {
  return storage()->data() == other.storage()->data();
}

bool Tensor::shares_memory(const Tensor& other) const {
  const Storage& a = *storage();
  const Storage& b = *other.storage();
  // Two storages that own their bytes own different bytes: no shape need be read.
  if (&a != &b && a.owned() && b.owned()) return false;
  const std::byte* a0 = a.data();
  const std::byte* b0 = b.data();
  auto [alo, ahi] = byte_extent(*this);
  auto [blo, bhi] = byte_extent(other);
  if (alo > ahi || blo > bhi) return false;
  const std::byte* a_first = a0 + alo; const std::byte* a_last = a0 + ahi;
  const std::byte* b_first = b0 + blo; const std::byte* b_last = b0 + bhi;
  if (a_last < b_first || b_last < a_first) return false;
  if (is_contiguous() && other.is_contiguous()) return true;
  // Strided views whose extents overlap may still interleave without touching: check bytes.
  auto ia = byte_intervals(*this), ib = byte_intervals(other);
  size_t i = 0, j = 0;
  while (i < ia.size() && j < ib.size()) {
    const std::byte* as = a0 + ia[i].first; const std::byte* ae = a0 + ia[i].second;
    const std::byte* bs = b0 + ib[j].first; const std::byte* be = b0 + ib[j].second;
    if (ae < bs) ++i;
    else if (be < as) ++j;
    else return true;
  }
  return false;
}

Tensor Tensor::alias(Loc loc) const {
  const Impl& m = impl();
  // Through spans, not view_of's Shape values: a copy of the shape and strides would allocate.
  return TensorHandles::make(m.storage, m.dtype, m.shape, m.strides, m.offset, loc);
}

void TensorHandles::reseat(Tensor& t, const std::shared_ptr<Storage>& storage, DType dtype, std::span<const int64_t> shape,
                           std::span<const int64_t> strides, int64_t offset) {
  if (!t.impl_ || t.impl_.use_count() != 1) {
    t = make(storage, dtype, shape, strides, offset, Loc::current());
    return;
  }
  Tensor::Impl& impl = *t.impl_;
  impl.shape.assign(shape.begin(), shape.end());
  impl.strides.assign(strides.begin(), strides.end());
  check_view(storage.get(), dtype, impl.shape, impl.strides, offset);
  impl.storage = storage;
  impl.dtype = dtype;
  impl.offset = offset;
  impl.disposed = false;
}

bool TensorHandles::park(Tensor& t) {
  if (!t.impl_ || t.impl_.use_count() != 1) return false;
  t.impl_->storage.reset();
  t.impl_->disposed = true;
  return true;
}

void TensorHandles::move(Tensor& t, int64_t offset) {
  if (t.impl_.use_count() == 1 && !t.impl_->disposed) {
    t.impl_->offset = offset;
    return;
  }
  t = t.view(t.shape(), t.strides(), offset);
}

void Tensor::dispose(Loc loc) const {
  if (impl_ && !impl_->disposed) TensorBook::dispose(*impl_, loc);
}

#define KILN_INSTANTIATE(T)                                                      \
  template Tensor Tensor::from<T>(const std::vector<T>&, const Shape&, Loc);    \
  template T Tensor::item<T>() const;                                            \
  template std::vector<T> Tensor::to_vector<T>() const;
KILN_INSTANTIATE(float)
KILN_INSTANTIATE(double)
KILN_INSTANTIATE(int32_t)
KILN_INSTANTIATE(int64_t)
#undef KILN_INSTANTIATE

template <> std::vector<bool> Tensor::to_vector<bool>() const {
  const InternalTensors internal;
  Tensor c = dtype() == DType::b8 ? contiguous() : to(DType::b8);
  const bool* p = reinterpret_cast<const bool*>(c.raw_data());
  return std::vector<bool>(p, p + c.numel());
}
template <> bool Tensor::item<bool>() const {
  if (numel() != 1) throw ShapeError("Tensor::item: needs exactly one element, the tensor is " + str());
  return dispatch_dtype(dtype(), [&](auto tag) {
    using S = decltype(tag);
    return *reinterpret_cast<const S*>(raw_data()) != S(0);
  });
}
template <> Tensor Tensor::from<bool>(const std::vector<bool>& data, const Shape& shape, Loc loc) {
  if (shape_numel(shape) != static_cast<int64_t>(data.size()))
    throw ShapeError("Tensor::from: " + std::to_string(data.size()) + " values do not fill shape " + shape_str(shape));
  Tensor t = empty(shape, DType::b8, loc);
  bool* out = reinterpret_cast<bool*>(t.raw_data());
  for (size_t i = 0; i < data.size(); ++i) out[i] = data[i];
  return t;
}

}  // namespace kiln

#include "tensor/convert.hpp"

namespace kiln {

bool converts_losslessly(DType from, DType to) {
  if (from == to || from == DType::b8) return true;
  return (from == DType::i32 && (to == DType::i64 || to == DType::f64)) || (from == DType::f32 && to == DType::f64);
}

namespace {

// Every value of an i32 tensor is a float exactly (|v| <= 2^24, or a multiple of a power of two
// that fits f32's 24-bit significand).
bool all_exact_in_f32(const Tensor& value) {
  const Tensor c = value.contiguous();
  const int32_t* v = c.data<int32_t>();
  for (int64_t i = 0; i < c.numel(); ++i)
    if (static_cast<double>(static_cast<float>(v[i])) != static_cast<double>(v[i])) return false;
  return true;
}

}  // namespace

Tensor convert_lossless(const Tensor& value, DType target, const std::string& what) {
  if (value.dtype() == target) return value;
  const bool exact_values = value.dtype() == DType::i32 && target == DType::f32 && all_exact_in_f32(value);
  if (!exact_values && !converts_losslessly(value.dtype(), target))
    throw TypeError(what + ": got " + value.str() + " but expected " + dtype_name(target) + "; converting " +
                    dtype_name(value.dtype()) + " to " + dtype_name(target) + " could lose information. Convert it " +
                    "yourself (Tensor::to(" + dtype_name(target) + ")) if that is intended");
  return value.to(target);
}

}  // namespace kiln

#pragma once
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "kiln/errors.hpp"

namespace kiln {

enum class DType : uint8_t { f32, f64, i32, i64, b8 };
inline constexpr DType f32 = DType::f32;
inline constexpr DType f64 = DType::f64;
inline constexpr DType i32 = DType::i32;
inline constexpr DType i64 = DType::i64;
inline constexpr DType b8 = DType::b8;

using Shape = std::vector<int64_t>;

constexpr size_t dtype_size(DType d) {
  switch (d) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::i32: return 4;
    case DType::i64: return 8;
    case DType::b8: return 1;
  }
  return 0;
}
const char* dtype_name(DType);
bool is_float(DType);
bool is_integer(DType);  // i32, i64 (not b8)
std::string shape_str(const Shape&);
int64_t shape_numel(const Shape&);                // ShapeError on a negative dimension or overflow
int64_t shape_nbytes(const Shape&, DType);        // numel * dtype size, overflow-checked

template <class T> constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, float>) return DType::f32;
  else if constexpr (std::is_same_v<T, double>) return DType::f64;
  else if constexpr (std::is_same_v<T, int32_t>) return DType::i32;
  else if constexpr (std::is_same_v<T, int64_t>) return DType::i64;
  else if constexpr (std::is_same_v<T, bool>) return DType::b8;
  else static_assert(sizeof(T) == 0, "kiln: unsupported element type (use float, double, int32_t, int64_t, bool)");
}

// Where a storage's bytes live: the host's memory today. A device backend would add its own tag
// and allocate through its backend (docs/architecture.md).
enum class Device : uint8_t { cpu };

// A block of bytes. Owned blocks come from kiln's allocator (64-byte aligned, counted); borrowed
// blocks belong to the user (Tensor::wrap) and are never freed by kiln.
class Storage {
 public:
  static std::shared_ptr<Storage> allocate(size_t nbytes);
  static std::shared_ptr<Storage> borrow(void* data, size_t nbytes);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  std::byte* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  bool owned() const { return owned_; }
  Device device() const { return device_; }

 private:
  Storage(std::byte* data, size_t nbytes, bool owned) : data_(data), nbytes_(nbytes), owned_(owned) {}
  static std::shared_ptr<Storage> make(std::byte* data, size_t nbytes, bool owned);
  std::byte* data_;
  size_t nbytes_;
  bool owned_;
  Device device_ = Device::cpu;  // kiln's allocator and Tensor::wrap hand out host memory
};

struct AllocatorStats {
  int64_t bytes_in_use = 0;
  int64_t peak_bytes = 0;
  int64_t n_allocations = 0;  // since the program started
  int64_t live_storages = 0;
  int64_t bytes_cached = 0;  // freed blocks of 1 MiB or more kept for reuse (not in use)
};
AllocatorStats allocator_stats();
void reset_peak_bytes();
// Returns the cached blocks to the system.
void release_cached_memory();

// Threads for kernels and matrix products (one OpenMP runtime for everything).
void set_num_threads(int);
int num_threads();

// A handle on an n-d view of a Storage. Copying a Tensor copies the handle (both name the same
// tensor, as references do); alias() makes a fresh handle on the same storage; dispose() releases
// this handle's storage at once, and any later use of the handle raises DisposedError.
class Tensor {
 public:
  Tensor() = default;

  static Tensor empty(const Shape& shape, DType dtype = DType::f32);
  static Tensor zeros(const Shape& shape, DType dtype = DType::f32);
  static Tensor ones(const Shape& shape, DType dtype = DType::f32);
  static Tensor full(const Shape& shape, double value, DType dtype = DType::f32);
  template <class T> static Tensor from(const std::vector<T>& data, const Shape& shape);
  template <class T> static Tensor from(std::initializer_list<T> data, const Shape& shape) {
    return from(std::vector<T>(data), shape);
  }
  template <class T> static Tensor from(const std::vector<T>& data) {
    return from(data, Shape{static_cast<int64_t>(data.size())});
  }
  template <class T> static Tensor scalar(T value) { return from(std::vector<T>{value}, Shape{}); }
  // No copy: a view of the caller's memory, which must outlive every use of the tensor.
  template <class T> static Tensor wrap(T* data, const Shape& shape) {
    return wrap_bytes(data, shape, dtype_of<std::remove_const_t<T>>());
  }
  static Tensor wrap_bytes(void* data, const Shape& shape, DType dtype);
  static Tensor view_of(std::shared_ptr<Storage> storage, DType dtype, Shape shape, Shape strides,
                        int64_t offset);

  bool defined() const { return impl_ != nullptr; }
  DType dtype() const { return impl().dtype; }
  const Shape& shape() const { return impl().shape; }
  const Shape& strides() const { return impl().strides; }  // in elements
  int64_t offset() const { return impl().offset; }          // in elements
  int64_t ndim() const { return static_cast<int64_t>(impl().shape.size()); }
  int64_t numel() const {  // the shape's product was checked against overflow when it was made
    int64_t n = 1;
    for (int64_t d : impl().shape) n *= d;
    return n;
  }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype()); }
  bool is_contiguous() const;
  const std::shared_ptr<Storage>& storage() const { return impl().storage; }
  std::string str() const;  // "f32(2,3)"

  template <class T> T* data() {
    check_dtype(dtype_of<T>());
    return reinterpret_cast<T*>(raw_data());
  }
  template <class T> const T* data() const {
    check_dtype(dtype_of<T>());
    return reinterpret_cast<const T*>(raw_data());
  }
  std::byte* raw_data() const {
    const Impl& m = impl();
    return m.storage->data() + m.offset * static_cast<int64_t>(dtype_size(m.dtype));
  }
  template <class T> T item() const;          // converts from the tensor's dtype
  template <class T> std::vector<T> to_vector() const;  // row-major order, converting
  double item_as_double(int64_t flat_index) const;      // row-major index

  Tensor clone() const;                        // contiguous deep copy
  Tensor contiguous() const;                   // this if already contiguous, else a copy
  Tensor to(DType dtype) const;                // a converted contiguous copy (a copy even if equal)
  Tensor view(Shape shape, Shape strides, int64_t offset) const;
  Tensor reshape(const Shape& shape) const;   // a view when contiguous, else a copy
  void copy_from(const Tensor& src);           // same shape; converts dtype
  bool shares_memory(const Tensor& other) const;
  bool same_storage(const Tensor& other) const;

  Tensor alias() const;
  void dispose();
  bool is_disposed() const { return impl_ && impl_->disposed; }
  // No other handle (copy or alias) and no view refers to this tensor's storage.
  bool is_sole_reference() const {
    return impl_ && impl_.use_count() == 1 && impl_->storage && impl_->storage.use_count() == 1;
  }

 private:
  friend struct TensorHandles;  // kiln's run loop re-views its slots' handles in place
  struct Impl {
    std::shared_ptr<Storage> storage;
    DType dtype = DType::f32;
    Shape shape;
    Shape strides;
    int64_t offset = 0;
    bool disposed = false;
  };
  const Impl& impl() const {
    if (!impl_ || impl_->disposed) [[unlikely]]
      throw_unusable();
    return *impl_;
  }
  [[noreturn]] void throw_unusable() const;
  void check_dtype(DType expected) const;
  std::shared_ptr<Impl> impl_;
};

template <> Tensor Tensor::from<bool>(const std::vector<bool>& data, const Shape& shape);
template <> std::vector<bool> Tensor::to_vector<bool>() const;
template <> bool Tensor::item<bool>() const;

Shape contiguous_strides(const Shape& shape);

}  // namespace kiln

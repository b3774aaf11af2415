#pragma once
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <iosfwd>
#include <memory>
#include <source_location>
#include <string>
#include <type_traits>
#include <vector>

#include "kiln/errors.hpp"

namespace kiln {

// Where user code made a value (a default argument: callers never pass it).
using Loc = std::source_location;

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
  // Memory a compiled function writes again on every call (its kept arena, which borrowed outputs
  // view): a shared variable never takes it as its own buffer, even with borrow.
  bool rewritten_by_calls() const { return rewritten_by_calls_; }

 private:
  friend struct TensorHandles;  // marks a function's kept arena
  Storage(std::byte* data, size_t nbytes, bool owned) : data_(data), nbytes_(nbytes), owned_(owned) {}
  static std::shared_ptr<Storage> make(std::byte* data, size_t nbytes, bool owned);
  std::byte* data_;
  size_t nbytes_;
  bool owned_;
  bool rewritten_by_calls_ = false;
  Device device_ = Device::cpu;  // kiln's allocator and Tensor::wrap hand out host memory
};

struct AllocatorStats {
  int64_t bytes_in_use = 0;
  int64_t peak_bytes = 0;
  int64_t n_allocations = 0;  // storages made since the program started
  int64_t live_storages = 0;
  // Freed blocks kept for reuse (not in use): small ones per thread, bounded (64 MiB a thread),
  // blocks of 1 MiB or more shared, up to 512 MiB.
  int64_t bytes_cached = 0;
  int64_t n_system_allocations = 0;  // of n_allocations, those that took a new block from the system
  // kiln's small objects (tensor handles and storage objects, data of 4 KiB or less, graph nodes,
  // executables) come from a slab of 2 MiB chunks: the blocks taken from it so far (new or
  // reused; memory operator new does not see), and the bytes of its blocks not in use.
  int64_t n_slab_blocks = 0;
  int64_t slab_free_bytes = 0;
};
AllocatorStats allocator_stats();
void reset_peak_bytes();
// Returns the cached blocks: the shared ones and the calling thread's small ones to where they came
// from (another thread's small blocks go when it exits), then the slab's chunks none of whose
// blocks is in use to the system.
void release_cached_memory();

// Threads for kernels and matrix products (one OpenMP runtime for everything).
void set_num_threads(int);
int num_threads();

// A handle on an n-d view of a Storage. Copying a Tensor copies the handle (both name the same
// tensor, as references do); alias() makes a fresh handle on the same storage; dispose() releases
// this handle's storage at once, and any later use of the handle raises DisposedError.
class Tensor;
std::ostream& operator<<(std::ostream& out, const Tensor& t);  // t.values_str()

class Tensor {
 public:
  Tensor() = default;

  static Tensor empty(const Shape& shape, DType dtype = DType::f32, Loc loc = Loc::current());
  static Tensor zeros(const Shape& shape, DType dtype = DType::f32, Loc loc = Loc::current());
  static Tensor ones(const Shape& shape, DType dtype = DType::f32, Loc loc = Loc::current());
  static Tensor full(const Shape& shape, double value, DType dtype = DType::f32, Loc loc = Loc::current());
  template <class T> static Tensor from(const std::vector<T>& data, const Shape& shape, Loc loc = Loc::current());
  template <class T> static Tensor from(std::initializer_list<T> data, const Shape& shape, Loc loc = Loc::current()) {
    return from(std::vector<T>(data), shape, loc);
  }
  template <class T> static Tensor from(const std::vector<T>& data, Loc loc = Loc::current()) {
    return from(data, Shape{static_cast<int64_t>(data.size())}, loc);
  }
  template <class T> static Tensor scalar(T value, Loc loc = Loc::current()) { return from(std::vector<T>{value}, Shape{}, loc); }
  // No copy: a view of the caller's memory, which must outlive every use of the tensor.
  template <class T> static Tensor wrap(T* data, const Shape& shape, Loc loc = Loc::current()) {
    return wrap_bytes(data, shape, dtype_of<std::remove_const_t<T>>(), loc);
  }
  static Tensor wrap_bytes(void* data, const Shape& shape, DType dtype, Loc loc = Loc::current());
  static Tensor view_of(std::shared_ptr<Storage> storage, DType dtype, Shape shape, Shape strides,
                        int64_t offset, Loc loc = Loc::current());

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

  Tensor clone(Loc loc = Loc::current()) const;       // contiguous deep copy
  Tensor contiguous(Loc loc = Loc::current()) const;  // a fresh handle on this storage if contiguous, else a copy
  Tensor to(DType dtype, Loc loc = Loc::current()) const;  // a converted contiguous copy (a copy even if equal)
  Tensor view(Shape shape, Shape strides, int64_t offset, Loc loc = Loc::current()) const;
  Tensor reshape(const Shape& shape, Loc loc = Loc::current()) const;  // a view when contiguous, else a copy
  Tensor reshape(std::initializer_list<int64_t> shape, Loc loc = Loc::current()) const;
  // The eager reductions over every element or along one axis (kiln/eager.hpp has them by axes).
  Tensor sum(Loc loc = Loc::current()) const;
  Tensor mean(Loc loc = Loc::current()) const;
  Tensor sum(int64_t axis, bool keepdims = false, Loc loc = Loc::current()) const;
  Tensor mean(int64_t axis, bool keepdims = false, Loc loc = Loc::current()) const;
  // t[i]: a view of t at index i along its first axis (negative from the end), as NumPy's.
  struct Index {
    Index(int64_t i, Loc loc = Loc::current()) : i(i), loc(loc) {}  // NOLINT: t[2] records the caller's line
    int64_t i;
    Loc loc;
  };
  Tensor operator[](Index index) const;
  // The values, NumPy-like: "f32(2,3) [[1, 2, 3], [4, 5, 6]]"; past max_elements, the first and
  // last three of each axis with "..." between.
  std::string values_str(int64_t max_elements = 1000) const;
  void copy_from(const Tensor& src);           // same shape; converts dtype
  bool shares_memory(const Tensor& other) const;
  bool same_storage(const Tensor& other) const;

  // Eager tensors and dispose scopes (docs/eager.md, the TorchSharp memory model). Every tensor
  // made for the user while a DisposeScope lives on this thread is disposed when it ends.
  Tensor alias(Loc loc = Loc::current()) const;  // a fresh handle on the same storage
  // Releases this handle's hold on its storage now (the storage goes when no handle or view holds
  // it); any later use raises DisposedError naming the tensor and both lines. Twice is harmless.
  // Const as the scope functions are: it acts on the tensor every copy of this handle names.
  void dispose(Loc loc = Loc::current()) const;
  bool is_disposed() const { return impl_ && impl_->disposed; }
  // Registers this handle in the scope outside the one holding it (with no outer scope: in
  // none, as detach_from_scope), and returns it.
  Tensor move_to_outer_scope() const;
  Tensor detach_from_scope() const;  // no scope will dispose this handle; returns it
  // No other handle (copy or alias) and no view refers to this tensor's storage.
  bool is_sole_reference() const {
    return impl_ && impl_.use_count() == 1 && impl_->storage && impl_->storage.use_count() == 1;
  }

 private:
  friend struct TensorHandles;  // kiln's run loop re-views its slots' handles in place
  friend struct TensorBook;     // the dispose scopes and the live-tensor counts
  struct Impl {
    std::shared_ptr<Storage> storage;
    DType dtype = DType::f32;
    Shape shape;
    Shape strides;
    int64_t offset = 0;
    bool disposed = false;
    // A tensor made for the user (kiln's own are not counted, listed or put in scopes).
    bool counted = false;
    // The DisposeScope step that disposed it ("end", "dispose_everything", ...); null: dispose().
    const char* disposed_by = nullptr;
    uint32_t scope_index = 0;     // its place in its scope's list
    void* scope = nullptr;        // the scope that will dispose it
    Loc created{}, disposed_at{};
    Impl* live_prev = nullptr;    // the list live_tensor_report() reads
    Impl* live_next = nullptr;
    Impl() = default;
    Impl(const Impl&) = delete;
    Impl& operator=(const Impl&) = delete;
    ~Impl();
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

template <> Tensor Tensor::from<bool>(const std::vector<bool>& data, const Shape& shape, Loc loc);
template <> std::vector<bool> Tensor::to_vector<bool>() const;
template <> bool Tensor::item<bool>() const;

Shape contiguous_strides(const Shape& shape);

}  // namespace kiln

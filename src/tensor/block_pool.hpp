#pragma once
#include <cstddef>
#include <cstdint>

namespace kiln {

// Released memory blocks, kept per thread and handed out again for the same size class, so that a
// loop making tensors of the same sizes takes new memory only on its first pass. A block may be
// released on another thread than the one that took it; it is then kept by the releasing thread.
// Each list is bounded; what a thread keeps goes back where it came from when it exits.
struct BlockPool {
  // Blocks of up to kSmallBytes (handles' reference counts, storage objects): 16-byte classes.
  static constexpr size_t kSmallBytes = 128;
  // Never null (std::bad_alloc): from the PageSlab when none is kept (operator new past kSmallBytes).
  static void* take_small(size_t bytes);
  static void give_small(void* p, size_t bytes);

  // Tensor data blocks below kDataBytes, 64-byte aligned. data_class is the capacity of the block
  // a request of nbytes gets (at most a quarter more); take_data returns null when none is kept,
  // keep_data false when the block is not kept (the caller frees it).
  static constexpr size_t kDataBytes = size_t{1} << 20;
  static size_t data_class(size_t nbytes);
  static void* take_data(size_t class_bytes);
  static bool keep_data(void* p, size_t class_bytes);
  static int64_t kept_data_bytes();  // on all threads
  // This thread's kept blocks, small ones and data, to where they came from.
  static void release_kept();
  // A new data block of class_bytes (a data_class), from the PageSlab when it holds the class,
  // else the heap; null when the system has no memory left. free_data gives one back.
  static void* new_data(size_t class_bytes);
  static void free_data(void* p, size_t class_bytes);
};

// An allocator for std::allocate_shared (and shared_ptr's control blocks) drawing on the pool.
template <class T> struct PooledAllocator {
  using value_type = T;
  PooledAllocator() = default;
  template <class U> PooledAllocator(const PooledAllocator<U>&) {}  // NOLINT: rebinding
  T* allocate(size_t n) { return static_cast<T*>(BlockPool::take_small(n * sizeof(T))); }
  void deallocate(T* p, size_t n) { BlockPool::give_small(p, n * sizeof(T)); }
  template <class U> bool operator==(const PooledAllocator<U>&) const { return true; }
};

}  // namespace kiln

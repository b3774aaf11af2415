#pragma once
#include <cstddef>

namespace kiln {

// Where kiln's small blocks come from when no thread keeps a released one: tensor handles, their
// reference counts and storage objects, the data of tensors of up to 4 KiB. A steady call touches
// such blocks for every node; scattered through the heap, each sat on a page of its own, and past
// what the TLB covers (some 10k nodes) the cost per node grew with the graph. The slab carves them,
// in the order they are asked for, from 2 MiB chunks the kernel is asked to back with huge pages.
// A block given back is kept for the next of its size; chunks stay mapped for the process.
struct PageSlab {
  static constexpr size_t kMaxBytes = 4096;
  // Whether blocks of this many bytes (a multiple of 16) come from the slab.
  static constexpr bool holds(size_t block_bytes) { return block_bytes <= kMaxBytes; }
  // A block of block_bytes (a multiple of 16, at most kMaxBytes), 64-byte aligned when block_bytes
  // is a multiple of 64, else 16; null when the system has no memory left.
  static void* take(size_t block_bytes);
  static void give(void* p, size_t block_bytes);

  // The slab's block for `bytes` (rounded up to 16), or the heap's past kMaxBytes; throws
  // std::bad_alloc. For objects a steady call or a pass over a graph reads one after another.
  static void* allocate(size_t bytes);
  static void deallocate(void* p, size_t bytes);
};

// An allocator for std::allocate_shared drawing on PageSlab::allocate.
template <class T> struct SlabAllocator {
  using value_type = T;
  SlabAllocator() = default;
  template <class U> SlabAllocator(const SlabAllocator<U>&) {}  // NOLINT: rebinding
  T* allocate(size_t n) { return static_cast<T*>(PageSlab::allocate(n * sizeof(T))); }
  void deallocate(T* p, size_t n) { PageSlab::deallocate(p, n * sizeof(T)); }
  template <class U> bool operator==(const SlabAllocator<U>&) const { return true; }
};

}  // namespace kiln

#pragma once
#include <cstddef>
#include <cstdint>

namespace kiln {

// Where kiln's small objects come from: tensor handles, their reference counts and storage
// objects, the data of tensors of up to 4 KiB (when no thread keeps a released one), executables,
// graph nodes and variables. A steady call touches such objects for every node; scattered through
// the heap, each sat on a page of its own, and past what the TLB covers (some 10k nodes) the cost
// per node grew with the graph. The slab carves them, in the order they are asked for, from 2 MiB
// chunks the kernel is asked to back with huge pages. A block given back is kept for the next of
// its size; release_free_chunks() returns the chunks none of whose blocks is in use.
struct PageSlab {
  static constexpr size_t kMaxBytes = 4096;
  // Whether blocks of this many bytes (a multiple of 16) come from the slab.
  static constexpr bool holds(size_t block_bytes) { return block_bytes <= kMaxBytes; }
  // A block of block_bytes (a multiple of 16 from 16 to kMaxBytes), 64-byte aligned when
  // block_bytes is a multiple of 64, else 16; null when the system has no memory left.
  static void* take(size_t block_bytes);
  static void give(void* p, size_t block_bytes);

  // The slab's block for `bytes` (rounded up to 16), or the heap's past kMaxBytes; throws
  // std::bad_alloc.
  static void* allocate(size_t bytes);
  static void deallocate(void* p, size_t bytes);

  static int64_t blocks_taken();  // take() calls so far, on every thread
  static int64_t free_bytes();    // in blocks given back and not taken again
  // Unmaps every chunk whose blocks have all been given back (the newest chunk, still being
  // carved, stays).
  static void release_free_chunks();
};

// An allocator for std::allocate_shared drawing on PageSlab::allocate.
template <class T> struct SlabAllocator {
  static_assert(alignof(T) <= 16, "the slab aligns blocks to 16 bytes");
  using value_type = T;
  SlabAllocator() = default;
  template <class U> SlabAllocator(const SlabAllocator<U>&) {}  // NOLINT: rebinding
  T* allocate(size_t n) { return static_cast<T*>(PageSlab::allocate(n * sizeof(T))); }
  void deallocate(T* p, size_t n) { PageSlab::deallocate(p, n * sizeof(T)); }
  template <class U> bool operator==(const SlabAllocator<U>&) const { return true; }
};

}  // namespace kiln

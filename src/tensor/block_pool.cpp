#include "tensor/block_pool.hpp"
#include "tensor/page_slab.hpp"
#include "tensor/per_thread.hpp"

#include <atomic>
#include <bit>
#include <cstdlib>
#include <new>

#include <sanitizer/asan_interface.h>

namespace kiln {
namespace {

constexpr size_t kSmallClasses = BlockPool::kSmallBytes / 16;
constexpr size_t kKeptSmallPerClass = 4096;
constexpr size_t kDataAlignment = 64;
// Data classes: 64-byte steps up to 1 KiB, then four per doubling up to kDataBytes.
constexpr size_t kDataClasses = 16 + 4 * 10;
constexpr size_t kKeptDataBytesPerThread = size_t{64} << 20;

struct Link {
  Link* next;
};

// A list of blocks of block_bytes each. Under AddressSanitizer a kept block is poisoned but for
// its link, so that a use after release is still reported although the memory is not freed.
struct FreeList {
  Link* head = nullptr;
  size_t size = 0;
  void* take(size_t block_bytes) {
    if (!head) return nullptr;
    Link* l = head;
    ASAN_UNPOISON_MEMORY_REGION(l, block_bytes);
    head = l->next;
    --size;
    return l;
  }
  void give(void* p, size_t block_bytes) {
    head = new (p) Link{head};
    ASAN_POISON_MEMORY_REGION(static_cast<std::byte*>(p) + sizeof(Link), block_bytes - sizeof(Link));
    ++size;
  }
};

std::atomic<int64_t> kept_data_on_all_threads{0};

size_t small_class(size_t bytes) { return bytes == 0 ? 0 : (bytes + 15) / 16 - 1; }
size_t small_block_bytes(size_t small_class) { return (small_class + 1) * 16; }

size_t data_class_index(size_t class_bytes) {
  if (class_bytes <= 1024) return class_bytes / 64 - 1;
  const size_t octave = std::bit_width(class_bytes - 1) - 1;  // class_bytes in (2^octave, 2^(octave+1)]
  return 16 + 4 * (octave - 10) + (class_bytes >> (octave - 2)) - 5;
}

size_t data_class_bytes(size_t index) {
  if (index < 16) return (index + 1) * 64;
  const size_t octave = 10 + (index - 16) / 4;
  return (size_t{1} << octave) + ((index - 16) % 4 + 1) * ((size_t{1} << octave) / 4);
}


struct Pool {
  FreeList small[kSmallClasses];
  FreeList data[kDataClasses];
  size_t data_bytes = 0;
  ~Pool() { release(); }
  void release() {
    for (size_t c = 0; c < kSmallClasses; ++c)
      while (void* p = small[c].take(small_block_bytes(c))) PageSlab::give(p, small_block_bytes(c));
    release_data();
  }
  void release_data() {
    for (size_t c = 0; c < kDataClasses; ++c)
      while (void* p = data[c].take(data_class_bytes(c))) BlockPool::free_data(p, data_class_bytes(c));
    kept_data_on_all_threads.fetch_sub(static_cast<int64_t>(data_bytes), std::memory_order_relaxed);
    data_bytes = 0;
  }
};

Pool* this_pool() { return PerThread<Pool>::get(); }

}  // namespace

void* BlockPool::take_small(size_t bytes) {
  if (Pool* pool = this_pool(); pool && bytes <= kSmallBytes)
    if (void* p = pool->small[small_class(bytes)].take(small_block_bytes(small_class(bytes)))) return p;
  if (bytes > kSmallBytes) return ::operator new(bytes);
  return PageSlab::allocate(small_block_bytes(small_class(bytes)));
}

void BlockPool::give_small(void* p, size_t bytes) {
  if (Pool* pool = this_pool(); pool && bytes <= kSmallBytes) {
    FreeList& list = pool->small[small_class(bytes)];
    if (list.size < kKeptSmallPerClass) return list.give(p, small_block_bytes(small_class(bytes)));
  }
  if (bytes > kSmallBytes) return ::operator delete(p);
  PageSlab::give(p, small_block_bytes(small_class(bytes)));
}

size_t BlockPool::data_class(size_t nbytes) {
  if (nbytes <= 1024) return nbytes <= kDataAlignment ? kDataAlignment : (nbytes + 63) / 64 * 64;
  const size_t step = std::bit_floor(nbytes - 1) / 4;
  return (nbytes + step - 1) / step * step;
}

void* BlockPool::take_data(size_t class_bytes) {
  Pool* pool = this_pool();
  if (!pool || class_bytes >= kDataBytes) return nullptr;
  void* p = pool->data[data_class_index(class_bytes)].take(class_bytes);
  if (p) {
    pool->data_bytes -= class_bytes;
    kept_data_on_all_threads.fetch_sub(static_cast<int64_t>(class_bytes), std::memory_order_relaxed);
  }
  return p;
}

bool BlockPool::keep_data(void* p, size_t class_bytes) {
  Pool* pool = this_pool();
  if (!pool || class_bytes >= kDataBytes || pool->data_bytes + class_bytes > kKeptDataBytesPerThread) return false;
  pool->data[data_class_index(class_bytes)].give(p, class_bytes);
  pool->data_bytes += class_bytes;
  kept_data_on_all_threads.fetch_add(static_cast<int64_t>(class_bytes), std::memory_order_relaxed);
  return true;
}

void* BlockPool::new_data(size_t class_bytes) {
  return PageSlab::holds(class_bytes) ? PageSlab::take(class_bytes) : std::aligned_alloc(kDataAlignment, class_bytes);
}

void BlockPool::free_data(void* p, size_t class_bytes) {
  if (PageSlab::holds(class_bytes)) PageSlab::give(p, class_bytes);
  else std::free(p);
}

void BlockPool::release_kept() {
  if (Pool* pool = this_pool()) pool->release();
}

int64_t BlockPool::kept_data_bytes() { return kept_data_on_all_threads.load(std::memory_order_relaxed); }

}  // namespace kiln

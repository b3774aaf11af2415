#include "tensor/block_pool.hpp"
#include "tensor/per_thread.hpp"

#include <atomic>
#include <bit>
#include <cstdlib>
#include <new>

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

struct FreeList {
  Link* head = nullptr;
  size_t size = 0;
  void* take() {
    if (!head) return nullptr;
    Link* l = head;
    head = l->next;
    --size;
    return l;
  }
  void give(void* p) {
    head = new (p) Link{head};
    ++size;
  }
};

std::atomic<int64_t> kept_data_on_all_threads{0};

struct Pool {
  FreeList small[kSmallClasses];
  FreeList data[kDataClasses];
  size_t data_bytes = 0;
  ~Pool() {
    for (FreeList& list : small)
      while (void* p = list.take()) ::operator delete(p);
    release_data();
  }
  void release_data() {
    for (FreeList& list : data)
      while (void* p = list.take()) std::free(p);
    kept_data_on_all_threads.fetch_sub(static_cast<int64_t>(data_bytes), std::memory_order_relaxed);
    data_bytes = 0;
  }
};

Pool* this_pool() { return PerThread<Pool>::get(); }

size_t small_class(size_t bytes) { return bytes == 0 ? 0 : (bytes + 15) / 16 - 1; }

size_t data_class_index(size_t class_bytes) {
  if (class_bytes <= 1024) return class_bytes / 64 - 1;
  const size_t octave = std::bit_width(class_bytes - 1) - 1;  // class_bytes in (2^octave, 2^(octave+1)]
  return 16 + 4 * (octave - 10) + (class_bytes >> (octave - 2)) - 5;
}

}  // namespace

void* BlockPool::take_small(size_t bytes) {
  if (Pool* pool = this_pool(); pool && bytes <= kSmallBytes)
    if (void* p = pool->small[small_class(bytes)].take()) return p;
  return ::operator new(bytes <= kSmallBytes ? (small_class(bytes) + 1) * 16 : bytes);
}

void BlockPool::give_small(void* p, size_t bytes) {
  if (Pool* pool = this_pool(); pool && bytes <= kSmallBytes) {
    FreeList& list = pool->small[small_class(bytes)];
    if (list.size < kKeptSmallPerClass) return list.give(p);
  }
  ::operator delete(p);
}

size_t BlockPool::data_class(size_t nbytes) {
  if (nbytes <= 1024) return nbytes <= kDataAlignment ? kDataAlignment : (nbytes + 63) / 64 * 64;
  const size_t step = std::bit_floor(nbytes - 1) / 4;
  return (nbytes + step - 1) / step * step;
}

void* BlockPool::take_data(size_t class_bytes) {
  Pool* pool = this_pool();
  if (!pool || class_bytes >= kDataBytes) return nullptr;
  void* p = pool->data[data_class_index(class_bytes)].take();
  if (p) {
    pool->data_bytes -= class_bytes;
    kept_data_on_all_threads.fetch_sub(static_cast<int64_t>(class_bytes), std::memory_order_relaxed);
  }
  return p;
}

bool BlockPool::keep_data(void* p, size_t class_bytes) {
  Pool* pool = this_pool();
  if (!pool || class_bytes >= kDataBytes || pool->data_bytes + class_bytes > kKeptDataBytesPerThread) return false;
  pool->data[data_class_index(class_bytes)].give(p);
  pool->data_bytes += class_bytes;
  kept_data_on_all_threads.fetch_add(static_cast<int64_t>(class_bytes), std::memory_order_relaxed);
  return true;
}

void BlockPool::release_kept_data() {
  if (Pool* pool = this_pool()) pool->release_data();
}

int64_t BlockPool::kept_data_bytes() { return kept_data_on_all_threads.load(std::memory_order_relaxed); }

}  // namespace kiln

#include "tensor/page_slab.hpp"

#include <pthread.h>
#include <sys/mman.h>

#include <atomic>
#include <cassert>
#include <mutex>
#include <new>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace kiln {
namespace {

std::atomic<int64_t> taken{0};

constexpr size_t slab_bytes(size_t bytes) { return bytes == 0 ? 16 : (bytes + 15) / 16 * 16; }

}  // namespace

// AddressSanitizer watches the heap, not mappings: its builds take every block from the heap, so
// that a use after release is still reported.
#if defined(__SANITIZE_ADDRESS__)

void* PageSlab::take(size_t block_bytes) {
  taken.fetch_add(1, std::memory_order_relaxed);
  return ::operator new(block_bytes, std::align_val_t{64}, std::nothrow);
}
void PageSlab::give(void* p, size_t) { ::operator delete(p, std::align_val_t{64}); }
int64_t PageSlab::free_bytes() { return 0; }
void PageSlab::release_free_chunks() {}

#else

namespace {

constexpr size_t kChunkBytes = size_t{2} << 20;
constexpr size_t kLists = PageSlab::kMaxBytes / 16;

struct Link {
  Link* next;
};

uintptr_t chunk_of(const void* p) { return reinterpret_cast<uintptr_t>(p) & ~(kChunkBytes - 1); }

// A chunk of kChunkBytes at a kChunkBytes boundary (so that one huge page can back it), advised as
// huge pages where the kernel has them; null when the system has no memory left.
std::byte* map_chunk() {
  void* p = mmap(nullptr, 2 * kChunkBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  auto* start = static_cast<std::byte*>(p);
  const auto misalignment = reinterpret_cast<uintptr_t>(start) % kChunkBytes;
  std::byte* chunk = misalignment ? start + (kChunkBytes - misalignment) : start;
  if (chunk > start) munmap(start, static_cast<size_t>(chunk - start));
  if (std::byte* end = chunk + kChunkBytes; end < start + 2 * kChunkBytes)
    munmap(end, static_cast<size_t>(start + 2 * kChunkBytes - end));
#ifdef MADV_HUGEPAGE
  madvise(chunk, kChunkBytes, MADV_HUGEPAGE);  // a hint: without it the chunk is ordinary pages
#endif
  return chunk;
}

struct Slab {
  std::mutex mutex;
  Link* free[kLists] = {};
  int64_t free_bytes = 0;
  std::byte* next = nullptr;  // the unused rest of the newest chunk
  size_t left = 0;
  // The bytes of blocks carved from each chunk (padding and an unused tail not counted): a chunk
  // whose free blocks add up to it has none in use.
  std::unordered_map<uintptr_t, size_t> carved;

  void* take(size_t block_bytes) {
    const std::lock_guard lock(mutex);
    Link*& list = free[block_bytes / 16 - 1];
    if (Link* l = list) {
      list = l->next;
      free_bytes -= static_cast<int64_t>(block_bytes);
      return l;
    }
    const size_t align = block_bytes % 64 == 0 ? 64 : 16;
    size_t pad = (align - reinterpret_cast<uintptr_t>(next) % align) % align;
    if (!next || pad + block_bytes > left) {
      // What is left of the old chunk is too small for this block and stays unused (less than
      // kMaxBytes + 64 bytes of each chunk).
      std::byte* chunk = map_chunk();
      if (!chunk) return nullptr;
      next = chunk;
      left = kChunkBytes;
      pad = 0;
    }
    std::byte* block = next + pad;
    next = block + block_bytes;
    left -= pad + block_bytes;
    carved[chunk_of(block)] += block_bytes;
    return block;
  }

  void give(void* p, size_t block_bytes) {
    const std::lock_guard lock(mutex);
    Link*& list = free[block_bytes / 16 - 1];
    list = new (p) Link{list};
    free_bytes += static_cast<int64_t>(block_bytes);
  }

  void release_free_chunks() {
    const std::lock_guard lock(mutex);
    std::unordered_map<uintptr_t, size_t> free_in;
    for (size_t c = 0; c < kLists; ++c)
      for (Link* l = free[c]; l; l = l->next) free_in[chunk_of(l)] += (c + 1) * 16;
    const uintptr_t newest = next ? chunk_of(next - 1) : 0;
    std::unordered_set<uintptr_t> released;
    for (const auto& [chunk, bytes] : free_in)
      if (chunk != newest && bytes == carved[chunk]) released.insert(chunk);
    if (released.empty()) return;
    for (size_t c = 0; c < kLists; ++c) {
      Link** link = &free[c];
      while (*link) {
        if (released.count(chunk_of(*link))) {
          free_bytes -= static_cast<int64_t>((c + 1) * 16);
          *link = (*link)->next;
        } else {
          link = &(*link)->next;
        }
      }
    }
    for (uintptr_t chunk : released) {
      carved.erase(chunk);
      munmap(reinterpret_cast<void*>(chunk), kChunkBytes);
    }
  }
};

Slab* the_slab = nullptr;  // set once, before the fork handlers that read it are registered

Slab* make_slab() {
  the_slab = new Slab;
  // A child forked while another thread holds the lock would wait for it forever.
  pthread_atfork([] { the_slab->mutex.lock(); }, [] { the_slab->mutex.unlock(); }, [] { the_slab->mutex.unlock(); });
  return the_slab;
}

// Never destroyed: threads give blocks back as they exit, after static destructors may have run.
Slab& slab() {
  static Slab* const s = make_slab();
  return *s;
}

}  // namespace

void* PageSlab::take(size_t block_bytes) {
  assert(block_bytes >= 16 && block_bytes % 16 == 0 && holds(block_bytes));
  taken.fetch_add(1, std::memory_order_relaxed);
  return slab().take(block_bytes);
}
void PageSlab::give(void* p, size_t block_bytes) {
  assert(block_bytes >= 16 && block_bytes % 16 == 0 && holds(block_bytes));
  slab().give(p, block_bytes);
}
int64_t PageSlab::free_bytes() {
  Slab& s = slab();
  const std::lock_guard lock(s.mutex);
  return s.free_bytes;
}
void PageSlab::release_free_chunks() { slab().release_free_chunks(); }

#endif

int64_t PageSlab::blocks_taken() { return taken.load(std::memory_order_relaxed); }

void* PageSlab::allocate(size_t bytes) {
  if (!holds(slab_bytes(bytes))) return ::operator new(bytes);
  if (void* p = take(slab_bytes(bytes))) return p;
  throw std::bad_alloc();
}

void PageSlab::deallocate(void* p, size_t bytes) {
  if (holds(slab_bytes(bytes))) give(p, slab_bytes(bytes));
  else ::operator delete(p);
}

}  // namespace kiln

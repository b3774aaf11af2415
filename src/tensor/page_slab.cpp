#include "tensor/page_slab.hpp"

#include <sys/mman.h>

#include <cstdint>
#include <mutex>
#include <new>

namespace kiln {

// AddressSanitizer watches the heap, not mappings: its builds take every block from the heap, so
// that a use after release is still reported.
#if defined(__SANITIZE_ADDRESS__)

void* PageSlab::take(size_t block_bytes) { return ::operator new(block_bytes, std::align_val_t{64}, std::nothrow); }
void PageSlab::give(void* p, size_t) { ::operator delete(p, std::align_val_t{64}); }

#else

namespace {

constexpr size_t kChunkBytes = size_t{2} << 20;
constexpr size_t kLists = PageSlab::kMaxBytes / 16;

struct Link {
  Link* next;
};

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
  std::byte* next = nullptr;  // the unused rest of the newest chunk
  size_t left = 0;

  void* take(size_t block_bytes) {
    const std::lock_guard lock(mutex);
    Link*& list = free[block_bytes / 16 - 1];
    if (Link* l = list) {
      list = l->next;
      return l;
    }
    const size_t align = block_bytes % 64 == 0 ? 64 : 16;
    size_t pad = (align - reinterpret_cast<uintptr_t>(next) % align) % align;
    if (!next || pad + block_bytes > left) {
      // What is left of the old chunk is too small for this block and stays unused (less than
      // kMaxBytes + 64 bytes of each chunk).
      next = map_chunk();
      if (!next) {
        left = 0;
        return nullptr;
      }
      left = kChunkBytes;
      pad = 0;
    }
    std::byte* block = next + pad;
    next = block + block_bytes;
    left -= pad + block_bytes;
    return block;
  }

  void give(void* p, size_t block_bytes) {
    const std::lock_guard lock(mutex);
    Link*& list = free[block_bytes / 16 - 1];
    list = new (p) Link{list};
  }
};

// Never destroyed: threads give blocks back as they exit, after static destructors may have run.
Slab& slab() {
  static Slab* const s = new Slab;
  return *s;
}

}  // namespace

void* PageSlab::take(size_t block_bytes) { return slab().take(block_bytes); }
void PageSlab::give(void* p, size_t block_bytes) { slab().give(p, block_bytes); }

#endif

namespace {
constexpr size_t slab_bytes(size_t bytes) { return (bytes + 15) / 16 * 16; }
}  // namespace

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

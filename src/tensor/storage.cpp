#include <sys/mman.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <new>
#include <vector>

#include "kiln/tensor.hpp"
#include "tensor/block_pool.hpp"
#include "tensor/handles.hpp"
#include "tensor/page_slab.hpp"

namespace kiln {
namespace {

constexpr size_t kAlignment = 64;
// Freed blocks of at least kCacheMin bytes are kept (up to kCacheMax in all) and handed out again
// for the same size: a steady loop then reuses touched pages instead of faulting in fresh ones.
// When the cache is full, the sizes kept longest make room for the newest (a loop whose batch
// size changes keeps what it will use next). These blocks are whole pages mapped from the system
// and unmapped when they go: on the heap, blocks of ever new sizes left it fragmented, the process
// holding gigabytes that no allocation could use (1.4 GB after release_cached_memory()).
constexpr size_t kCacheMin = size_t{1} << 20;
static_assert(kCacheMin == BlockPool::kDataBytes, "a block is in the thread's pool or the shared cache, never in neither");
constexpr size_t kCacheMax = size_t{512} << 20;
constexpr size_t kPage = 4096;

// AddressSanitizer watches the heap, not mappings: its builds keep large blocks there.
#if defined(__SANITIZE_ADDRESS__)
void* map_block(size_t rounded) { return std::aligned_alloc(kPage, rounded); }
void unmap_block(void* p, size_t) { std::free(p); }
#else
void* map_block(size_t rounded) {
  void* p = mmap(nullptr, rounded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}
void unmap_block(void* p, size_t rounded) { munmap(p, rounded); }
#endif

// At most kCacheMax / kCacheMin blocks, in an array reserved once: keeping and taking a block
// allocate nothing.
struct BlockCache {
  struct Block {
    size_t bytes;
    void* data;
    uint64_t kept_at;  // the order blocks were kept in: the oldest goes first
  };
  std::mutex mutex;
  std::vector<Block> blocks;
  uint64_t next = 0;
  size_t bytes = 0;
  BlockCache() { blocks.reserve(kCacheMax / kCacheMin); }
  void* remove(size_t i) {
    void* data = blocks[i].data;
    bytes -= blocks[i].bytes;
    blocks[i] = blocks.back();
    blocks.pop_back();
    return data;
  }
};

// Never destroyed: storages released during static destruction may still return blocks to it, and
// the blocks it holds stay reachable (not leaks) until the process ends.
BlockCache& cache() {
  static BlockCache* c = new BlockCache;
  return *c;
}

void* take_cached(size_t rounded) {
  if (rounded < kCacheMin) return nullptr;
  BlockCache& c = cache();
  std::lock_guard lock(c.mutex);
  size_t newest = c.blocks.size();
  for (size_t i = 0; i < c.blocks.size(); ++i)
    if (c.blocks[i].bytes == rounded && (newest == c.blocks.size() || c.blocks[i].kept_at > c.blocks[newest].kept_at)) newest = i;
  return newest == c.blocks.size() ? nullptr : c.remove(newest);
}

bool keep_cached(void* p, size_t rounded) {
  if (rounded < kCacheMin || rounded > kCacheMax) return false;
  BlockCache& c = cache();
  std::lock_guard lock(c.mutex);
  while (c.bytes + rounded > kCacheMax) {  // the oldest go first
    size_t oldest = 0;
    for (size_t i = 1; i < c.blocks.size(); ++i)
      if (c.blocks[i].kept_at < c.blocks[oldest].kept_at) oldest = i;
    const size_t bytes = c.blocks[oldest].bytes;
    unmap_block(c.remove(oldest), bytes);
  }
  c.blocks.push_back({rounded, p, c.next++});
  c.bytes += rounded;
  return true;
}

// The bytes of the block that holds nbytes: a pool class for small tensors, whole cache lines
// for the rest.
size_t capacity(size_t nbytes) {
  if (nbytes < BlockPool::kDataBytes) return BlockPool::data_class(nbytes);
  if (nbytes >= kCacheMin) return (nbytes + kPage - 1) / kPage * kPage;
  return (nbytes + kAlignment - 1) / kAlignment * kAlignment;
}

void* take_system(size_t rounded) { return rounded >= kCacheMin ? map_block(rounded) : BlockPool::new_data(rounded); }
void give_back(void* p, size_t rounded) {
  if (rounded >= kCacheMin) unmap_block(p, rounded);
  else BlockPool::free_data(p, rounded);
}

struct Counters {
  std::atomic<int64_t> bytes_in_use{0};
  std::atomic<int64_t> peak_bytes{0};
  std::atomic<int64_t> n_allocations{0};
  std::atomic<int64_t> live_storages{0};
  std::atomic<int64_t> n_system_allocations{0};
};

Counters& counters() {
  static Counters c;
  return c;
}

void raise_peak(int64_t now) {
  auto& peak = counters().peak_bytes;
  int64_t seen = peak.load(std::memory_order_relaxed);
  while (now > seen && !peak.compare_exchange_weak(seen, now, std::memory_order_relaxed)) {
  }
}

}  // namespace

std::shared_ptr<Storage> Storage::allocate(size_t nbytes) {
  const size_t rounded = capacity(nbytes);
  void* p = rounded < BlockPool::kDataBytes ? BlockPool::take_data(rounded) : take_cached(rounded);
  if (!p) {
    p = take_system(rounded);
    if (!p) {  // the cached blocks may be what stands in the way
      release_cached_memory();
      p = take_system(rounded);
    }
    if (p) counters().n_system_allocations.fetch_add(1, std::memory_order_relaxed);
  }
  if (!p) {
    char gib[32];
    std::snprintf(gib, sizeof gib, "%.1f", static_cast<double>(nbytes) / double(1 << 30));
    throw MemoryError("out of memory: the system refused " + std::to_string(nbytes) + " bytes (" + gib + " GiB)");
  }
  std::shared_ptr<Storage> storage;
  try {
    storage = make(static_cast<std::byte*>(p), nbytes, true);
  } catch (...) {  // no object to own the block: it goes back
    give_back(p, rounded);
    throw;
  }
  auto& c = counters();  // counted once the storage exists: its destructor uncounts it
  raise_peak(c.bytes_in_use.fetch_add(static_cast<int64_t>(nbytes)) + static_cast<int64_t>(nbytes));
  c.n_allocations.fetch_add(1, std::memory_order_relaxed);
  c.live_storages.fetch_add(1, std::memory_order_relaxed);
  return storage;
}

std::shared_ptr<Storage> Storage::borrow(void* data, size_t nbytes) { return make(static_cast<std::byte*>(data), nbytes, false); }

std::shared_ptr<Storage> Storage::make(std::byte* data, size_t nbytes, bool owned) {
  // One block for the object and its reference count, from the pool (allocate_shared needs a
  // public constructor).
  struct Made : Storage {
    Made(std::byte* d, size_t n, bool o) : Storage(d, n, o) {}
  };
  return std::allocate_shared<Made>(PooledAllocator<Made>{}, data, nbytes, owned);
}

Storage::~Storage() {
  if (!owned_) return;
  const size_t rounded = capacity(nbytes_);
  const bool kept = rounded < BlockPool::kDataBytes ? BlockPool::keep_data(data_, rounded) : keep_cached(data_, rounded);
  if (!kept) give_back(data_, rounded);
  auto& c = counters();
  c.bytes_in_use.fetch_sub(static_cast<int64_t>(nbytes_), std::memory_order_relaxed);
  c.live_storages.fetch_sub(1, std::memory_order_relaxed);
}

AllocatorStats allocator_stats() {
  auto& c = counters();
  int64_t cached;
  {
    std::lock_guard lock(cache().mutex);
    cached = static_cast<int64_t>(cache().bytes);
  }
  return {c.bytes_in_use.load(), c.peak_bytes.load(),      c.n_allocations.load(),
          c.live_storages.load(), cached + BlockPool::kept_data_bytes(),
          c.n_system_allocations.load(), PageSlab::blocks_taken(), PageSlab::free_bytes()};
}

void release_cached_memory() {
  TensorHandles::release_kept();
  BlockPool::release_kept();
  PageSlab::release_free_chunks();
  BlockCache& c = cache();
  std::lock_guard lock(c.mutex);
  for (const BlockCache::Block& b : c.blocks) unmap_block(b.data, b.bytes);
  c.blocks.clear();
  c.bytes = 0;
}

void reset_peak_bytes() { counters().peak_bytes.store(counters().bytes_in_use.load()); }

}  // namespace kiln

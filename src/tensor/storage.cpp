#include <atomic>
#include <cstdlib>
#include <new>

#include "kiln/tensor.hpp"

namespace kiln {
namespace {

constexpr size_t kAlignment = 64;

struct Counters {
  std::atomic<int64_t> bytes_in_use{0};
  std::atomic<int64_t> peak_bytes{0};
  std::atomic<int64_t> n_allocations{0};
  std::atomic<int64_t> live_storages{0};
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
  size_t rounded = (nbytes + kAlignment - 1) / kAlignment * kAlignment;
  if (rounded == 0) rounded = kAlignment;
  void* p = std::aligned_alloc(kAlignment, rounded);
  if (!p) throw std::bad_alloc();
  auto& c = counters();
  raise_peak(c.bytes_in_use.fetch_add(static_cast<int64_t>(nbytes)) + static_cast<int64_t>(nbytes));
  c.n_allocations.fetch_add(1, std::memory_order_relaxed);
  c.live_storages.fetch_add(1, std::memory_order_relaxed);
  return std::shared_ptr<Storage>(new Storage(static_cast<std::byte*>(p), nbytes, true));
}

std::shared_ptr<Storage> Storage::borrow(void* data, size_t nbytes) {
  return std::shared_ptr<Storage>(new Storage(static_cast<std::byte*>(data), nbytes, false));
}

Storage::~Storage() {
  if (!owned_) return;
  std::free(data_);
  auto& c = counters();
  c.bytes_in_use.fetch_sub(static_cast<int64_t>(nbytes_), std::memory_order_relaxed);
  c.live_storages.fetch_sub(1, std::memory_order_relaxed);
}

AllocatorStats allocator_stats() {
  auto& c = counters();
  return {c.bytes_in_use.load(), c.peak_bytes.load(), c.n_allocations.load(), c.live_storages.load()};
}

void reset_peak_bytes() { counters().peak_bytes.store(counters().bytes_in_use.load()); }

}  // namespace kiln

#pragma once
// Include in exactly one source file of an executable: every form of operator new is replaced, so
// that each call is counted (in operator_new_calls, on every thread; allocations_so_far() adds
// kiln's slab blocks) and each delete frees what its new allocated (sanitizers check the pairs).
// Used by tests/steady_call_test.cpp, tests/conv_test.cpp and bench/eager_kiln.cpp.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <new>

#include <kiln/tensor.hpp>

namespace {
std::atomic<int64_t> operator_new_calls{0};
void* counted(size_t n, size_t alignment = 0) noexcept {
  operator_new_calls.fetch_add(1, std::memory_order_relaxed);
  if (alignment == 0) return std::malloc(n ? n : 1);
  return std::aligned_alloc(alignment, (std::max<size_t>(n, 1) + alignment - 1) / alignment * alignment);
}
void* counted_or_throw(size_t n, size_t alignment = 0) {
  if (void* p = counted(n, alignment)) return p;
  throw std::bad_alloc();
}
// The allocations so far: operator new calls and the blocks kiln took from its slab of small
// objects, which operator new does not see.
// allocator_stats() first: what its first call sets up is not counted after the count was read.
[[maybe_unused]] int64_t allocations_so_far() {
  const int64_t slab_blocks = kiln::allocator_stats().n_slab_blocks;
  return operator_new_calls.load() + slab_blocks;
}
}  // namespace

void* operator new(size_t n) { return counted_or_throw(n); }
void* operator new[](size_t n) { return counted_or_throw(n); }
void* operator new(size_t n, const std::nothrow_t&) noexcept { return counted(n); }
void* operator new[](size_t n, const std::nothrow_t&) noexcept { return counted(n); }
void* operator new(size_t n, std::align_val_t a) { return counted_or_throw(n, static_cast<size_t>(a)); }
void* operator new[](size_t n, std::align_val_t a) { return counted_or_throw(n, static_cast<size_t>(a)); }
void* operator new(size_t n, std::align_val_t a, const std::nothrow_t&) noexcept { return counted(n, static_cast<size_t>(a)); }
void* operator new[](size_t n, std::align_val_t a, const std::nothrow_t&) noexcept { return counted(n, static_cast<size_t>(a)); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }

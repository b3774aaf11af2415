// malloc and its relatives, forwarding to glibc's own and counting usable bytes. Defined in the
// executable (exported with ENABLE_EXPORTS), they take the place of libc's for every shared
// library the process loads.
#include "heap_counter.hpp"

#include <malloc.h>

#include <atomic>
#include <cerrno>
#include <cstddef>

extern "C" {
void* __libc_malloc(size_t);
void* __libc_calloc(size_t, size_t);
void* __libc_realloc(void*, size_t);
void* __libc_memalign(size_t, size_t);
void* __libc_valloc(size_t);
void* __libc_pvalloc(size_t);
void __libc_free(void*);
}

namespace {

std::atomic<int64_t> in_use{0}, peak{0};

void* counted(void* p) {
  if (!p) return p;
  const int64_t now = in_use.fetch_add(static_cast<int64_t>(malloc_usable_size(p))) + static_cast<int64_t>(malloc_usable_size(p));
  int64_t seen = peak.load();
  while (now > seen && !peak.compare_exchange_weak(seen, now)) {
  }
  return p;
}

void uncount(void* p) {
  if (p) in_use.fetch_sub(static_cast<int64_t>(malloc_usable_size(p)));
}

}  // namespace

namespace bench {

int64_t heap_bytes_in_use() { return in_use.load(); }
int64_t heap_peak_bytes() { return peak.load(); }
void reset_heap_peak() { peak.store(in_use.load()); }

}  // namespace bench

extern "C" {

void* malloc(size_t n) { return counted(__libc_malloc(n)); }
void* calloc(size_t n, size_t size) { return counted(__libc_calloc(n, size)); }
void* memalign(size_t alignment, size_t n) { return counted(__libc_memalign(alignment, n)); }
void* aligned_alloc(size_t alignment, size_t n) { return counted(__libc_memalign(alignment, n)); }
void* valloc(size_t n) { return counted(__libc_valloc(n)); }
void* pvalloc(size_t n) { return counted(__libc_pvalloc(n)); }
void free(void* p) {
  uncount(p);
  __libc_free(p);
}
void* realloc(void* p, size_t n) {
  const int64_t old = p ? static_cast<int64_t>(malloc_usable_size(p)) : 0;
  void* q = __libc_realloc(p, n);
  if (!q && n) return nullptr;  // p is untouched and still counted
  in_use.fetch_sub(old);
  return counted(q);
}
int posix_memalign(void** out, size_t alignment, size_t n) {
  void* p = __libc_memalign(alignment, n);
  if (!p) return ENOMEM;
  *out = counted(p);
  return 0;
}

}  // extern "C"

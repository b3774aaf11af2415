// malloc and its relatives, forwarding to glibc's own and counting usable bytes; and mmap and
// munmap, counting the anonymous mappings kiln makes (its tensor blocks of 1 MiB and more, the
// chunks of its slab of small blocks): kiln's memory that no longer comes from malloc. Other
// libraries' own mappings (OpenBLAS's buffers, on both sides) are left out as before, and malloc's
// mappings are made inside glibc and counted as malloc's. Defined in the executable (exported with
// ENABLE_EXPORTS), they take the place of libc's for every shared library the process loads.
#include "heap_counter.hpp"

#include <dlfcn.h>
#include <malloc.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <mutex>

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

void add(int64_t bytes) {
  const int64_t now = in_use.fetch_add(bytes) + bytes;
  int64_t seen = peak.load();
  while (now > seen && !peak.compare_exchange_weak(seen, now)) {
  }
}

void* counted(void* p) {
  if (p) add(static_cast<int64_t>(malloc_usable_size(p)));
  return p;
}

void uncount(void* p) {
  if (p) in_use.fetch_sub(static_cast<int64_t>(malloc_usable_size(p)));
}

size_t whole_pages(size_t len) { return (len + 4095) / 4096 * 4096; }

// The anonymous mappings counted, as address ranges in a fixed table (no allocation while
// counting): munmap subtracts the part of a range it unmaps and keeps the rest, so that a mapping
// trimmed to an aligned part is counted as what remains.
struct Mappings {
  static constexpr int kMax = 1 << 14;
  struct Range {
    uintptr_t begin = 0, end = 0;
  };
  std::mutex mutex;
  Range ranges[kMax];
  int n = 0;
  void add_range(uintptr_t begin, uintptr_t end) {
    if (n == kMax) return;  // not counted: more mappings than any benchmark makes
    ranges[n++] = {begin, end};
    add(static_cast<int64_t>(end - begin));
  }
  void map(void* p, size_t len) {
    const std::lock_guard lock(mutex);
    add_range(reinterpret_cast<uintptr_t>(p), reinterpret_cast<uintptr_t>(p) + len);
  }
  void unmap(void* p, size_t len) {
    const std::lock_guard lock(mutex);
    const uintptr_t begin = reinterpret_cast<uintptr_t>(p), end = begin + whole_pages(len);
    for (int i = 0; i < n;) {
      const Range r = ranges[i];
      if (r.end <= begin || end <= r.begin) {
        ++i;
        continue;
      }
      in_use.fetch_sub(static_cast<int64_t>(std::min(r.end, end) - std::max(r.begin, begin)));
      ranges[i] = ranges[--n];
      if (r.begin < begin) ranges[n++] = {r.begin, begin};
      if (end < r.end) ranges[n++] = {end, r.end};
    }
  }
};
Mappings& mappings() {
  static Mappings m;
  return m;
}

bool called_from_kiln(void* return_address) {
  Dl_info info;
  return dladdr(return_address, &info) && info.dli_fname && std::strstr(info.dli_fname, "libkiln");
}

using MmapFn = void* (*)(void*, size_t, int, int, int, off_t);
using MunmapFn = int (*)(void*, size_t);
MmapFn libc_mmap() {
  static const auto f = reinterpret_cast<MmapFn>(dlsym(RTLD_NEXT, "mmap"));
  return f;
}
MunmapFn libc_munmap() {
  static const auto f = reinterpret_cast<MunmapFn>(dlsym(RTLD_NEXT, "munmap"));
  return f;
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

void* mmap(void* addr, size_t len, int prot, int flags, int fd, off_t offset) {
  void* p = libc_mmap()(addr, len, prot, flags, fd, offset);
  if (p != MAP_FAILED && (flags & MAP_ANONYMOUS) && called_from_kiln(__builtin_return_address(0)))
    mappings().map(p, whole_pages(len));
  return p;
}
int munmap(void* addr, size_t len) {
  const int result = libc_munmap()(addr, len);
  if (result == 0) mappings().unmap(addr, len);
  return result;
}

}  // extern "C"

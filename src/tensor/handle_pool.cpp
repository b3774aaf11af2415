#include <new>

#include "tensor/handles.hpp"
#include "tensor/tensor_book.hpp"

namespace kiln {
namespace {

using Impl = TensorBook::Impl;

// Released handles and the small blocks of their reference counts, kept per thread and handed
// out again, so that a loop making a tensor per step does not go to the heap for its handle.
constexpr size_t kKeptPerList = 4096;
constexpr size_t kBlockSizes = 8;  // blocks of 16, 32, ..., 128 bytes

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
  bool give(void* p) {
    if (size == kKeptPerList) return false;
    head = new (p) Link{head};
    ++size;
    return true;
  }
};

enum class PoolState : uint8_t { unmade, alive, gone };
thread_local PoolState pool_state = PoolState::unmade;  // readable while the pool is destroyed

// Free handles are kept constructed, linked through live_next (a free handle is not live), so
// that their shape and strides keep their memory for the next tensor.
struct HandleList {
  Impl* head = nullptr;
  size_t size = 0;
};

struct Pool {
  FreeList blocks[kBlockSizes];
  HandleList handles;
  Pool() { pool_state = PoolState::alive; }
  ~Pool() {
    pool_state = PoolState::gone;
    for (FreeList& list : blocks)
      while (void* p = list.take()) ::operator delete(p);
    while (Impl* m = handles.head) {
      handles.head = m->live_next;
      delete m;
    }
  }
};

Pool* this_pool() {
  if (pool_state == PoolState::gone) return nullptr;
  thread_local Pool pool;
  return &pool;
}

size_t block_class(size_t bytes) { return (bytes + 15) / 16 - 1; }

template <class T> struct PooledAllocator {
  using value_type = T;
  PooledAllocator() = default;
  template <class U> PooledAllocator(const PooledAllocator<U>&) {}  // NOLINT: rebinding
  T* allocate(size_t n) {
    const size_t bytes = n * sizeof(T);
    if (Pool* pool = this_pool(); pool && block_class(bytes) < kBlockSizes)
      if (void* p = pool->blocks[block_class(bytes)].take()) return static_cast<T*>(p);
    return static_cast<T*>(::operator new(bytes < 16 ? 16 : (bytes + 15) / 16 * 16));
  }
  void deallocate(T* p, size_t n) {
    const size_t bytes = n * sizeof(T);
    if (Pool* pool = this_pool(); pool && block_class(bytes) < kBlockSizes && pool->blocks[block_class(bytes)].give(p))
      return;
    ::operator delete(p);
  }
  template <class U> bool operator==(const PooledAllocator<U>&) const { return true; }
};

struct ReturnHandle {
  void operator()(Impl* m) const {
    if (m->counted) {
      TensorBook::gone(*m);
      m->counted = false;
    }
    Pool* pool = this_pool();
    if (!pool || pool->handles.size == kKeptPerList) {
      delete m;
      return;
    }
    m->storage.reset();
    m->shape.clear();
    m->strides.clear();
    m->offset = 0;
    m->disposed = m->counted = m->disposed_by_scope = false;
    m->scope = nullptr;
    m->live_prev = nullptr;
    m->live_next = pool->handles.head;
    pool->handles.head = m;
    ++pool->handles.size;
  }
};

}  // namespace

std::shared_ptr<Impl> TensorHandles::fresh() {
  Impl* m = nullptr;
  if (Pool* pool = this_pool(); pool && pool->handles.head) {
    m = pool->handles.head;
    pool->handles.head = m->live_next;
    m->live_next = nullptr;
    --pool->handles.size;
  } else {
    m = new Impl();
  }
  return std::shared_ptr<Impl>(m, ReturnHandle{}, PooledAllocator<Impl>{});
}

}  // namespace kiln

#include <new>

#include "tensor/block_pool.hpp"
#include "tensor/handles.hpp"
#include "tensor/page_slab.hpp"
#include "tensor/per_thread.hpp"
#include "tensor/tensor_book.hpp"

namespace kiln {
namespace {

using Impl = TensorBook::Impl;

// Released handles, kept per thread and handed out again (their reference counts' blocks come from
// the BlockPool), so that a loop making a tensor per step does not go to the heap for its handle.
constexpr size_t kKeptHandles = 4096;
constexpr size_t kDimsReserved = 6;

// Free handles are kept constructed, linked through live_next (a free handle is not live), so
// that their shape and strides keep their memory for the next tensor.
struct HandleList {
  Impl* head = nullptr;
  size_t size = 0;
};

// Handles come from the PageSlab, so that a program's handles lie together.
static_assert(sizeof(Impl) <= PageSlab::kMaxBytes && alignof(Impl) <= 16);

Impl* new_handle() { return new (PageSlab::allocate(sizeof(Impl))) Impl(); }

void delete_handle(Impl* m) {
  m->~Impl();
  PageSlab::deallocate(m, sizeof(Impl));
}

struct Pool {
  HandleList handles;
  ~Pool() { release(); }
  void release() {
    while (Impl* m = handles.head) {
      handles.head = m->live_next;
      delete_handle(m);
    }
    handles.size = 0;
  }
};

Pool* this_pool() { return PerThread<Pool>::get(); }

struct ReturnHandle {
  void operator()(Impl* m) const {
    if (m->counted) {
      TensorBook::gone(*m);
      m->counted = false;
    }
    Pool* pool = this_pool();
    if (!pool || pool->handles.size == kKeptHandles) {
      delete_handle(m);
      return;
    }
    m->storage.reset();
    m->shape.clear();
    m->strides.clear();
    m->offset = 0;
    m->disposed = m->counted = false;
    m->disposed_by = nullptr;
    m->scope = nullptr;
    m->live_prev = nullptr;
    m->live_next = pool->handles.head;
    pool->handles.head = m;
    ++pool->handles.size;
  }
};

}  // namespace

void TensorHandles::release_kept() {
  if (Pool* pool = this_pool()) pool->release();
}

std::shared_ptr<Impl> TensorHandles::fresh() {
  Impl* m = nullptr;
  if (Pool* pool = this_pool(); pool && pool->handles.head) {
    m = pool->handles.head;
    pool->handles.head = m->live_next;
    m->live_next = nullptr;
    --pool->handles.size;
  } else {
    m = new_handle();
    // Room for the shapes seen in practice, so that a recycled handle never regrows for them.
    m->shape.reserve(kDimsReserved);
    m->strides.reserve(kDimsReserved);
  }
  return std::shared_ptr<Impl>(m, ReturnHandle{}, PooledAllocator<Impl>{});
}

}  // namespace kiln

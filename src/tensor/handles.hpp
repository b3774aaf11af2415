#pragma once
#include <memory>
#include <span>

#include "kiln/tensor.hpp"

namespace kiln {

// What kiln's run loop does with the tensor handles of its slots so that a steady call allocates
// nothing: a handle nobody else shares is re-viewed in place (its shape and strides reuse their
// memory), and between uses it is parked, holding no storage.
struct TensorHandles {
  // Storage for a compiled function's kept arena (Storage::rewritten_by_calls).
  static std::shared_ptr<Storage> kept_arena(size_t nbytes) {
    std::shared_ptr<Storage> arena = Storage::allocate(nbytes);
    arena->rewritten_by_calls_ = true;
    return arena;
  }
  // A new handle (no storage, empty shape), taken from this thread's released ones when it can.
  static std::shared_ptr<Tensor::Impl> fresh();
  // A tensor on storage made for the user at loc (counted, put in a scope): as Tensor::view_of,
  // with shape and strides copied into a released handle's memory.
  static Tensor make(std::shared_ptr<Storage> storage, DType dtype, std::span<const int64_t> shape,
                     std::span<const int64_t> strides, int64_t offset, Loc loc);
  // t becomes a view of storage with this geometry: in place when t is the only handle on its
  // tensor, else as a new tensor.
  static void reseat(Tensor& t, const std::shared_ptr<Storage>& storage, DType dtype, std::span<const int64_t> shape,
                     std::span<const int64_t> strides, int64_t offset);
  // Releases t's storage and keeps the handle for reseat when t is the only handle on its tensor
  // (it then reads as disposed); returns false, leaving t alone, otherwise.
  static bool park(Tensor& t);
  // Frees the handles this thread keeps for reuse (release_cached_memory()).
  static void release_kept();
  // t, a view nobody else holds, moved to another offset of the same storage (a loop stepping
  // through rows): no shape or storage is touched. The caller keeps the offset within the storage.
  static void move(Tensor& t, int64_t offset);
  // Asks the cache for what running a node reads of t, in two steps a few nodes apart (the second
  // reads the handle the first fetched): a large program's handles, shapes and storages are
  // scattered through memory, and waiting for each in turn made a steady call's cost per node grow
  // with the graph.
  static void prefetch_handle(const Tensor& t) {
    if (t.impl_) __builtin_prefetch(t.impl_.get());
  }
  static void prefetch_geometry(const Tensor& t) {
    if (const Tensor::Impl* impl = t.impl_.get()) {
      __builtin_prefetch(impl->shape.data());
      __builtin_prefetch(impl->strides.data());
      __builtin_prefetch(impl->storage.get());
    }
  }
};

}  // namespace kiln

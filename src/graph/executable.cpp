#include "graph/executable.hpp"

#include <algorithm>
#include <mutex>

#include "graph/op.hpp"
#include "tensor/handles.hpp"
#include "tensor/page_slab.hpp"
#include "tensor/same_dims.hpp"

namespace kiln {

void* Executable::operator new(size_t bytes) { return PageSlab::allocate(bytes); }
void Executable::operator delete(void* p, size_t bytes) { PageSlab::deallocate(p, bytes); }

std::vector<Shape> Executable::infer_shapes(const Node& node, const std::vector<Shape>& inputs,
                                            const std::vector<const Tensor*>& values) const {
  return node.op->infer_shapes(inputs, values);
}

void set_view(Tensor& out, const Tensor& base, std::span<const int64_t> shape, std::span<const int64_t> strides,
              int64_t offset) {
  if (out.defined() && !out.is_disposed() && out.same_storage(base) && out.dtype() == base.dtype() &&
      out.offset() == offset && same_dims(out.shape(), shape) && same_dims(out.strides(), strides))
    return;
  TensorHandles::reseat(out, base.storage(), base.dtype(), shape, strides, offset);
}

void KernelTable::set(std::type_index op_class, Make make) {
  std::unique_lock lock(mutex_);
  makers_[op_class] = std::move(make);
}

std::unique_ptr<Executable> KernelTable::make(const Node& node, const MakeContext& context) const {
  Make make;
  {
    std::shared_lock lock(mutex_);
    auto it = makers_.find(std::type_index(typeid(*node.op)));
    if (it == makers_.end())
      throw Error(node.op->name() + " (" + node.origin() + ") has no kernel on this backend");
    make = it->second;
  }
  return make(node, context);
}

}  // namespace kiln

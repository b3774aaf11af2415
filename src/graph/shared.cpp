#include <algorithm>
#include <mutex>

#include "graph/node.hpp"
#include "tensor/convert.hpp"
#include "tensor/tensor_book.hpp"

namespace kiln {
namespace {

// Every live shared variable, so that a borrowed buffer is never aliased by two of them.
struct Registry {
  std::mutex mutex;
  std::vector<std::weak_ptr<SharedContainer>> all;
};
Registry& registry() {
  static Registry r;
  return r;
}

void register_container(const std::shared_ptr<SharedContainer>& c) {
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  std::erase_if(r.all, [](const auto& w) { return w.expired(); });
  r.all.push_back(c);
}

SharedContainer& container_of(const Var& v) {
  if (!v.defined() || !v.get()->shared) throw TypeError("Shared: this handle is not a shared variable");
  return *v.get()->shared;
}

Tensor checked_value(const Variable& var, const Tensor& value, const char* who) {
  const std::string what = std::string(who) + " of shared variable '" + var.label() + "' " + var.type.str();
  if (value.ndim() != var.type.ndim())
    throw TypeError(what + ": got a value with " + std::to_string(value.ndim()) + " dimensions " + value.str() +
                    ", expected " + std::to_string(var.type.ndim()));
  for (int64_t d = 0; d < value.ndim(); ++d)
    if (var.type.broadcastable[d] && value.shape()[d] != 1)
      throw ShapeError(what + ": dimension " + std::to_string(d) + " is broadcastable and must be 1, got " +
                       value.str());
  return convert_lossless(value, var.type.dtype, what);
}

}  // namespace

bool aliases_another_shared(const SharedContainer* self, const Tensor& value) {
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  for (const auto& w : r.all) {
    auto c = w.lock();
    if (!c || c.get() == self) continue;
    const Tensor other = c->load();
    if (other.defined() && other.shares_memory(value)) return true;
  }
  return false;
}

namespace {

// A variable keeps the buffer it is given with borrow unless that buffer is another variable's,
// or memory a compiled function writes on every call (a borrowed output of a function with
// kept buffers), which would change the variable's value behind its back.
bool borrowable(const SharedContainer* self, const Tensor& value, bool borrow) {
  return borrow && !value.storage()->rewritten_by_calls() && !aliases_another_shared(self, value);
}

}  // namespace

Shared shared(const Tensor& value, std::string name, SharedOptions options) {
  const InternalTensors internal;
  auto v = std::make_shared<Variable>();
  v->type = Type{value.dtype(), std::vector<bool>(value.ndim(), false)};
  v->name = std::move(name);
  v->shared = std::make_shared<SharedContainer>();
  v->shared->store(borrowable(nullptr, value, options.borrow) ? value.alias() : value.clone());
  register_container(v->shared);
  return Shared(std::move(v));
}

Tensor Shared::get_value(GetValueOptions options, Loc loc) const {
  Tensor value;
  {
    const InternalTensors internal;
    const Tensor kept = container_of(*this).load();
    value = options.borrow ? kept : kept.clone();
  }
  return TensorBook::handed_over(std::move(value), loc);
}

void Shared::set_value(const Tensor& value, SetValueOptions options) {
  const InternalTensors internal;
  SharedContainer& c = container_of(*this);
  Tensor checked = checked_value(*get(), value, "set_value");
  const bool converted = !checked.same_storage(value);
  if (converted) {
    c.store(checked);
  } else {
    c.store(borrowable(&c, value, options.borrow) ? value.alias() : value.clone());
  }
}

}  // namespace kiln

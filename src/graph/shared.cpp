#include <algorithm>
#include <mutex>
#include <optional>

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
  auto v = std::allocate_shared<Variable>(SlabAllocator<Variable>{});
  v->type = Type{value.dtype(), std::vector<bool>(value.ndim(), false)};
  v->name = std::move(name);
  v->shared = std::make_shared<SharedContainer>();
  v->shared->store(borrowable(nullptr, value, options.borrow) ? value.alias() : value.clone());
  register_container(v->shared);
  return Shared(std::move(v));
}

namespace {

// The variables' containers once each, in the one global order of holds (by address), with where
// each variable's container is in that list.
std::vector<SharedContainer*> in_hold_order(const std::vector<Shared>& variables, std::vector<size_t>& position) {
  std::vector<SharedContainer*> containers;
  for (const Shared& v : variables) containers.push_back(&container_of(v));
  std::vector<SharedContainer*> order = containers;
  std::sort(order.begin(), order.end(), std::less<>());
  order.erase(std::unique(order.begin(), order.end()), order.end());
  position.clear();
  for (SharedContainer* c : containers) position.push_back(static_cast<size_t>(std::lower_bound(order.begin(), order.end(), c, std::less<>()) - order.begin()));
  return order;
}

// What set_value stores: value converted and checked, its buffer kept with borrow when it may be.
Tensor value_to_store(const Shared& variable, const Tensor& value, bool borrow) {
  const SharedContainer& c = container_of(variable);
  Tensor checked = checked_value(*variable.get(), value, "set_value");
  if (!checked.same_storage(value)) return checked;
  return borrowable(&c, value, borrow) ? value.alias() : value.clone();
}

}  // namespace

std::vector<Tensor> get_values_together(const std::vector<Shared>& variables, GetValueOptions options) {
  std::vector<size_t> position;
  const std::vector<SharedContainer*> order = in_hold_order(variables, position);
  std::vector<Tensor> held(order.size());
  {
    std::vector<std::optional<SharedContainer::Read>> reads(order.size());
    for (size_t i = 0; i < order.size(); ++i) held[i] = reads[i].emplace(*order[i]).value();
  }
  // A call overwrites a variable's buffer in place only when no other handle refers to it: the
  // handles held here keep these values as they were while they are copied.
  std::vector<Tensor> values;
  for (size_t i = 0; i < variables.size(); ++i) values.push_back(options.borrow ? held[position[i]] : held[position[i]].clone());
  return values;
}

void set_values_together(const std::vector<Shared>& variables, const std::vector<Tensor>& values, SetValueOptions options) {
  if (values.size() != variables.size())
    throw TypeError("set_values_together: " + std::to_string(values.size()) + " values for " + std::to_string(variables.size()) +
                    " variables");
  std::vector<Tensor> stored;
  for (size_t i = 0; i < variables.size(); ++i) stored.push_back(value_to_store(variables[i], values[i], options.borrow));
  std::vector<size_t> position;
  const std::vector<SharedContainer*> order = in_hold_order(variables, position);
  std::vector<std::optional<SharedContainer::Hold>> holds(order.size());
  for (size_t i = 0; i < order.size(); ++i) holds[i].emplace(*order[i]);
  for (size_t i = 0; i < variables.size(); ++i) holds[position[i]]->store(std::move(stored[i]));
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
  container_of(*this).store(value_to_store(*this, value, options.borrow));
}

}  // namespace kiln

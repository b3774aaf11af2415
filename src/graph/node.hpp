#pragma once
#include <atomic>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <optional>
#include <source_location>
#include <string>
#include <vector>

#include "kiln/graph.hpp"
#include "tensor/loc.hpp"
#include "tensor/page_slab.hpp"

namespace kiln {

class Op;

// The value of a shared variable, kiln's memory space. Never aliased to another shared variable.
// Loads and stores are synchronized, so functions may run on several threads at once.
class SharedContainer {
 public:
  Tensor load() const {
    std::shared_lock lock(mutex_);
    return value_;
  }
  void store(Tensor value) {
    std::unique_lock lock(mutex_);
    value_ = std::move(value);
  }

  // Exclusive access for the whole of a call that may overwrite the buffer in place: nobody can
  // load the value meanwhile, so nobody can read it while it changes. Calls take their holds in
  // one global order (by address), which rules out deadlock.
  class Hold {
   public:
    explicit Hold(SharedContainer& c) : container_(&c), lock_(c.mutex_) {}
    const Tensor& value() const { return container_->value_; }
    // No handle but the variable's own refers to its buffer (no call reading it, no borrowed
    // get_value, no other view): overwriting it in place is invisible to everyone.
    bool sole_owner() const { return value().is_sole_reference(); }
    void store(Tensor value) { container_->value_ = std::move(value); }

   private:
    SharedContainer* container_;
    std::unique_lock<std::shared_mutex> lock_;
  };
  // Shared access while a call takes its holds on the others, so that what it reads of several
  // variables is their values at one moment, never one from before another call's updates and
  // one from after.
  class Read {
   public:
    explicit Read(const SharedContainer& c) : container_(&c), lock_(c.mutex_) {}
    const Tensor& value() const { return container_->value_; }

   private:
    const SharedContainer* container_;
    std::shared_lock<std::shared_mutex> lock_;
  };

 private:
  mutable std::shared_mutex mutex_;
  Tensor value_;
};

// True when value overlaps the buffer of a shared variable other than self.
bool aliases_another_shared(const SharedContainer* self, const Tensor& value);

// The values of several variables at one moment (as a call reads them), and new values stored
// at one moment (a call sees all of them or none): the parts of a sparse variable, a checkpoint.
std::vector<Tensor> get_values_together(const std::vector<Shared>& variables, GetValueOptions options);
void set_values_together(const std::vector<Shared>& variables, const std::vector<Tensor>& values, SetValueOptions options);

class Variable {
 public:
  // From the PageSlab: passes over a graph read its variables one after another.
  static void* operator new(size_t bytes) { return PageSlab::allocate(bytes); }
  static void operator delete(void* p, size_t bytes) { PageSlab::deallocate(p, bytes); }
  Type type;
  std::string name;
  Node* owner = nullptr;  // the node that computes it; null for inputs, constants, shared variables
  int index = 0;          // which output of owner
  std::optional<Tensor> constant;
  bool weak = false;  // a bare number: adopts the dtype of what it is combined with (NumPy rule)
  std::shared_ptr<SharedContainer> shared;
  uint64_t id = next_id();

  bool is_constant() const { return constant.has_value(); }
  bool is_shared() const { return shared != nullptr; }
  bool is_input() const { return !owner && !constant && !shared; }
  std::string label() const;  // name, or a generated one
  // The ids given so far: a variable made after this call has a larger id.
  static uint64_t ids_given() { return counter().load(); }

 private:
  static std::atomic<uint64_t>& counter() {
    static std::atomic<uint64_t> ids{0};
    return ids;
  }
  static uint64_t next_id() { return ++counter(); }
};

// How a node came to be: built by the user's code, or derived by kiln from the user's node at the
// same source line (part of its gradient, or of a rewrite's replacement of it).
enum class Derivation : uint8_t { built, gradient, rewrite };

class Node : public std::enable_shared_from_this<Node> {
 public:
  Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;
  ~Node();  // iterative: a chain of 100k nodes must not recurse once per node
  std::shared_ptr<const Op> op;
  std::vector<Var> inputs;
  std::vector<std::unique_ptr<Variable>> outputs;
  std::source_location loc;  // the user's line that built it, or that built the node it derives from
  Derivation derivation = Derivation::built;
  // The last walk of a compiled function's own graph that reached it (topological_order_of_own):
  // a walk marks nodes instead of hashing them.
  mutable uint64_t walk_mark = 0;
  // Its place in the order a pass over a compiled function's own graph is working through, so
  // that the pass indexes arrays instead of hashing nodes; each pass sets it for its own nodes.
  mutable int32_t position = -1;
  // The version of its FunctionGraph when it last changed (it was added, an input was replaced,
  // or one of its values got or lost readers): the rewrite engine revisits only changed nodes.
  mutable uint64_t changed_at = 0;

  Var output(size_t i) const;  // a Var that keeps this node alive
  std::string where() const;   // "file:line", with "(gradient)" or "(rewritten)" for derived nodes
  std::string origin() const;  // "built at file:line", "in the gradient of the node built at file:line", ...
};

// While one lives, every node built on this thread is derived from `from`: it takes its source
// line and is marked as part of its gradient or of a rewrite of it (a rewrite of a gradient node
// stays part of the gradient). Scopes nest.
class DerivedFrom {
 public:
  DerivedFrom(const Node& from, Derivation how);
  ~DerivedFrom();
  DerivedFrom(const DerivedFrom&) = delete;
  DerivedFrom& operator=(const DerivedFrom&) = delete;

 private:
  const DerivedFrom* outer_;
  std::source_location loc_;
  Derivation how_;
  friend std::vector<Var> apply(std::shared_ptr<const Op>, std::vector<Var>, const std::source_location&);
};

// Builds a node applying op to inputs, inferring the output types; type errors name op and line.
std::vector<Var> apply(std::shared_ptr<const Op> op, std::vector<Var> inputs, const std::source_location& loc);
Var apply1(std::shared_ptr<const Op> op, std::vector<Var> inputs, const std::source_location& loc);

std::string types_str(const std::vector<Var>& vars);

}  // namespace kiln

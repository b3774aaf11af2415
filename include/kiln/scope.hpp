#pragma once
#include <memory>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kiln/tensor.hpp"

namespace kiln {

// Dispose scopes: the TorchSharp memory model (docs/eager.md). Each thread has a stack of scopes;
// every tensor made for the user on that thread while a scope lives (by Tensor's factories and
// methods, eager operations, Function calls, get_value) is registered in the innermost one and
// disposed when it ends, also when it ends by an exception. A scope belongs to its thread: end it
// there, and move or detach its tensors there (detach a tensor before another thread keeps it).
struct ScopeStatistics {
  int64_t created = 0;
  int64_t disposed = 0;  // by dispose(), by a scope, or as its last handle went away
  int64_t live = 0;
};

class DisposeScope {
 public:
  explicit DisposeScope(Loc loc = Loc::current());
  // Ends the scope unless end() did. Scopes opened inside it and still open end first.
  ~DisposeScope();
  DisposeScope(const DisposeScope&) = delete;
  DisposeScope& operator=(const DisposeScope&) = delete;

  // Disposes every tensor still registered here and closes the scope. An error (and nothing
  // changes) when it has ended already, when a scope opened inside it is still open, or on
  // another thread.
  void end();
  // Disposes what is registered so far; the scope stays open. A disposed tensor's error names loc.
  void dispose_everything(Loc loc = Loc::current());
  void dispose_everything_but(const std::vector<Tensor>& keep, Loc loc = Loc::current());  // the kept stay registered here
  // The tensors registered in this scope; after end(), as they were when it ended.
  ScopeStatistics statistics() const;
  bool ended() const;

 private:
  void* frame_;
  std::shared_ptr<void> frame_owner_;  // keeps frame_ alive should this scope outlive its thread
  uint64_t generation_ = 0;
  Loc loc_;
  ScopeStatistics at_end_;
};

// expr() run in a scope of its own: its temporaries are disposed, its result moved out. A result
// made before the call (expr returning a tensor of the caller's scope) is moved one scope further
// out, as in TorchSharp: return t.alias() to keep it where it was.
template <class Expr> Tensor wrapped_dispose_scope(Expr&& expr, Loc loc = Loc::current()) {
  DisposeScope scope(loc);
  Tensor result = std::forward<Expr>(expr)();
  return result.move_to_outer_scope();
}

enum class Threads { this_one, all };
// Tensors made for the user, disposed, and live (on this thread, or in the whole process).
ScopeStatistics scope_statistics(Threads threads = Threads::this_one);
// Each live tensor made for the user, grouped by the line that made it: the first thing to read
// when the live count grows.
std::string live_tensor_report();

}  // namespace kiln

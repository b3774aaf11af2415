#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <string_view>

#include "kiln/scope.hpp"
#include "tensor/per_thread.hpp"
#include "tensor/tensor_book.hpp"

namespace kiln {

std::string loc_str(const Loc& loc) {
  std::string file = loc.file_name();
  if (const size_t slash = file.find_last_of('/'); slash != std::string::npos) file = file.substr(slash + 1);
  return file + ":" + std::to_string(loc.line());
}

namespace {

using Impl = TensorBook::Impl;
using ImplPtr = std::shared_ptr<Impl>;

struct Counts {
  std::atomic<int64_t> created{0}, disposed{0};
  ScopeStatistics read() const {
    const int64_t c = created.load(std::memory_order_relaxed), d = disposed.load(std::memory_order_relaxed);
    return {c, d, c - d};
  }
};

struct ScopeStack;

// One level of a thread's stack of scopes; kept and reused by the next scope at that depth, so
// that a scope per loop iteration allocates nothing once its list has grown.
struct Frame {
  std::vector<ImplPtr> members;
  Counts counts;
  Loc loc{};
  size_t depth = 0;
  uint64_t generation = 0;  // which DisposeScope holds it
  // The generation whose DisposeScope was destroyed on another thread: its thread ends it when it
  // next makes a tensor or a scope, or ends the scope inside it.
  std::atomic<uint64_t> abandoned{UINT64_MAX};
  bool open = false;
  ScopeStack* const stack;  // set once: read from other threads
  explicit Frame(ScopeStack* owner) : stack(owner) {}
  // A DisposeScope may outlive its thread (held in a unique_ptr handed on) and so its frame: the
  // tensors still registered here must not point back at it once it is gone.
  ~Frame() {
    for (const ImplPtr& m : members) m->scope = nullptr;
  }
};

struct ScopeStack {
  std::vector<std::shared_ptr<Frame>> frames;  // shared with the DisposeScopes using them
  size_t open = 0;
  int internal = 0;
  Counts counts;
};

// Null while the thread exits, once its stack is gone: the frames' tensors go last, when this
// thread's books can no longer be written.
ScopeStack* this_stack_if_alive() { return PerThread<ScopeStack>::get(); }
ScopeStack& this_stack() {
  ScopeStack* stack = this_stack_if_alive();
  if (!stack) throw Error("dispose scopes cannot be used while their thread exits (its scope stack is gone)");
  return *stack;
}

// Never destroyed: tensors released during static destruction still unlink themselves.
struct LiveList {
  std::mutex mutex;
  Impl* head = nullptr;
  Counts counts;
};
LiveList& live() {
  static LiveList* list = new LiveList;
  return *list;
}

void link(Impl& m) {
  LiveList& l = live();
  std::lock_guard lock(l.mutex);
  m.live_next = l.head;
  m.live_prev = nullptr;
  if (l.head) l.head->live_prev = &m;
  l.head = &m;
}

void unlink(Impl& m) {
  LiveList& l = live();
  std::lock_guard lock(l.mutex);
  if (m.live_prev) m.live_prev->live_next = m.live_next;
  else l.head = m.live_next;
  if (m.live_next) m.live_next->live_prev = m.live_prev;
  m.live_prev = m.live_next = nullptr;
}

void count_released(Impl& m) {
  unlink(m);
  live().counts.disposed.fetch_add(1, std::memory_order_relaxed);
  if (ScopeStack* s = this_stack_if_alive()) s->counts.disposed.fetch_add(1, std::memory_order_relaxed);
  if (m.scope) static_cast<Frame*>(m.scope)->counts.disposed.fetch_add(1, std::memory_order_relaxed);
}

void enter(Frame& f, ImplPtr t) {
  t->scope = &f;
  t->scope_index = static_cast<uint32_t>(f.members.size());
  f.members.push_back(std::move(t));
  f.counts.created.fetch_add(1, std::memory_order_relaxed);
}

// Takes m out of its scope's list; the caller holds it while it needs it.
ImplPtr leave(Impl& m) {
  Frame& f = *static_cast<Frame*>(m.scope);
  const size_t i = m.scope_index;
  ImplPtr held = std::move(f.members[i]);
  if (i + 1 != f.members.size()) {
    f.members[i] = std::move(f.members.back());
    f.members[i]->scope_index = static_cast<uint32_t>(i);
  }
  f.members.pop_back();
  m.scope = nullptr;
  // Counted in the scope it joins from now on.
  f.counts.created.fetch_sub(1, std::memory_order_relaxed);
  return held;
}

// Ends the innermost scopes whose DisposeScope another thread destroyed.
void close_abandoned(ScopeStack& s);

void count(const ImplPtr& t, Loc loc) {
  Impl& m = *t;
  if (m.counted) return;  // made for the user already (while its thread exits, nothing is kiln's own)
  m.counted = true;
  m.created = loc;
  link(m);
  live().counts.created.fetch_add(1, std::memory_order_relaxed);
  ScopeStack* s = this_stack_if_alive();
  if (!s) return;
  s->counts.created.fetch_add(1, std::memory_order_relaxed);
  close_abandoned(*s);
  if (s->open > 0) enter(*s->frames[s->open - 1], t);
}

Frame& frame_on_this_thread(void* frame, const char* what) {
  Frame& f = *static_cast<Frame*>(frame);
  if (f.stack != this_stack_if_alive())
    throw Error(std::string(what) + ": the dispose scope made at " + loc_str(f.loc) +
                " belongs to another thread; a scope and its tensors are handled on the thread that made it "
                "(detach a tensor with detach_from_scope() there before another thread keeps it)");
  return f;
}

// Disposes the frame's tensors but those in keep: at loc, by the DisposeScope step `by`.
void dispose_members(Frame& f, const std::vector<Tensor>* keep, Loc loc, const char* by) {
  std::vector<ImplPtr> kept;
  for (ImplPtr& t : f.members) {
    const bool keeps =
        keep && std::any_of(keep->begin(), keep->end(), [&](const Tensor& k) { return TensorBook::impl_of(k) == t; });
    if (keeps) {
      t->scope_index = static_cast<uint32_t>(kept.size());
      kept.push_back(std::move(t));
      continue;
    }
    if (!t->disposed) TensorBook::dispose(*t, loc, by);
    t->scope = nullptr;
  }
  f.members.clear();
  for (ImplPtr& t : kept) f.members.push_back(std::move(t));
}

void close(Frame& f) {
  dispose_members(f, nullptr, f.loc, "end");
  f.open = false;
  ++f.generation;
  f.stack->open = f.depth;
}

void close_abandoned(ScopeStack& s) {
  while (s.open > 0) {
    Frame& top = *s.frames[s.open - 1];
    if (top.abandoned.load(std::memory_order_acquire) != top.generation) return;
    close(top);
  }
}

}  // namespace

void TensorBook::made(const std::shared_ptr<Impl>& t, Loc loc) {
  if (ScopeStack* s = this_stack_if_alive(); s && s->internal > 0) return;
  count(t, loc);
}

void TensorBook::dispose(Impl& m, Loc loc, const char* by) {
  m.storage.reset();
  m.disposed = true;
  m.disposed_at = loc;
  m.disposed_by = by;
  if (m.counted) count_released(m);
}

void TensorBook::gone(Impl& m) {
  if (!m.disposed) count_released(m);
}

Tensor TensorBook::handed_over(Tensor t, Loc loc) {
  if (!t.defined()) return t;
  if (ScopeStack* s = this_stack_if_alive(); s && s->internal > 0) return t;  // kiln is the one it is handed to
  if (t.impl_->counted || t.impl_.use_count() != 1) {
    const InternalTensors internal;
    t = t.alias();
  }
  count(t.impl_, loc);
  return t;
}

bool TensorBook::take_over(const Tensor& t) {
  if (!t.defined()) return false;
  Impl& m = *t.impl_;
  if (!m.counted) return true;
  if (t.impl_.use_count() != (m.scope ? 2 : 1)) return false;
  const ImplPtr held = t.impl_;  // the scope's reference may be the other one
  if (m.scope) leave(m);
  unlink(m);
  m.counted = false;
  live().counts.created.fetch_sub(1, std::memory_order_relaxed);
  if (ScopeStack* s = this_stack_if_alive()) s->counts.created.fetch_sub(1, std::memory_order_relaxed);
  return true;
}

std::string TensorBook::disposed_message(const Impl& m) {
  std::string what = "Tensor: the tensor " + std::string(dtype_name(m.dtype)) + shape_str(m.shape);
  if (m.counted) what += " made at " + loc_str(m.created);
  const bool scope_ended = m.disposed_by && std::string_view(m.disposed_by) == "end";
  what += scope_ended      ? " was disposed when the dispose scope made at " + loc_str(m.disposed_at) + " ended"
          : m.disposed_by ? " was disposed by DisposeScope::" + std::string(m.disposed_by) + "() at " + loc_str(m.disposed_at)
          : m.counted     ? " was disposed at " + loc_str(m.disposed_at)
                          : " was disposed";
  return what + ", and this handle cannot be used any more; to keep it past its scope, move it out "
                "(move_to_outer_scope()) or detach it (detach_from_scope()); to keep the values after "
                "dispose(), make a handle with alias() or clone() first";
}

Tensor::Impl::~Impl() {
  if (counted) TensorBook::gone(*this);
}

Tensor Tensor::move_to_outer_scope() const {
  Impl& m = const_cast<Impl&>(impl());
  if (!m.scope) return *this;
  Frame& f = frame_on_this_thread(m.scope, "move_to_outer_scope");
  ImplPtr held = leave(m);
  if (f.depth > 0) enter(*f.stack->frames[f.depth - 1], std::move(held));
  return *this;
}

Tensor Tensor::detach_from_scope() const {
  Impl& m = const_cast<Impl&>(impl());
  if (!m.scope) return *this;
  frame_on_this_thread(m.scope, "detach_from_scope");
  leave(m);
  return *this;
}

InternalTensors::InternalTensors() {
  if (ScopeStack* s = this_stack_if_alive()) ++s->internal;
}
InternalTensors::~InternalTensors() {
  if (ScopeStack* s = this_stack_if_alive()) --s->internal;
}

DisposeScope::DisposeScope(Loc loc) : loc_(loc) {
  ScopeStack& s = this_stack();
  close_abandoned(s);
  if (s.frames.size() == s.open) s.frames.push_back(std::make_shared<Frame>(&s));
  Frame& f = *s.frames[s.open];
  f.open = true;
  f.depth = s.open;
  f.loc = loc;
  f.counts.created = 0;
  f.counts.disposed = 0;
  ++s.open;
  frame_ = &f;
  frame_owner_ = s.frames[s.open - 1];
  generation_ = f.generation;
}

namespace {
Frame* open_frame(void* frame, uint64_t generation) {
  Frame* f = static_cast<Frame*>(frame);
  return f && f->open && f->generation == generation ? f : nullptr;
}
}  // namespace

bool DisposeScope::ended() const { return open_frame(frame_, generation_) == nullptr; }

DisposeScope::~DisposeScope() {
  auto* mine = static_cast<Frame*>(frame_);
  if (!mine) return;
  if (mine->stack != this_stack_if_alive()) {
    // Destroyed on another thread (a scope held by a unique_ptr handed over): a destructor may not
    // throw, and the frame is its thread's to touch, so that thread ends it.
    mine->abandoned.store(generation_, std::memory_order_release);
    return;
  }
  Frame* f = open_frame(frame_, generation_);
  if (!f) return;
  ScopeStack& s = *f->stack;
  while (s.open > f->depth) close(*s.frames[s.open - 1]);
  close_abandoned(s);
}

void DisposeScope::end() {
  Frame* f = open_frame(frame_, generation_);
  if (!f) throw Error("DisposeScope::end: the scope made at " + loc_str(loc_) + " has already ended");
  frame_on_this_thread(f, "DisposeScope::end");
  ScopeStack& s = *f->stack;
  if (s.open > f->depth + 1)
    throw Error("DisposeScope::end: the scope made at " + loc_str(s.frames[s.open - 1]->loc) +
                " is still open inside the one made at " + loc_str(loc_) + "; end the inner scope first");
  close(*f);
  at_end_ = f->counts.read();
  close_abandoned(s);
}

void DisposeScope::dispose_everything(Loc loc) {
  Frame* f = open_frame(frame_, generation_);
  if (!f) throw Error("DisposeScope::dispose_everything: the scope made at " + loc_str(loc_) + " has ended");
  dispose_members(frame_on_this_thread(f, "DisposeScope::dispose_everything"), nullptr, loc, "dispose_everything");
}

void DisposeScope::dispose_everything_but(const std::vector<Tensor>& keep, Loc loc) {
  Frame* f = open_frame(frame_, generation_);
  if (!f) throw Error("DisposeScope::dispose_everything_but: the scope made at " + loc_str(loc_) + " has ended");
  dispose_members(frame_on_this_thread(f, "DisposeScope::dispose_everything_but"), &keep, loc, "dispose_everything_but");
}

ScopeStatistics DisposeScope::statistics() const {
  const Frame* f = open_frame(frame_, generation_);
  return f ? f->counts.read() : at_end_;
}

ScopeStatistics scope_statistics(Threads threads) {
  if (threads == Threads::all) return live().counts.read();
  ScopeStack* s = this_stack_if_alive();
  return s ? s->counts.read() : ScopeStatistics{};
}

std::string live_tensor_report() {
  struct Group {
    int64_t count = 0;
    int64_t bytes = 0;
    std::string example;
  };
  std::map<std::string, Group> groups;
  int64_t total = 0;
  {
    LiveList& l = live();
    std::lock_guard lock(l.mutex);
    for (const Impl* m = l.head; m; m = m->live_next) {
      Group& g = groups[loc_str(m->created)];
      ++g.count;
      ++total;
      int64_t n = 1;
      for (int64_t d : m->shape) n *= d;
      g.bytes += n * static_cast<int64_t>(dtype_size(m->dtype));
      if (g.example.empty()) g.example = std::string(dtype_name(m->dtype)) + shape_str(m->shape);
    }
  }
  std::string report = std::to_string(total) + " live tensor" + (total == 1 ? "" : "s") + " made for the user\n";
  for (const auto& [line, g] : groups)
    report += "  " + std::to_string(g.count) + " made at " + line + " (" + std::to_string(g.bytes) +
              " bytes viewed; e.g. " + g.example + ")\n";
  return report;
}

}  // namespace kiln

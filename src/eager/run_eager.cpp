#include "eager/run_eager.hpp"

#include <algorithm>
#include <cstring>
#include <unordered_map>
#include <unordered_set>

#include "exec/backend.hpp"
#include "exec/run_node.hpp"
#include "tensor/parallel.hpp"
#include "graph/node.hpp"
#include "graph/op.hpp"
#include "ops/elemwise.hpp"
#include "tensor/handles.hpp"
#include "tensor/per_thread.hpp"
#include "tensor/tensor_book.hpp"

namespace kiln {
namespace {

struct Step {
  const Node* node = nullptr;
  std::unique_ptr<Executable> executable;
  std::vector<int> inputs, outputs;
  std::vector<Shape> shapes, strides;  // per output, as found by the first run
  std::vector<DType> dtypes;
  std::vector<uint8_t> is_view;
  // Per output: a small intermediate that neither the result nor a view can reach, allocated by
  // the first run and kept (a number cast to its operand's dtype, say).
  std::vector<uint8_t> keeps;
  std::vector<Tensor> kept;
  int64_t scratch_bytes = 0;
};

// An eager operation's graph, ready to run for one key.
struct Entry {
  std::vector<Var> placeholders;  // keep the graph alive
  Var result;
  std::vector<Step> steps;
  std::vector<Tensor> values;  // per slot: arguments, constants, node outputs
  std::vector<int> transient_slots;  // every slot but the constants': filled by a run, emptied after it
  std::vector<Tensor> numbers;  // per numeric argument, the 0-d tensor it is written into
  std::vector<uint8_t> number_cast_to_i32;  // per numeric argument: checked to fit i32 when bound
  std::shared_ptr<Storage> scratch;
  int result_slot = -1;
  // The result is an argument, or a view of one: only the operations that are views (reshape,
  // transpose, flatten) hand that on; the others copy it, as NumPy's do (a cast to the same
  // dtype, tile by ones, a concatenation of one tensor built nothing).
  bool result_views_argument = false;
  uint64_t last_use = 0;  // the cache's clock when a call last ran it
  size_t n_args = 0;
};

struct KeyHash {
  size_t operator()(const std::vector<int64_t>& key) const {
    uint64_t h = 1469598103934665603ull;
    for (int64_t w : key) h = (h ^ static_cast<uint64_t>(w)) * 1099511628211ull;
    return static_cast<size_t>(h);
  }
};

struct Cache {
  std::unordered_map<std::vector<int64_t>, std::unique_ptr<Entry>, KeyHash> entries;
  uint64_t clock = 0;
  // Bounded, so that a program whose shapes keep changing (sequences of every length) does not
  // grow without end: past kMaxEntries, the least recently used quarter goes.
  static constexpr size_t kMaxEntries = 1024;
  void make_room() {
    if (entries.size() < kMaxEntries) return;
    std::vector<uint64_t> uses;
    uses.reserve(entries.size());
    for (const auto& [key, entry] : entries) uses.push_back(entry->last_use);
    auto quarter = uses.begin() + static_cast<std::ptrdiff_t>(uses.size() / 4);
    std::nth_element(uses.begin(), quarter, uses.end());
    std::erase_if(entries, [&](const auto& kv) { return kv.second->last_use < *quarter; });
  }
  std::vector<int64_t> probe;
};

void make_key(std::vector<int64_t>& key, EagerBuild build, std::span<const EagerArg> args, std::span<const int64_t> params,
              bool in_place) {
  key.clear();
  key.push_back(static_cast<int64_t>(reinterpret_cast<intptr_t>(build)));
  key.push_back(in_place);
  key.push_back(static_cast<int64_t>(params.size()));
  key.insert(key.end(), params.begin(), params.end());
  for (const EagerArg& a : args) {
    if (!a.tensor) {
      key.push_back(-1 - static_cast<int64_t>(a.number_dtype));
      continue;
    }
    key.push_back(static_cast<int64_t>(a.tensor->dtype()));
    key.push_back(a.tensor->ndim());
    key.insert(key.end(), a.tensor->shape().begin(), a.tensor->shape().end());
  }
}

void bind_arguments(Entry& e, std::span<const EagerArg> args, const Loc& loc) {
  size_t number = 0;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i].tensor) {
      e.values[i] = *args[i].tensor;
      continue;
    }
    if (e.number_cast_to_i32[number]) check_fits_i32(args[i].integer, loc);
    Tensor& t = e.numbers[number++];
    if (t.dtype() == DType::f64) *t.data<double>() = args[i].number;
    else *t.data<int64_t>() = args[i].integer;
    e.values[i] = t;
  }
}

// Step k with its outputs allocated (views excepted: the kernel sets them), or written into
// *into.
void run_step(Entry& e, size_t k, const Tensor* into) {
  Step& s = e.steps[k];
  for (size_t o = 0; o < s.outputs.size(); ++o) {
    Tensor& out = e.values[static_cast<size_t>(s.outputs[o])];
    if (s.is_view[o]) out = Tensor();
    else if (into) out = *into;
    else if (s.keeps[o] && s.kept[o].defined()) out = s.kept[o];
    else {
      out = TensorHandles::make(cpu_backend().allocate(static_cast<size_t>(shape_nbytes(s.shapes[o], s.dtypes[o]))),
                                s.dtypes[o], s.shapes[o], s.strides[o], 0, Loc::current());
      if (s.keeps[o]) s.kept[o] = out;
    }
  }
  const std::span<std::byte> scratch =
      s.scratch_bytes > 0 ? std::span<std::byte>(e.scratch->data(), static_cast<size_t>(s.scratch_bytes)) : std::span<std::byte>();
  run_node(*s.node, *s.executable, InputValues(e.values.data(), s.inputs), OutputValues(e.values.data(), s.outputs),
           scratch);
}

std::unique_ptr<Entry> build_entry(EagerBuild build, std::span<const EagerArg> args, std::span<const int64_t> params,
                                   const Loc& loc, const Tensor* into) {
  auto e = std::make_unique<Entry>();
  e->n_args = args.size();
  for (const EagerArg& a : args) {
    if (a.tensor) {
      std::vector<bool> broadcastable;
      for (int64_t d : a.tensor->shape()) broadcastable.push_back(d == 1);
      e->placeholders.push_back(tensor(a.tensor->dtype(), broadcastable));
    } else {
      Var v = tensor(a.number_dtype, {});
      v.get()->weak = true;
      e->placeholders.push_back(v);
      e->numbers.push_back(Tensor::zeros({}, a.number_dtype));
    }
  }
  try {
    e->result = build(e->placeholders, params, loc);
  } catch (const Error& error) {  // raised from the placeholders' types: say what the tensors are
    std::string arguments;
    for (const EagerArg& a : args)
      arguments += (arguments.empty() ? "" : ", ") + (a.tensor ? a.tensor->str() : std::string("a number"));
    error.rethrow_with(std::string(error.what()) + "; the arguments: " + arguments);
  }
  // The nodes between the placeholders and the result, inputs first.
  std::unordered_map<const Variable*, int> slot;
  for (size_t i = 0; i < e->placeholders.size(); ++i) slot[e->placeholders[i].get()] = static_cast<int>(i);
  std::vector<const Node*> order;
  std::unordered_set<const Node*> seen;
  std::vector<std::pair<const Node*, size_t>> stack;
  if (const Node* n = e->result.get()->owner) stack.push_back({n, 0});
  while (!stack.empty()) {
    auto& [n, next] = stack.back();
    if (next < n->inputs.size()) {
      const Node* p = n->inputs[next++].get()->owner;
      if (p && seen.insert(p).second) stack.push_back({p, 0});
      continue;
    }
    order.push_back(n);
    stack.pop_back();
  }
  int n_slots = static_cast<int>(e->placeholders.size());
  auto slot_of = [&](const Variable* v) {
    auto [it, added] = slot.try_emplace(v, n_slots);
    if (added) ++n_slots;
    return it->second;
  };
  for (const Node* n : order) {
    Step s;
    s.node = n;
    s.executable = cpu_backend().executable(*n);
    for (const Var& in : n->inputs) s.inputs.push_back(slot_of(in.get()));
    for (const auto& out : n->outputs) s.outputs.push_back(slot_of(out.get()));
    s.is_view.assign(n->outputs.size(), 0);
    for (auto [out, in] : n->op->view_map()) s.is_view[static_cast<size_t>(out)] = 1;
    e->steps.push_back(std::move(s));
  }
  e->result_slot = slot_of(e->result.get());
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i].tensor) continue;
    const auto casts_to_i32 = [&](const Step& step) {
      const auto* cast = dynamic_cast<const Elemwise*>(step.node->op.get());
      return cast && cast->scalar_op() == ScalarOp::cast && cast->cast_to() == DType::i32 &&
             step.inputs[0] == static_cast<int>(i);
    };
    e->number_cast_to_i32.push_back(std::ranges::any_of(e->steps, casts_to_i32));
  }
  e->values.resize(static_cast<size_t>(n_slots));
  for (const auto& [v, s] : slot) {
    if (v->constant) e->values[static_cast<size_t>(s)] = *v->constant;
    else e->transient_slots.push_back(s);
  }
  // The slots whose storage the result may share: the result's, and what a view of one views.
  std::unordered_set<int> result_storage{e->result_slot};
  for (auto step = e->steps.rbegin(); step != e->steps.rend(); ++step)
    for (auto [out, in] : step->node->op->view_map())
      if (result_storage.contains(step->outputs[static_cast<size_t>(out)]))
        result_storage.insert(step->inputs[static_cast<size_t>(in)]);
  for (int slot : result_storage) e->result_views_argument = e->result_views_argument || slot < static_cast<int>(args.size());
  // The first run finds every shape (and checks them, with the user's line on any error).
  bind_arguments(*e, args, loc);
  for (size_t k = 0; k < e->steps.size(); ++k) {
    Step& s = e->steps[k];
    const InputValues inputs(e->values.data(), s.inputs);
    NodeShapes shapes;
    try {
      shapes = node_shapes(*s.node, *s.executable, inputs);
    } catch (const Error& error) {
      error.rethrow_with(std::string(error.what()) + node_context(*s.node, inputs));
    }
    s.scratch_bytes = s.executable->scratch_bytes(shapes.inputs, shapes.outputs);
    for (size_t o = 0; o < s.outputs.size(); ++o) {
      s.shapes.push_back(shapes.outputs[o]);
      s.strides.push_back(contiguous_strides(shapes.outputs[o]));
      s.dtypes.push_back(s.node->outputs[o]->type.dtype);
      constexpr int64_t kKeptBytes = 4096;
      s.keeps.push_back(!s.is_view[o] && !result_storage.contains(s.outputs[o]) &&
                        shape_nbytes(s.shapes[o], s.dtypes[o]) <= kKeptBytes);
    }
    s.kept.resize(s.outputs.size());
    if (s.scratch_bytes > 0 && (!e->scratch || e->scratch->nbytes() < static_cast<size_t>(s.scratch_bytes)))
      e->scratch = cpu_backend().allocate(static_cast<size_t>(s.scratch_bytes));
    run_step(*e, k, nullptr);  // later steps' shapes may depend on its values
  }
  if (into) {
    const bool writes_last = !e->steps.empty() && e->steps.back().outputs[0] == e->result_slot && !e->steps.back().is_view[0];
    const Step* last = writes_last ? &e->steps.back() : nullptr;
    if (!last || last->shapes[0] != into->shape() || last->dtypes[0] != into->dtype())
      throw ShapeError(std::string(e->result.get()->owner ? e->result.get()->owner->op->name() : "operation") +
                       " in place: the result " +
                       (last ? std::string(dtype_name(last->dtypes[0])) + shape_str(last->shapes[0]) : std::string("(a view)")) +
                       " does not fit the tensor written, " + into->str() + " (at " + loc_str(loc) +
                       "); use the operation that returns a new tensor instead");
  }
  return e;
}

// Empties the slots a run filled when it returns or fails: the cached entry must not keep the
// caller's tensors, or its results, alive.
struct EmptyTransientSlots {
  Entry& e;
  ~EmptyTransientSlots() {
    for (int s : e.transient_slots) e.values[static_cast<size_t>(s)] = Tensor();
  }
};

Tensor run(Entry& e, std::span<const EagerArg> args, const Tensor* into, const Loc& loc) {
  const EmptyTransientSlots empty_after{e};
  bind_arguments(e, args, loc);
  for (size_t k = 0; k < e.steps.size(); ++k) run_step(e, k, k + 1 == e.steps.size() ? into : nullptr);
  return e.values[static_cast<size_t>(e.result_slot)];
}

}  // namespace

Tensor run_eager(EagerBuild build, std::span<const EagerArg> args, std::span<const int64_t> params, const Loc& loc,
                 const Tensor* into, bool may_view) {
  follow_num_threads();
  Tensor result;
  {
    const InternalTensors internal;
    bool views_argument = false;
    if (Cache* cache = PerThread<Cache>::get()) {
      make_key(cache->probe, build, args, params, into != nullptr);
      auto it = cache->entries.find(cache->probe);
      if (it == cache->entries.end()) {
        std::unique_ptr<Entry> entry = build_entry(build, args, params, loc, into);
        cache->make_room();
        it = cache->entries.emplace(cache->probe, std::move(entry)).first;
      }
      it->second->last_use = ++cache->clock;
      result = run(*it->second, args, into, loc);
      views_argument = it->second->result_views_argument;
    } else {  // the thread is exiting (a thread_local's destructor): run without the cache
      const std::unique_ptr<Entry> entry = build_entry(build, args, params, loc, into);
      result = run(*entry, args, into, loc);
      views_argument = entry->result_views_argument;
    }
    if (views_argument && !may_view && !into) result = result.clone();
  }
  return TensorBook::handed_over(std::move(result), loc);
}

}  // namespace kiln

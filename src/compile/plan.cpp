#include "compile/plan.hpp"

#include <algorithm>

#include "compile/placement.hpp"
#include "exec/run_node.hpp"
#include "graph/op.hpp"
#include "ops/shape.hpp"
#include "tensor/handles.hpp"

namespace kiln {

namespace {

constexpr int64_t kAlign = 64;

int64_t aligned_bytes(const Shape& shape, DType dtype) {
  int64_t bytes = 0;
  if (__builtin_mul_overflow(shape_numel(shape), static_cast<int64_t>(dtype_size(dtype)), &bytes) || bytes > INT64_MAX - kAlign)
    throw MemoryError("out of memory: a value " + std::string(dtype_name(dtype)) + shape_str(shape) +
                      " takes more bytes than a 64-bit count holds");
  return (bytes + kAlign - 1) / kAlign * kAlign;
}

// A tensor with the right shape and no memory, for ops that read only their inputs' shapes.
Tensor shape_only(const Shape& shape, DType dtype) {
  return TensorHandles::make(nullptr, dtype, shape, contiguous_strides(shape), 0, Loc::current());
}

bool produces_integers(const Instruction& ins) {
  return std::none_of(ins.output_dtypes.begin(), ins.output_dtypes.end(), is_float);
}

// "f32(2,3), i64(4,)": the same form the runtime's messages use.
std::string describe(const Program& p, const Instruction& ins, const std::vector<Shape>& shapes) {
  std::string s;
  for (size_t i = 0; i < shapes.size(); ++i)
    s += (i ? ", " : "") + std::string(dtype_name(p.slot_vars[ins.inputs[i]]->type.dtype)) + shape_str(shapes[i]);
  return s;
}

struct Buffer {
  int64_t bytes = 0;
  int first = 0, last = 0;  // instructions between which it must stay
  int64_t offset = -1;
  bool in_arena = true;
  bool lent = false;  // the caller's buffer of an In(borrow) input or an overwritable shared variable
  int shared_slot = -1;  // lent by this shared variable
};

// What planning learns of the values for one signature before it places anything. It is the same
// for every schedule of a graph, which number their slots alike, so it is worked out once.
struct SlotFacts {
  std::vector<std::optional<Shape>> shape;  // per slot; empty where it depends on data
  std::vector<Tensor> value;                // per slot: constants and the shape arithmetic's results
  std::vector<int> forwarded;               // per slot: the input position its instruction forwards, or -1
};

// 1. Shapes first. Integer results computable from shapes alone (shape arithmetic) are computed
// now, once per signature, and skipped at run time.
SlotFacts infer_slot_facts(const Program& p, const std::vector<Shape>& input_shapes, const std::vector<Shape>& shared_shapes) {
  SlotFacts facts;
  const int n_slots = p.n_slots;
  facts.shape.assign(n_slots, std::nullopt);
  facts.value.assign(n_slots, Tensor());
  facts.forwarded.assign(n_slots, -1);
  for (size_t i = 0; i < p.input_slots.size(); ++i) facts.shape[p.input_slots[i]] = input_shapes.at(i);
  for (size_t i = 0; i < p.shared_slots.size(); ++i) facts.shape[p.shared_slots[i].first] = shared_shapes.at(i);
  for (const auto& [s, value] : p.constant_slots) {
    facts.shape[s] = value.shape();
    facts.value[s] = value;
  }
  // Values of a branch that fails for these shapes if it runs (a product whose shapes do not
  // align in the branch not taken): what reads them fails too, except an ifelse, which then has
  // the other side's shapes, since the call fails before it runs if the failing side is taken.
  std::vector<uint8_t> fails(static_cast<size_t>(n_slots), 0);
  auto mark_failing = [&](const Instruction& ins) {
    for (int s : ins.outputs) fails[static_cast<size_t>(s)] = 1;
  };
  std::vector<Shape> shapes;  // reused from instruction to instruction: their memory stays
  std::vector<const Tensor*> values;
  std::vector<int> sides;
  for (size_t k = 0; k < p.code.size(); ++k) {
    const Instruction& ins = p.code[k];
    if (ins.kind != Instruction::Kind::run) continue;
    const Op& op = *ins.node->op;
    std::span<const int> inputs = ins.inputs;
    if (std::any_of(inputs.begin(), inputs.end(), [&](int s) { return fails[static_cast<size_t>(s)]; })) {
      const size_t n = static_cast<size_t>(p.traits[k].ifelse_pairs);
      auto side_fails = [&](size_t first) {
        return std::any_of(inputs.begin() + first, inputs.begin() + first + n, [&](int s) { return fails[static_cast<size_t>(s)]; });
      };
      const bool then_fails = n > 0 && side_fails(1), else_fails = n > 0 && side_fails(1 + n);
      if (n == 0 || fails[static_cast<size_t>(inputs[0])] || (then_fails && else_fails)) {
        mark_failing(ins);
        continue;
      }
      // The failing side reads as the other: its shapes, and its values where known.
      sides.assign(inputs.begin(), inputs.end());
      for (size_t i = 1; i <= n; ++i) {
        if (then_fails) sides[i] = inputs[i + n];
        else sides[i + n] = inputs[i];
      }
      inputs = sides;
    }
    bool known = true, all_values = true;
    for (int s : inputs) known = known && facts.shape[s].has_value();
    if (!known) continue;
    shapes.resize(inputs.size());
    values.resize(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
      const int s = inputs[i];
      shapes[i] = *facts.shape[s];
      values[i] = facts.value[s].defined() ? &facts.value[s] : nullptr;
      all_values = all_values && facts.value[s].defined();
    }
    bool values_missing = false;
    for (int need : p.traits[k].value_inputs)
      if (need < static_cast<int>(values.size()) && !values[need]) values_missing = true;
    if (values_missing && !op.infers_shapes_without_values()) continue;
    std::vector<Shape> out_shapes;
    try {
      out_shapes = ins.executable->infer_shapes(*ins.node, shapes, values);
      for (const Shape& shape : out_shapes) shape_numel(shape);  // a count that overflows is this op's error
    } catch (const Error& e) {
      // The shapes depend on values known when it runs; inside a branch that may not run, a
      // failure is only an error if the branch runs.
      if (values_missing) continue;
      if (ins.conditional) {
        mark_failing(ins);
        continue;
      }
      e.rethrow_with(std::string(e.what()) + "\n  while planning " + op.name() + " on " + describe(p, ins, shapes) +
                     ", " + ins.node->origin());
    }
    for (size_t o = 0; o < ins.outputs.size(); ++o) facts.shape[ins.outputs[o]] = out_shapes[o];
    if (const std::optional<int> f = op.forwards_input(shapes, out_shapes)) {
      facts.forwarded[ins.outputs[0]] = *f;
      // The input unchanged: a value known while planning stays known (stack checks shapes of
      // shape values with shaped_like, whose readers are shape arithmetic too).
      if (values[static_cast<size_t>(*f)]) facts.value[ins.outputs[0]] = *values[static_cast<size_t>(*f)];
      continue;
    }
    const bool reads_shapes_only = dynamic_cast<const ShapeOf*>(&op) != nullptr;
    if (!produces_integers(ins)) continue;
    if (!all_values && !reads_shapes_only) {
      const std::vector<Tensor> known = op.values_from_known_inputs(values);
      for (size_t o = 0; o < known.size(); ++o) facts.value[ins.outputs[o]] = known[o];
      continue;
    }
    std::vector<Tensor> arguments, outputs;
    for (size_t i = 0; i < inputs.size(); ++i)
      arguments.push_back(values[i] ? *values[i] : shape_only(shapes[i], p.slot_vars[inputs[i]]->type.dtype));
    try {
      outputs = evaluate_node(*ins.node, *ins.executable, arguments, cpu_backend());
    } catch (const Error&) {
      if (!ins.conditional) throw;
      mark_failing(ins);
      continue;
    }
    for (size_t o = 0; o < outputs.size(); ++o) facts.value[ins.outputs[o]] = outputs[o].contiguous().clone();
  }
  return facts;
}

// 2-4: buffers, offsets and the report, for one schedule.
MemoryPlan plan_buffers(const Program& p, const SlotFacts& facts, const PlanOptions& options) {
  MemoryPlan plan;
  const int n_slots = p.n_slots;
  const std::vector<std::optional<Shape>>& shape = facts.shape;
  plan.precomputed.assign(p.code.size(), false);
  plan.forwarded.assign(p.code.size(), -1);
  for (size_t k = 0; k < p.code.size(); ++k) {
    const Instruction& ins = p.code[k];
    if (ins.kind != Instruction::Kind::run || ins.outputs.empty()) continue;
    plan.precomputed[k] = facts.value[ins.outputs[0]].defined();
    plan.forwarded[k] = facts.forwarded[ins.outputs[0]];
    if (plan.precomputed[k]) plan.precomputed_slots.insert(plan.precomputed_slots.end(), ins.outputs.begin(), ins.outputs.end());
  }
  plan.supplied.assign(n_slots, false);
  plan.offset.assign(n_slots, -1);
  plan.reuse_input.assign(n_slots, -1);
  plan.scratch_offset.assign(p.code.size(), kNoScratch);
  plan.scratch_bytes.assign(p.code.size(), 0);


  // 2. Buffers. Each slot computed at run time either owns a buffer or aliases the buffer of the
  // value it views (or, in place, of the input it overwrites).
  std::vector<int> root(n_slots);
  for (int s = 0; s < n_slots; ++s) root[s] = s;
  std::vector<int> buffer_of(n_slots, -1);
  std::vector<Buffer> buffers;
  buffers.reserve(static_cast<size_t>(n_slots) + p.code.size());  // at most one per slot and one scratch per instruction
  std::vector<bool> external(n_slots, false);  // inputs, shared variables, constants, precomputed values
  for (int s : p.input_slots) external[s] = true;
  std::vector<bool> borrowed(n_slots, false), borrowed_taken(n_slots, false);
  for (size_t i = 0; i < options.borrowed_inputs.size() && i < p.input_slots.size(); ++i)
    borrowed[p.input_slots[i]] = options.borrowed_inputs[i];
  // An overwritable shared variable lends its buffer like a borrowed input, to its own new value
  // or to temporaries, never to another value the call hands back.
  std::vector<int> update_into(n_slots, -1);
  std::vector<bool> overwrites_its_variable(n_slots, false);
  for (size_t i = 0; i < options.overwritable_shared.size() && i < p.shared_slots.size(); ++i)
    if (const int u = options.overwritable_shared[i]; u >= 0) {
      borrowed[p.shared_slots[i].first] = true;
      update_into[p.shared_slots[i].first] = u;
      overwrites_its_variable[u] = true;
    }
  // A call that fails leaves shared variables as they were: none is written before the last op
  // that may fail on values, or whose output's shape is known only when it runs.
  int last_fallible = -1;
  for (size_t k = 0; k < p.code.size(); ++k) {
    const Instruction& ins = p.code[k];
    if (plan.precomputed[k] || ins.kind != Instruction::Kind::run) continue;
    bool fallible = p.traits[k].may_fail_on_values;
    for (size_t o = 0; o < ins.outputs.size(); ++o) fallible = fallible || (!ins.output_is_view[o] && !shape[ins.outputs[o]]);
    if (fallible) last_fallible = static_cast<int>(k);
  }
  for (const auto& sh : p.shared_slots) external[sh.first] = true;
  for (const auto& c : p.constant_slots) external[c.first] = true;
  // The values each instruction reads (their elements, not only their shapes), -1 for the others.
  std::vector<int> read;
  auto reads_values = [&](size_t k) -> const std::vector<int>& {
    read.assign(p.code[k].inputs.begin(), p.code[k].inputs.end());
    for (int i : p.traits[k].shape_only_inputs) read[static_cast<size_t>(i)] = -1;
    return read;
  };
  std::vector<int> last_use(n_slots, -1);
  for (size_t k = 0; k < p.code.size(); ++k)
    if (!plan.precomputed[k])
      for (int s : reads_values(k))
        if (s >= 0) last_use[s] = static_cast<int>(k);
  std::vector<uint8_t> is_result(static_cast<size_t>(n_slots), 0);
  for (int s : p.result_slots) is_result[static_cast<size_t>(s)] = 1;
  const int end_of_call = static_cast<int>(p.code.size());
  for (int s : p.result_slots) last_use[s] = end_of_call;
  // What each view views is static: resolve it first, so that a buffer's last use includes every
  // later read through its views before anything decides to overwrite it.
  for (size_t k = 0; k < p.code.size(); ++k) {
    if (plan.precomputed[k] || p.code[k].kind != Instruction::Kind::run) continue;
    const Instruction& ins = p.code[k];
    for (auto [out, in] : p.traits[k].views)
      if (ins.output_is_view[out]) root[ins.outputs[out]] = root[ins.inputs[in]];
    if (const int f = plan.forwarded[k]; f >= 0) root[ins.outputs[0]] = root[ins.inputs[static_cast<size_t>(f)]];
  }
  std::vector<int> effective_last(n_slots, -1);
  for (int s = 0; s < n_slots; ++s) effective_last[root[s]] = std::max(effective_last[root[s]], last_use[s]);

  auto extend = [&](int b, int until) { buffers[b].last = std::max(buffers[b].last, until); };
  std::vector<int> scratch_buffer(p.code.size(), -1);
  std::vector<Shape> in_shapes, out_shapes;  // reused from instruction to instruction: their memory stays
  std::vector<int> overwritten_here;  // buffers an output of the instruction took in place: one output each
  for (size_t k = 0; k < p.code.size(); ++k) {
    if (plan.precomputed[k]) {
      for (int s : p.code[k].outputs) external[s] = true;
      continue;
    }
    const Instruction& ins = p.code[k];
    if (ins.kind != Instruction::Kind::run) {  // a jump reads its condition
      for (int s : ins.inputs)
        if (const int b = buffer_of[root[s]]; b >= 0) extend(b, static_cast<int>(k));
      continue;
    }
    const std::span<const std::pair<int, int>> inplace = p.traits[k].inplace;
    const bool forwards = plan.forwarded[k] >= 0;
    overwritten_here.clear();
    for (size_t o = 0; o < ins.outputs.size(); ++o) {
      const int s = ins.outputs[o];
      if (ins.output_is_view[o] || forwards) continue;
      if (!shape[s]) {  // depends on data: allocated when it runs
        plan.report.unplanned.push_back(ins.node->op->name() + " (output " + std::to_string(o) + ", " +
                                        ins.node->origin() + ")");
        continue;
      }
      const DType dtype = ins.output_dtypes[o];
      const int64_t bytes = aligned_bytes(*shape[s], dtype);
      // An input read again at another position must be read there before it is written too:
      // allowed only where the op declares that position overwritable as well (add(a, b, a) may
      // not overwrite a: the third operand is read after the first pass wrote it). Read through
      // a view at another position (a + transpose(a)), it never is: the view's elements are
      // visited in another order.
      auto rereads_safely = [&](int src) {
        for (size_t j = 0; j < ins.inputs.size(); ++j) {
          if (ins.inputs[j] != src && root[ins.inputs[j]] == root[src]) return false;
          if (ins.inputs[j] != src) continue;
          bool declared = false;
          for (auto [out, in] : inplace) declared = declared || (out == static_cast<int>(o) && in == static_cast<int>(j));
          if (!declared) return false;
        }
        return true;
      };
      // The output may take the place of an input that dies here (also through views), is read
      // safely, and has the output's exact shape and dtype.
      auto replaceable = [&](int src) {
        return rereads_safely(src) && effective_last[src] == static_cast<int>(k) && shape[src] == shape[s] &&
               p.slot_vars[src]->type.dtype == dtype;
      };
      // A shared variable's buffer (shared_slot, or -1 for any other) takes temporaries and its
      // own new value, no other value the call hands back.
      auto may_hold = [&](int shared_slot) { return shared_slot < 0 || !is_result[s] || s == update_into[shared_slot]; };
      if (options.results_supplied && is_result[s]) {  // computed where the caller points it
        plan.supplied[s] = true;
        continue;
      }
      // A borrowed input or an overwritable shared variable that dies here is workspace: overwrite it
      // (with own_variable_only, only the variable whose new value this is).
      auto overwrite_lent = [&](bool own_variable_only) {
        for (auto [out, in] : inplace) {
          const int src = ins.inputs[in];
          if (out != static_cast<int>(o) || !borrowed[src] || borrowed_taken[src] || is_result[src] || !replaceable(src))
            continue;
          if (own_variable_only && update_into[src] != s) continue;
          const int shared_slot = update_into[src] >= 0 ? src : -1;
          const bool may_still_fail = static_cast<int>(k) < last_fallible ||
                                      (static_cast<int>(k) == last_fallible && !p.traits[k].checks_values_before_writing);
          if ((shared_slot >= 0 && may_still_fail) || !may_hold(shared_slot)) continue;
          plan.reuse_input[s] = src;
          borrowed_taken[src] = true;
          buffer_of[s] = static_cast<int>(buffers.size());
          buffers.push_back({0, static_cast<int>(k), static_cast<int>(k), -1, false, true, shared_slot});
          return true;
        }
        return false;
      };
      // A shared variable's new value in a buffer of the arena would leave it (a new buffer on every
      // call) and be copied into the variable: its variable's own buffer, where it may, comes first.
      if (overwrites_its_variable[s] && overwrite_lent(true)) continue;
      // In place: the input also owns its buffer outright and is not protected.
      int reuse = -1;
      for (auto [out, in] : inplace) {
        const int src = ins.inputs[in];
        if (out != static_cast<int>(o) || !replaceable(src)) continue;
        const int b = buffer_of[src];
        if (b < 0 || root[src] != src || external[src] || is_result[src] || !(buffers[b].in_arena || buffers[b].lent))
          continue;
        if (buffers[b].last != static_cast<int>(k) || !may_hold(buffers[b].shared_slot) ||
            std::ranges::count(overwritten_here, b))
          continue;
        reuse = b;
        overwritten_here.push_back(b);
        // Outside the arena (lent, or leaving the call) the output is written into the tensor its
        // source holds.
        plan.reuse_input[s] = src;
        break;
      }
      if (reuse >= 0) {
        buffer_of[s] = reuse;
        continue;
      }
      if (overwrite_lent(false)) continue;
      buffer_of[s] = static_cast<int>(buffers.size());
      buffers.push_back({bytes, static_cast<int>(k), static_cast<int>(k), -1, true});
    }
    // The executable's scratch lives for this one instruction.
    bool sized = !forwards && !ins.executable->scratch_depends_on_values();
    for (int s : ins.inputs) sized = sized && shape[s].has_value();
    for (int s : ins.outputs) sized = sized && shape[s].has_value();
    if (sized) {
      in_shapes.resize(ins.inputs.size());
      out_shapes.resize(ins.outputs.size());
      for (size_t i = 0; i < ins.inputs.size(); ++i) in_shapes[i] = *shape[ins.inputs[i]];
      for (size_t o = 0; o < ins.outputs.size(); ++o) out_shapes[o] = *shape[ins.outputs[o]];
      if (const int64_t bytes = ins.executable->scratch_bytes(in_shapes, out_shapes); bytes > 0) {
        scratch_buffer[k] = static_cast<int>(buffers.size());
        plan.scratch_bytes[k] = bytes;
        buffers.push_back({(bytes + kAlign - 1) / kAlign * kAlign, static_cast<int>(k), static_cast<int>(k), -1, true});
      }
    } else if (!forwards) {
      plan.scratch_offset[k] = -1;
      if (ins.executable->scratch_depends_on_values())
        plan.report.unplanned.push_back(ins.node->op->name() + " (working memory sized by values, " + ins.node->origin() + ")");
    }
    // Readers keep what they read alive; through views, the viewed buffer.
    for (int s : reads_values(k)) {
      const int b = s >= 0 ? buffer_of[root[s]] : -1;
      if (b >= 0) extend(b, static_cast<int>(k));
    }
    for (int s : ins.outputs) {
      const int b = buffer_of[root[s]];
      if (b >= 0) extend(b, std::max(static_cast<int>(k), effective_last[root[s]]));
    }
  }
  // Values the call hands back (outputs, update values), and what they view, outlive the call:
  // they get buffers of their own, outside the arena, unless the output is kept (borrowed).
  for (size_t r = 0; r < p.result_slots.size(); ++r) {
    if (r < options.kept_outputs.size() && options.kept_outputs[r]) continue;
    if (const int b = buffer_of[root[p.result_slots[r]]]; b >= 0) buffers[b].in_arena = false;
  }

  // A value the call hands back needs no check against aliasing (and no copy) when its memory is
  // a buffer of this call's own that no other result uses: not an input, constant, shared or
  // precomputed value, nor a lent buffer (except a shared variable's, for its own new value).
  std::vector<int> results_on(buffers.size(), 0);
  for (int r : p.result_slots)
    if (const int b = buffer_of[root[r]]; b >= 0) ++results_on[b];
  plan.result_owns_memory.assign(p.result_slots.size(), false);
  for (size_t r = 0; r < p.result_slots.size(); ++r) {
    const int slot = p.result_slots[r], b = buffer_of[root[slot]];
    if (b < 0 || results_on[b] != 1) continue;
    const int w = buffers[b].shared_slot;
    plan.result_owns_memory[r] = !buffers[b].lent || (w >= 0 && update_into[w] == slot);
  }

  // 3. Offsets in one arena (compile/placement.hpp).
  std::vector<int> in_arena_buffers;
  std::vector<Lifetime> lifetimes;
  for (int b = 0; b < static_cast<int>(buffers.size()); ++b)
    if (buffers[b].in_arena) {
      in_arena_buffers.push_back(b);
      lifetimes.push_back({buffers[b].bytes, buffers[b].first, std::min(buffers[b].last, end_of_call)});
    }
  std::vector<int64_t> offsets(lifetimes.size(), 0);
  plan.arena_bytes = place_buffers(lifetimes, offsets);
  for (size_t i = 0; i < in_arena_buffers.size(); ++i) buffers[in_arena_buffers[i]].offset = offsets[i];
  for (int s = 0; s < n_slots; ++s)
    if (buffer_of[s] >= 0 && buffers[buffer_of[s]].in_arena) plan.offset[s] = buffers[buffer_of[s]].offset;
  for (size_t k = 0; k < p.code.size(); ++k)
    if (scratch_buffer[k] >= 0) plan.scratch_offset[k] = buffers[scratch_buffer[k]].offset;
  plan.in_arena.assign(n_slots, false);
  for (int s = 0; s < n_slots; ++s)
    if (const int b = buffer_of[root[s]]; b >= 0 && buffers[b].in_arena && !external[s]) plan.in_arena[s] = true;
  plan.uses_arena = !in_arena_buffers.empty();
  plan.views_arena.assign(p.code.size(), false);
  // Per slot: a view whose geometry may differ from one call to the next (below).
  std::vector<uint8_t> geometry_varies(static_cast<size_t>(n_slots), 0);
  for (size_t k = 0; k < p.code.size(); ++k) {
    const Instruction& ins = p.code[k];
    if (ins.kind != Instruction::Kind::run || plan.precomputed[k]) continue;
    if (const int f = plan.forwarded[k]; f >= 0) {
      geometry_varies[ins.outputs[0]] = geometry_varies[ins.inputs[static_cast<size_t>(f)]];
      continue;
    }
    // Only a view decided by the signature stands from call to call: one whose geometry depends on
    // an input's value (a loop's rows run until a condition, a reshape to a computed shape), or on
    // such a view (the rows reversed), is made again, and so is one in a branch, which the last
    // call may not have taken.
    bool decided = !ins.conditional;
    for (int i : p.traits[k].value_inputs)
      decided = decided && static_cast<size_t>(i) < ins.inputs.size() && facts.value[ins.inputs[static_cast<size_t>(i)]].defined();
    for (int s : ins.inputs) decided = decided && !geometry_varies[s];
    bool views = decided && !ins.outputs.empty();
    for (size_t o = 0; o < ins.outputs.size(); ++o) {
      views = views && ins.output_is_view[o] && plan.in_arena[ins.outputs[o]];
      if (ins.output_is_view[o] && !decided) geometry_varies[ins.outputs[o]] = 1;
    }
    plan.views_arena[k] = views;
  }
  int64_t largest = -1;
  for (int s = 0; s < n_slots; ++s)
    if (plan.offset[s] >= 0 && buffers[buffer_of[s]].bytes > largest) {
      largest = buffers[buffer_of[s]].bytes;
      plan.largest_in_arena = s;
    }

  // 4. The report: naive is one buffer per computed value; the lower bound is the most bytes live
  // at one instruction in this schedule (in place and views applied); the peak adds the buffers
  // that leave the call to the arena.
  // Bytes starting and ending per instruction, summed along the program: linear in the program.
  std::vector<int64_t> live(p.code.size() + 2, 0);
  int64_t outside = 0;
  for (const Buffer& b : buffers) {
    live[static_cast<size_t>(b.first)] += b.bytes;
    live[static_cast<size_t>(std::min(b.last, end_of_call)) + 1] -= b.bytes;
    if (!b.in_arena) outside += b.bytes;
  }
  for (size_t k = 1; k < live.size(); ++k) live[k] += live[k - 1];
  for (size_t k = 0; k < p.code.size(); ++k)
    if (!plan.precomputed[k] && plan.forwarded[k] < 0 && p.code[k].kind == Instruction::Kind::run)
      for (size_t o = 0; o < p.code[k].outputs.size(); ++o) {
        const int s = p.code[k].outputs[o];
        if (!p.code[k].output_is_view[o] && shape[s])
          plan.report.naive_bytes += aligned_bytes(*shape[s], p.code[k].output_dtypes[o]);
      }
  for (int64_t bytes : plan.scratch_bytes) plan.report.naive_bytes += (bytes + kAlign - 1) / kAlign * kAlign;
  plan.report.lower_bound_bytes = live.empty() ? 0 : *std::max_element(live.begin(), live.end());
  plan.report.planned_peak_bytes = plan.arena_bytes + outside;
  plan.report.result_bytes = outside;
  return plan;
}

bool same_slots(const Program& a, const Program& b) { return a.n_slots == b.n_slots && a.slot_vars == b.slot_vars; }

MemoryPlan with_facts(MemoryPlan plan, SlotFacts facts, const std::vector<Shape>& input_shapes, const std::vector<Shape>& shared_shapes) {
  plan.shape = std::move(facts.shape);
  plan.value = std::move(facts.value);
  plan.signature = input_shapes;
  plan.signature.insert(plan.signature.end(), shared_shapes.begin(), shared_shapes.end());
  return plan;
}

}  // namespace

MemoryPlan plan_memory(const Program& p, const std::vector<Shape>& input_shapes, const std::vector<Shape>& shared_shapes,
                       const PlanOptions& options) {
  SlotFacts facts = infer_slot_facts(p, input_shapes, shared_shapes);
  MemoryPlan plan = plan_buffers(p, facts, options);
  return with_facts(std::move(plan), std::move(facts), input_shapes, shared_shapes);
}

MemoryPlan plan_least_memory(std::span<const Program> schedules, const std::vector<Shape>& input_shapes,
                             const std::vector<Shape>& shared_shapes, const PlanOptions& options, std::vector<int64_t>* peaks) {
  SlotFacts facts = infer_slot_facts(schedules[0], input_shapes, shared_shapes);
  MemoryPlan best = plan_buffers(schedules[0], facts, options);
  if (peaks) peaks->assign(1, best.report.planned_peak_bytes);
  for (size_t i = 1; i < schedules.size(); ++i) {
    MemoryPlan candidate = same_slots(schedules[i], schedules[0])
                               ? plan_buffers(schedules[i], facts, options)
                               : plan_memory(schedules[i], input_shapes, shared_shapes, options);
    if (peaks) peaks->push_back(candidate.report.planned_peak_bytes);
    if (candidate.report.planned_peak_bytes >= best.report.planned_peak_bytes) continue;
    best = std::move(candidate);
    best.schedule = static_cast<int>(i);
  }
  if (!best.shape.empty()) return best;  // a schedule numbering its slots otherwise, planned whole
  return with_facts(std::move(best), std::move(facts), input_shapes, shared_shapes);
}


std::string plan_text(const Program& p, const MemoryPlan& plan) {
  std::string text = "  arena " + std::to_string(plan.arena_bytes) + " bytes; planned peak " +
                     std::to_string(plan.report.planned_peak_bytes) + ", lower bound " +
                     std::to_string(plan.report.lower_bound_bytes) + ", naive " + std::to_string(plan.report.naive_bytes) + "\n";
  for (size_t k = 0; k < p.code.size(); ++k) {
    const Instruction& ins = p.code[k];
    if (ins.kind != Instruction::Kind::run) continue;
    if (plan.precomputed[k]) {
      text += "  " + std::to_string(k) + ": " + ins.node->op->name() + " computed once while planning\n";
      continue;
    }
    if (const int f = plan.forwarded[k]; f >= 0) {
      text += "  " + std::to_string(k) + ": s" + std::to_string(ins.outputs[0]) + " " + ins.node->op->name() + " is s" +
              std::to_string(ins.inputs[static_cast<size_t>(f)]) + " (nothing to do for these shapes)\n";
      continue;
    }
    for (size_t o = 0; o < ins.outputs.size(); ++o) {
      const int s = ins.outputs[o];
      text += "  " + std::to_string(k) + ": s" + std::to_string(s) + " " + ins.node->op->name() + " ";
      if (plan.shape[s]) text += std::string(dtype_name(ins.output_dtypes[o])) + shape_str(*plan.shape[s]) + " ";
      if (ins.output_is_view[o]) text += "view";
      else if (plan.reuse_input[s] >= 0) text += "in place of s" + std::to_string(plan.reuse_input[s]);
      else if (plan.offset[s] >= 0) text += "arena @" + std::to_string(plan.offset[s]);
      else if (plan.shape[s]) text += "own buffer (leaves the call)";
      else text += "allocated when it runs (shape known then)";
      text += "\n";
    }
    if (plan.scratch_offset[k] >= 0)
      text += "  " + std::to_string(k) + ": scratch " + std::to_string(plan.scratch_bytes[k]) + " bytes arena @" +
              std::to_string(plan.scratch_offset[k]) + "\n";
  }
  return text;
}

MemoryPlan unplanned(const Program& p) {
  MemoryPlan plan;
  plan.shape.assign(p.n_slots, std::nullopt);
  plan.value.assign(p.n_slots, Tensor());
  plan.precomputed.assign(p.code.size(), false);
  plan.forwarded.assign(p.code.size(), -1);
  plan.supplied.assign(p.n_slots, false);
  plan.offset.assign(p.n_slots, -1);
  plan.reuse_input.assign(p.n_slots, -1);
  plan.scratch_offset.assign(p.code.size(), -1);
  plan.scratch_bytes.assign(p.code.size(), 0);
  plan.in_arena.assign(p.n_slots, false);
  plan.views_arena.assign(p.code.size(), false);
  return plan;
}

}  // namespace kiln

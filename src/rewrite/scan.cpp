// scan: rewrites of loops. They change how a scan is wired (what its body computes per step, what
// runs once before or after it, how many rows it keeps), never what it computes: remove unused
// outputs and inputs, keep only the rows that are read (save memory), push out of the body what
// does not depend on the step (invariants), what depends only on the sequences (one batched
// computation before the loop) and sums accumulated over the steps (one reduction after it), merge
// loops over the same steps, and replace a loop of one step by its body.
#include <algorithm>
#include <unordered_set>

#include "kiln/ops.hpp"
#include "ops/blas.hpp"
#include "ops/elemwise.hpp"
#include "ops/ifelse.hpp"
#include "ops/patterns.hpp"
#include "ops/reduce.hpp"
#include "ops/scan.hpp"
#include "ops/shape.hpp"
#include "ops/subtensor.hpp"
#include "rewrite/catalogue.hpp"

namespace kiln {

namespace {

// A scan node taken apart, so that a rewrite changes its wiring and assembles a new node.
struct Parts {
  struct Sequence {
    Var outer;
    std::vector<int> taps;
    std::vector<Var> inputs;  // the body's input per tap
  };
  struct Output {
    std::vector<int> taps;  // empty: not fed back
    std::vector<Var> inputs;
    Var initial, step;
    int64_t keep = 0;
    int from = -1;  // the old node's output it replaces; -1: new
  };
  struct NonSequence {
    Var outer, input;
  };
  Var n_steps;
  bool steps_from_sequences = false;
  Var until;
  int64_t truncate_gradient = -1;
  std::vector<Sequence> sequences;
  std::vector<Output> outputs;
  std::vector<NonSequence> non_sequences;
  Loc loc;

  int first_tap(size_t i) const { return kiln::first_tap(sequences[i].taps); }
  int64_t spread(size_t i) const { return tap_spread(sequences[i].taps); }
  std::vector<Var> roots() const {
    std::vector<Var> r;
    for (const Output& o : outputs) r.push_back(o.step);
    if (until.defined()) r.push_back(until);
    return r;
  }
  // The number of steps, as a value of the outer graph: the sequences' rows less their taps'
  // spread (none below 0), or n_steps checked against them (in the shape of the rows the taps of
  // each would read, so that it holds where the loop that checked it is gone or reads fewer taps).
  Var steps() const {
    Var n = steps_from_sequences ? Var() : n_steps;
    for (size_t i = 0; i < sequences.size(); ++i) {
      const Var spread_rows = constant(Tensor::scalar(spread(i)));
      if (!steps_from_sequences) {
        n = shape_of(row_range(sequences[i].outer, spread_rows, n, loc, true), loc)[0];
        continue;
      }
      const Var rows = maximum(shape_of(sequences[i].outer, loc)[0] - spread_rows, int64_t{0}, loc);
      n = n.defined() ? minimum(n, rows, loc) : rows;
    }
    return n;
  }
  // The rows sequence i's input at tap k reads over the whole loop, one per step.
  Var rows_read(size_t i, size_t k) const {
    const Var start = constant(Tensor::scalar(int64_t{sequences[i].taps[k] - first_tap(i)}));
    return row_range(sequences[i].outer, start, steps(), loc, !steps_from_sequences);
  }
  // Replaces values the body computes (inputs of the body stay).
  void rebuild_body(const std::unordered_map<const Variable*, Var>& replace) {
    std::vector<Var> r = rebuild(roots(), replace);
    for (size_t j = 0; j < outputs.size(); ++j) outputs[j].step = r[j];
    if (until.defined()) until = r.back();
  }
};

// v with a broadcastable axis in front: a value of one step seen as rows of every step.
Var with_leading_axis(const Var& v, const Loc& loc) {
  std::vector<int64_t> pattern{-1};
  for (int64_t d = 0; d < v.ndim(); ++d) pattern.push_back(d);
  return dimshuffle(v, pattern, loc);
}

const Scan& scan_op(const Node& node) { return static_cast<const Scan&>(*node.op); }

Parts decompose(const Node& node) {
  const ScanLoop& loop = scan_op(node).loop();
  Parts p;
  p.n_steps = node.inputs[0];
  p.steps_from_sequences = loop.steps_from_sequences;
  p.truncate_gradient = loop.truncate_gradient;
  p.loc = node.loc;
  size_t outer = 1, inner = 0;
  auto body_inputs = [&](size_t count) {
    std::vector<Var> v(loop.body.inputs.begin() + static_cast<int64_t>(inner), loop.body.inputs.begin() + static_cast<int64_t>(inner + count));
    inner += count;
    return v;
  };
  for (size_t i = 0; i < loop.n_sequences(); ++i) {
    const Var& seq = node.inputs[outer++];
    p.sequences.push_back({seq, loop.sequence_taps[i], body_inputs(loop.sequence_taps[i].size())});
  }
  for (size_t j = 0; j < loop.n_outputs(); ++j) {
    Parts::Output o{loop.output_taps[j], body_inputs(loop.output_taps[j].size()), Var(), loop.body.outputs[j], loop.keep[j], static_cast<int>(j)};
    if (!o.taps.empty()) o.initial = node.inputs[outer++];
    p.outputs.push_back(std::move(o));
  }
  for (size_t m = 0; m < loop.n_non_sequences; ++m) p.non_sequences.push_back({node.inputs[outer++], loop.body.inputs[inner++]});
  if (loop.has_until) p.until = loop.body.outputs.back();
  return p;
}

// The new node's stacked outputs (one per Parts output) and, with until, its step count.
struct Assembled {
  std::vector<Var> stacked;
  Var count;
};

Assembled assemble(const Parts& p) {
  ScanLoop loop;
  std::vector<Var> outer{p.n_steps};
  for (const auto& s : p.sequences) {
    outer.push_back(s.outer);
    loop.sequence_taps.push_back(s.taps);
    loop.body.inputs.insert(loop.body.inputs.end(), s.inputs.begin(), s.inputs.end());
  }
  for (const auto& o : p.outputs) {
    loop.output_taps.push_back(o.taps);
    loop.keep.push_back(o.keep);
    loop.body.inputs.insert(loop.body.inputs.end(), o.inputs.begin(), o.inputs.end());
    loop.body.outputs.push_back(o.step);
    if (!o.taps.empty()) outer.push_back(o.initial);
  }
  for (const auto& m : p.non_sequences) {
    outer.push_back(m.outer);
    loop.body.inputs.push_back(m.input);
  }
  if (p.until.defined()) loop.body.outputs.push_back(p.until);
  loop.n_non_sequences = p.non_sequences.size();
  loop.steps_from_sequences = p.steps_from_sequences;
  loop.has_until = p.until.defined();
  loop.truncate_gradient = p.truncate_gradient;
  Assembled a;
  a.stacked = apply(std::make_shared<Scan>(std::move(loop)), outer, p.loc);
  if (p.until.defined()) {
    a.count = a.stacked.back();
    a.stacked.pop_back();
  }
  return a;
}

// The replacements of the old node's outputs by the new node's.
std::vector<Var> replacements(const Node& node, const Parts& p, const Assembled& a) {
  std::vector<Var> r(node.outputs.size());
  for (size_t j = 0; j < p.outputs.size(); ++j)
    if (p.outputs[j].from >= 0) r[static_cast<size_t>(p.outputs[j].from)] = a.stacked[j];
  if (a.count.defined()) r.back() = a.count;
  return r;
}

std::vector<Var> reassemble(const Node& node, const Parts& p) { return replacements(node, p, assemble(p)); }

// The body's values its roots read, the roots included.
std::unordered_set<const Variable*> values_read(const std::vector<Var>& roots) {
  std::unordered_set<const Variable*> read;
  for (const Var& r : roots) read.insert(r.get());
  for (Node* n : topological_order(roots))
    for (const Var& in : n->inputs) read.insert(in.get());
  return read;
}

// The body's nodes whose values (not only their shapes) the roots read: the body program computes
// a value read only for its shape from the shapes of its inputs, so moving it out of the loop would
// add work. Only those every step computes, with `every_step`: not those only a branch of an
// ifelse reads, which run in the steps that take it (moved out of the loop, they would run for
// every step, and fail where the branch could not run).
std::unordered_set<const Node*> value_nodes(const std::vector<Var>& roots, bool every_step = false) {
  return nodes_read(roots, false, !every_step);
}

// What a body value depends on: nothing that changes between steps, the sequences' rows only, or
// values fed back.
enum class Dependence { invariant, sequences, recurrent };

struct BodyAnalysis {
  std::vector<Node*> order;                  // the body's nodes, inputs before readers
  std::unordered_set<const Variable*> roots;  // what the loop reads of the body
  std::unordered_map<const Variable*, Dependence> of;
  std::unordered_map<const Variable*, Var> non_sequence_outer;  // a non-sequence's input -> its outer value
  std::unordered_map<const Variable*, std::pair<size_t, size_t>> sequence_tap;  // an input -> (sequence, tap)

  explicit BodyAnalysis(const Parts& p) : order(topological_order(p.roots())) {
    for (const Var& r : p.roots()) roots.insert(r.get());
    for (size_t i = 0; i < p.sequences.size(); ++i)
      for (size_t k = 0; k < p.sequences[i].inputs.size(); ++k) {
        of[p.sequences[i].inputs[k].get()] = Dependence::sequences;
        sequence_tap[p.sequences[i].inputs[k].get()] = {i, k};
      }
    for (const auto& o : p.outputs)
      for (const Var& in : o.inputs) of[in.get()] = Dependence::recurrent;
    for (const auto& m : p.non_sequences) {
      of[m.input.get()] = Dependence::invariant;
      non_sequence_outer[m.input.get()] = m.outer;
    }
    for (Node* n : order) {
      Dependence d = Dependence::invariant;
      for (const Var& in : n->inputs) d = std::max(d, dependence(in));
      for (const auto& o : n->outputs) of[o.get()] = d;
    }
  }
  Dependence dependence(const Var& v) const { return dependence(v.get()); }
  Dependence dependence(const Variable* v) const {
    const auto it = of.find(v);
    return it == of.end() ? Dependence::invariant : it->second;  // constants
  }
  bool is_non_sequence(const Var& v) const { return non_sequence_outer.count(v.get()) > 0; }
  bool is_root(const Var& v) const { return roots.count(v.get()) > 0; }
};

// The body's readers of each value, among the nodes given.
std::unordered_map<const Variable*, std::vector<const Node*>> readers(const std::vector<Node*>& nodes) {
  std::unordered_map<const Variable*, std::vector<const Node*>> r;
  for (const Node* n : nodes)
    for (const Var& in : n->inputs) r[in.get()].push_back(n);
  return r;
}

// The body's values that decide a shape: they stay in the body, whose shapes must be known from
// its inputs' shapes alone.
std::unordered_set<const Variable*> shape_deciding(const std::vector<Node*>& nodes) {
  std::unordered_set<const Variable*> values;
  for (const Node* n : nodes)
    for (int i : n->op->needs_input_values()) values.insert(n->inputs[static_cast<size_t>(i)].get());
  return values;
}

// ---- remove unused outputs and inputs ----

std::vector<Var> remove_unused(FunctionGraph& graph, Node& node) {
  Parts p = decompose(node);
  std::vector<bool> needed(p.outputs.size());
  for (size_t j = 0; j < p.outputs.size(); ++j) needed[j] = !graph.clients(node.outputs[j].get()).empty();
  std::unordered_set<const Variable*> read;
  for (bool grew = true; grew;) {  // an output a needed step reads through its taps is needed
    std::vector<Var> roots;
    for (size_t j = 0; j < p.outputs.size(); ++j)
      if (needed[j]) roots.push_back(p.outputs[j].step);
    if (p.until.defined()) roots.push_back(p.until);
    read = values_read(roots);
    grew = false;
    for (size_t j = 0; j < p.outputs.size(); ++j)
      for (const Var& in : p.outputs[j].inputs)
        if (!needed[j] && read.count(in.get())) needed[j] = grew = true;
  }
  auto is_read = [&](const std::vector<Var>& inputs) {
    return std::any_of(inputs.begin(), inputs.end(), [&](const Var& v) { return read.count(v.get()) > 0; });
  };
  const Var steps = p.steps();
  Parts kept = p;
  kept.outputs.clear();
  kept.sequences.clear();
  kept.non_sequences.clear();
  for (size_t j = 0; j < p.outputs.size(); ++j)
    if (needed[j]) kept.outputs.push_back(p.outputs[j]);
  for (const auto& s : p.sequences)
    if (is_read(s.inputs)) kept.sequences.push_back(s);
  for (const auto& m : p.non_sequences)
    if (read.count(m.input.get())) kept.non_sequences.push_back(m);
  if (kept.outputs.size() == p.outputs.size() && kept.sequences.size() == p.sequences.size() &&
      kept.non_sequences.size() == p.non_sequences.size())
    return {};
  if (kept.outputs.empty() && !kept.until.defined()) return {};  // nothing read: the node is dead already
  if (kept.sequences.size() < p.sequences.size()) {
    kept.n_steps = steps;  // the sequences dropped may have decided the count, or limited the one given
    kept.steps_from_sequences = false;
  }
  return reassemble(node, kept);
}

// ---- save memory: keep only the rows read after the loop ----

// -k when x reads the stacked output's k-th row from the end (x[-k], more indices after it allowed).
std::optional<int64_t> row_from_end(const Node* reader) {
  const auto* sub = reader ? dynamic_cast<const Subtensor*>(reader->op.get()) : nullptr;
  if (!sub || !sub->entries()[0].is_integer || sub->entries()[0].index >= 0) return std::nullopt;
  return -sub->entries()[0].index;
}

// True when reader is x[lead:], the steps' rows of an output with lead initial rows.
bool reads_steps(const Node* reader, int64_t lead) {
  const auto* sub = reader ? dynamic_cast<const Subtensor*>(reader->op.get()) : nullptr;
  return sub && sub->entries().size() == 1 && sub->entries()[0] == IndexEntry{false, 0, lead, std::nullopt, 1};
}

// True when reader is row_range(x, lead, count): the rows a loop that may stop early (until) wrote,
// count being its step count.
bool reads_counted_steps(const Node* reader, int64_t lead, const Variable* count) {
  if (!reader || !dynamic_cast<const RowRange*>(reader->op.get()) || reader->inputs[2].get() != count) return false;
  const auto& start = reader->inputs[1].get()->constant;
  return start && start->numel() == 1 && start->item_as_double(0) == static_cast<double>(lead);
}

std::vector<Var> save_memory(FunctionGraph& graph, Node& node) {
  Parts p = decompose(node);
  // A loop that may stop early (until) hands back the rows its steps wrote, row_range(y, lead,
  // count): only those are read through a ring, never y's own last rows, which no step may have
  // reached.
  const Variable* count = p.until.defined() ? node.outputs.back().get() : nullptr;
  // What reads the last rows of an output that keeps a ring: y[-k] itself (steps_of null), or
  // y[lead:][-k] (steps_of that y[lead:]), or row_range(y, lead, count)[-k] with until.
  struct LastRowsReader {
    size_t output;
    Node* reader;
    Node* steps_of;
  };
  std::vector<LastRowsReader> readers;
  std::vector<size_t> ringed;  // outputs that now keep a ring
  for (size_t j = 0; j < p.outputs.size(); ++j) {
    Parts::Output& o = p.outputs[j];
    if (o.keep > 0) continue;
    const int64_t lead = lead_rows(o.taps);
    int64_t last = 0;  // the most rows from the end a reader reads
    bool only_last_rows = true;
    std::vector<LastRowsReader> found;
    for (const auto& [client, position] : graph.clients(node.outputs[j].get())) {
      if (const auto k = row_from_end(client); k && !count) {
        last = std::max(last, *k);
        found.push_back({j, client, nullptr});
      } else if (count ? reads_counted_steps(client, lead, count) : lead > 0 && reads_steps(client, lead)) {
        for (const auto& [reader, at] : graph.clients(client->outputs[0].get())) {
          const auto k = row_from_end(reader);
          only_last_rows = only_last_rows && k;
          if (k) last = std::max(last, *k);
          found.push_back({j, reader, client});
        }
      } else {
        only_last_rows = false;
      }
      if (!only_last_rows) break;
    }
    if (!only_last_rows) continue;
    o.keep = std::max(last, lead + 1);  // a step reads rows up to `lead` back while writing its own
    readers.insert(readers.end(), found.begin(), found.end());
    ringed.push_back(j);
  }
  if (ringed.empty()) return {};
  const Assembled a = assemble(p);
  // The rewrite keeps the values the graph reads, the last rows, not the stacked output (which
  // now holds a ring): each reader reads its rows from the ring. After n steps (the step count
  // with until), a ring of R rows holds min(lead + n, R) positions in order from its first row,
  // the last min(n, that) of them the steps', so that reading more rows from the end than there
  // were steps fails as it did before.
  std::unordered_map<const Node*, Var> steps_rows;
  for (const LastRowsReader& r : readers) {
    Var rows = a.stacked[r.output];
    if (r.steps_of) {
      auto [it, fresh] = steps_rows.try_emplace(r.steps_of, Var());
      if (fresh) {
        const Var steps = a.count.defined() ? a.count : p.steps();
        const Var held = minimum(steps + lead_rows(p.outputs[r.output].taps), shape_of(rows, node.loc)[0], node.loc);
        const Var written = minimum(steps, held, node.loc);
        it->second = row_range(rows, held - written, written, node.loc);
      }
      rows = it->second;
    }
    std::vector<Var> inputs = r.reader->inputs;
    inputs[0] = rows;
    graph.replace(r.reader->output(0), apply(r.reader->op, inputs, r.reader->loc)[0], "scan_save_memory");
  }
  std::vector<Var> replaced = replacements(node, p, a);
  for (size_t j : ringed)
    if (p.outputs[j].from >= 0) replaced[static_cast<size_t>(p.outputs[j].from)] = Var();
  return replaced;
}

// ---- push out invariants ----

std::vector<Var> push_out_invariants(FunctionGraph&, Node& node) {
  Parts p = decompose(node);
  const BodyAnalysis body(p);
  const std::vector<Node*>& order = body.order;
  const std::unordered_set<const Node*> every_step = value_nodes(p.roots(), true);
  const auto read_by = readers(order);
  // An invariant value that reads a non-sequence, read by a value that changes per step or by the loop.
  auto reads_non_sequence = [&](const Node* n) {
    return std::any_of(n->inputs.begin(), n->inputs.end(), [&](const Var& in) { return body.dependence(in) == Dependence::invariant && !in.get()->constant; });
  };
  const std::unordered_set<const Variable*> decides_shape = shape_deciding(order);
  // Work that may reject values (an index out of range) stays: before the loop it would run even
  // when the loop runs no step, and fail a call that succeeds as built.
  std::unordered_set<const Node*> may_fail;
  for (const Node* n : order) {
    bool fails = n->op->may_fail_on_values();
    for (const Var& in : n->inputs) fails = fails || (in.get()->owner && may_fail.count(in.get()->owner));
    if (fails) may_fail.insert(n);
  }
  std::vector<Var> hoisted;
  for (Node* n : order) {
    if (!every_step.count(n) || body.dependence(n->output(0)) != Dependence::invariant || !reads_non_sequence(n) ||
        may_fail.count(n))
      continue;
    for (size_t o = 0; o < n->outputs.size(); ++o) {
      const Var v = n->output(o);
      bool frontier = body.is_root(v);
      if (auto it = read_by.find(v.get()); it != read_by.end())
        for (const Node* r : it->second) frontier = frontier || (body.dependence(r->outputs[0].get()) != Dependence::invariant);
      if (frontier && !decides_shape.count(v.get())) hoisted.push_back(v);
    }
  }
  if (hoisted.empty()) return {};
  std::unordered_map<const Variable*, Var> outer_of;
  for (const auto& m : p.non_sequences) outer_of[m.input.get()] = m.outer;
  const std::vector<Var> outer = rebuild(hoisted, outer_of);
  std::unordered_map<const Variable*, Var> inside;
  for (size_t h = 0; h < hoisted.size(); ++h) {
    const Var input = tensor(hoisted[h].dtype(), hoisted[h].type().broadcastable, hoisted[h].get()->label());
    inside[hoisted[h].get()] = input;
    p.non_sequences.push_back({outer[h], input});
  }
  p.rebuild_body(inside);
  return reassemble(node, p);
}

// ---- push out sequence work ----

// The computation over every step at once of a body node that reads only sequence rows (batched)
// and non-sequences or constants; undefined when it has no batched form here.
Var batched_node(const Node& n, const BodyAnalysis& body, const std::unordered_map<const Variable*, Var>& batched) {
  std::vector<Var> in;
  for (const Var& v : n.inputs) {
    if (auto it = batched.find(v.get()); it != batched.end()) in.push_back(it->second);
    else if (body.is_non_sequence(v)) in.push_back(body.non_sequence_outer.at(v.get()));
    else if (v.get()->constant) in.push_back(v);
    else return Var();  // an invariant computed in the body: pushed out as an invariant first
  }
  auto is_batched = [&](size_t i) { return batched.count(n.inputs[i].get()) > 0; };
  if (n.outputs.size() != 1) return Var();
  if (dynamic_cast<const Elemwise*>(n.op.get())) {
    for (size_t i = 0; i < in.size(); ++i)
      if (!is_batched(i)) in[i] = with_leading_axis(in[i], n.loc);
    return apply1(n.op, in, n.loc);
  }
  if (const auto* ds = dynamic_cast<const DimShuffle*>(n.op.get())) {
    if (body.sequence_tap.count(n.inputs[0].get())) return Var();  // a view of the sequence: nothing to gain
    std::vector<int64_t> pattern{0};
    for (int64_t d : ds->pattern()) pattern.push_back(d < 0 ? d : d + 1);
    return dimshuffle(in[0], pattern, n.loc);
  }
  if (dynamic_cast<const Dot*>(n.op.get())) {
    const int64_t a = n.inputs[0].ndim(), b = n.inputs[1].ndim();
    if (is_batched(0) && !is_batched(1) && a == 1 && b == 2) return dot(in[0], in[1], n.loc);
    if (!is_batched(0) && is_batched(1) && a == 2 && b == 1) return dot(in[1], transpose(in[0], n.loc), n.loc);
    return Var();
  }
  if (const auto* take_op = dynamic_cast<const Take*>(n.op.get()))
    if (take_op->axis() == 0 && !is_batched(0) && is_batched(1)) return apply1(n.op, in, n.loc);
  return Var();
}

std::vector<Var> push_out_sequence_work(FunctionGraph&, Node& node) {
  Parts p = decompose(node);
  if (p.until.defined() || p.sequences.empty()) return {};  // a loop that may stop early would compute rows it never reads
  const BodyAnalysis body(p);
  const std::vector<Node*>& order = body.order;
  const std::unordered_set<const Node*> valued = value_nodes(p.roots()), every_step = value_nodes(p.roots(), true);
  std::unordered_map<const Variable*, Var> batched;
  for (const auto& [input, at] : body.sequence_tap) batched[input] = p.rows_read(at.first, at.second);
  std::vector<Node*> batchable;
  for (Node* n : order) {
    if (!every_step.count(n) || body.dependence(n->output(0)) != Dependence::sequences) continue;
    const Var b = batched_node(*n, body, batched);
    if (!b.defined()) continue;
    batched[n->outputs[0].get()] = b;
    batchable.push_back(n);
  }
  // Batching pays for products and lookups (one matrix product instead of n vector products) and
  // for what the loop hands out directly (no loop at all when that is all of it). Elementwise work
  // read by work that stays fuses into the body for free, and moved out it would hold n rows.
  const auto read_by = readers(order);
  std::unordered_set<const Node*> is_pushed;
  for (auto it = batchable.rbegin(); it != batchable.rend(); ++it) {
    Node* n = *it;
    bool pays = body.is_root(n->output(0)) || !(dynamic_cast<const Elemwise*>(n->op.get()) || dynamic_cast<const DimShuffle*>(n->op.get()));
    if (auto r = read_by.find(n->outputs[0].get()); r != read_by.end())
      for (const Node* reader : r->second) pays = pays || is_pushed.count(reader);
    if (pays) is_pushed.insert(n);
  }
  std::vector<Node*> pushed;
  for (Node* n : batchable)
    if (is_pushed.count(n)) pushed.push_back(n);
  // The pushed values the body still reads become sequences of their own.
  const std::unordered_set<const Variable*> decides_shape = shape_deciding(order);
  std::unordered_map<const Variable*, Var> inside;
  for (Node* n : pushed) {
    const Var v = n->output(0);
    bool frontier = body.is_root(v);
    if (auto it = read_by.find(v.get()); it != read_by.end())
      for (const Node* r : it->second) frontier = frontier || (valued.count(r) && !is_pushed.count(r));
    if (!frontier || decides_shape.count(v.get())) continue;
    const Var input = tensor(v.dtype(), v.type().broadcastable, v.get()->label() + "[t]");
    inside[v.get()] = input;
    p.sequences.push_back({batched.at(v.get()), {0}, {input}});
  }
  if (inside.empty()) return {};
  p.rebuild_body(inside);
  // An output that is now a sequence's row at each step is those rows: no loop writes it.
  const BodyAnalysis pushed_body(p);
  std::vector<Var> rows(node.outputs.size());
  std::vector<Parts::Output> written;
  for (const Parts::Output& o : p.outputs) {
    const auto tap = pushed_body.sequence_tap.find(o.step.get());
    if (o.taps.empty() && o.keep == 0 && tap != pushed_body.sequence_tap.end()) rows[static_cast<size_t>(o.from)] = p.rows_read(tap->second.first, tap->second.second);
    else written.push_back(o);
  }
  p.outputs = written;
  if (p.outputs.empty()) return rows;
  std::vector<Var> r = reassemble(node, p);
  for (size_t i = 0; i < r.size(); ++i)
    if (rows[i].defined()) r[i] = rows[i];
  return r;
}

// ---- values of the body seen from outside ----

// Body values that depend only on shapes of the body's inputs (no step changes those: every step
// reads rows of the same shape) and on non-sequences or constants, rebuilt in the outer graph; an
// undefined Var where a value depends on what a step reads.
class ShapeLifter {
 public:
  ShapeLifter(const Parts& p, const BodyAnalysis& body, const Loc& loc) : p_(p), body_(body), loc_(loc) {}

  Var value(const Var& v) {
    if (auto it = values_.find(v.get()); it != values_.end()) return it->second;
    Var lifted;
    if (v.get()->constant) lifted = v;
    else if (body_.is_non_sequence(v)) lifted = body_.non_sequence_outer.at(v.get());
    else if (const Node* n = v.get()->owner; n && dynamic_cast<const ShapeOf*>(n->op.get())) lifted = shape(n->inputs[0]);
    else if (n) {
      std::vector<Var> in;
      for (const Var& x : n->inputs)
        if (in.push_back(value(x)); !in.back().defined()) return values_[v.get()] = Var();
      lifted = apply(n->op, in, loc_)[static_cast<size_t>(v.get()->index)];
    }
    return values_[v.get()] = lifted;
  }

  Var shape(const Var& v) {
    if (auto it = shapes_.find(v.get()); it != shapes_.end()) return it->second;
    Var lifted;
    if (v.get()->constant) lifted = shape_of(v, loc_);
    else if (body_.is_non_sequence(v)) lifted = shape_of(body_.non_sequence_outer.at(v.get()), loc_);
    else if (auto tap = body_.sequence_tap.find(v.get()); tap != body_.sequence_tap.end())
      lifted = slice(shape_of(p_.sequences[tap->second.first].outer, loc_), 0, 1, std::nullopt, 1, loc_);
    else if (const Node* n = v.get()->owner; n && !n->op->inner_graph()) {  // a nested loop's shapes: as in shape_without_value
      const std::vector<bool> read_values = value_inputs(*n);
      std::vector<Var> in;
      for (size_t i = 0; i < n->inputs.size(); ++i)
        if (in.push_back(read_values[i] ? value(n->inputs[i]) : shape(n->inputs[i])); !in.back().defined()) return shapes_[v.get()] = Var();
      lifted = apply1(std::make_shared<InferredShape>(n->op, v.get()->index, v.ndim(), read_values), in, loc_);
    }
    // A fed-back row stays undefined: its shape is the loop's to decide.
    return shapes_[v.get()] = lifted;
  }

 private:
  const Parts& p_;
  const BodyAnalysis& body_;
  Loc loc_;
  std::unordered_map<const Variable*, Var> values_, shapes_;
};

// ---- push out accumulation ----

// x when v is fill(x, 0) (zeros shaped like x), in the outer graph or in the body (x a
// non-sequence), or a non-sequence that is such zeros outside; x outside the loop.
Var zeros_shaped_like(const Var& v, const BodyAnalysis& body) {
  if (auto it = body.non_sequence_outer.find(v.get()); it != body.non_sequence_outer.end()) return zeros_shaped_like(it->second, body);
  const std::optional<Var> x = pattern::zeros_like_of(v);
  if (!x) return Var();
  if (auto it = body.non_sequence_outer.find(x->get()); it != body.non_sequence_outer.end()) return it->second;
  return *x;
}

// The final value of an output accumulated as G + e per step, computed after the loop from the
// stacked e (or the stacked values e is made of); undefined when there is no such form here.
// `stacked` gives the value a body value takes at every step.
Var accumulated(const Var& initial, const Var& e, const BodyAnalysis& body, const std::function<Var(const Var&)>& stacked, const Loc& loc) {
  const Node* n = e.get()->owner;
  if (n) {
    // inc_take(zeros shaped like x, v, i), the initial value zeros shaped like x too
    const auto* inc = dynamic_cast<const TakeInc*>(n->op.get());
    const Var like = inc ? zeros_shaped_like(n->inputs[0], body) : Var();
    const Var initial_like = zeros_shaped_like(initial, body);
    if (inc && !inc->set() && inc->axis() == 0 && like.defined() && initial_like.defined() && like.same(initial_like)) {
      const Var v = stacked(n->inputs[1]), i = stacked(n->inputs[2]);
      if (!v.defined() || !i.defined()) return Var();
      return apply1(n->op, {initial, v, i}, loc);
    }
    // the outer product dot(a[:, None], b[None, :]) of two vectors
    if (dynamic_cast<const Dot*>(n->op.get())) {
      const auto* left = pattern::op_of<DimShuffle>(n->inputs[0]);
      const auto* right = pattern::op_of<DimShuffle>(n->inputs[1]);
      if (left && right && left->pattern() == std::vector<int64_t>{0, -1} && right->pattern() == std::vector<int64_t>{-1, 0}) {
        const Var a = stacked(pattern::node_of(n->inputs[0])->inputs[0]), b = stacked(pattern::node_of(n->inputs[1])->inputs[0]);
        if (!a.defined() || !b.defined()) return Var();
        return initial + dot(transpose(a, loc), b, loc);
      }
    }
  }
  if (e.ndim() <= 1) {
    const Var all = stacked(e);
    if (all.defined()) return initial + sum(all, {0}, false, loc);
  }
  return Var();
}

std::vector<Var> push_out_accumulation(FunctionGraph& graph, Node& node) {
  Parts p = decompose(node);
  if (p.until.defined()) return {};
  const BodyAnalysis body(p);
  struct Accumulation {
    size_t output;
    std::vector<Node*> final_readers;  // x[-1] of the stacked output
    Var e;
  };
  std::vector<Accumulation> found;
  for (size_t j = 0; j < p.outputs.size(); ++j) {
    const Parts::Output& o = p.outputs[j];
    if (o.taps != std::vector<int>{-1}) continue;
    const Var& g = o.inputs[0];
    auto terms = pattern::match(o.step, ScalarOp::add);
    if (!terms || terms->size() != 2) continue;
    const int at = (*terms)[0].same(g) ? 0 : (*terms)[1].same(g) ? 1 : -1;
    if (at < 0) continue;
    const Var e = (*terms)[static_cast<size_t>(1 - at)];
    // g is read only by that sum
    std::vector<Var> others{e};
    for (size_t k = 0; k < p.outputs.size(); ++k)
      if (k != j) others.push_back(p.outputs[k].step);
    if (values_read(others).count(g.get())) continue;
    Accumulation a{j, {}, e};
    bool only_final = true;
    for (const auto& [client, position] : graph.clients(node.outputs[j].get())) {
      const auto* sub = client ? dynamic_cast<const Subtensor*>(client->op.get()) : nullptr;
      only_final = only_final && sub && sub->entries().size() == 1 && sub->entries()[0] == IndexEntry{true, -1, {}, {}, 1};
      if (!only_final) break;
      a.final_readers.push_back(client);
    }
    if (only_final && !a.final_readers.empty()) found.push_back(a);
  }
  if (found.empty()) return {};

  // Values stacked over the steps: rows of a sequence, or new outputs of the loop (not fed back).
  Parts out = p;
  std::unordered_map<const Variable*, size_t> new_output;
  std::vector<std::pair<const Variable*, Var>> pending;  // body value -> placeholder until assembled
  ShapeLifter outside(p, body, node.loc);
  std::function<Var(const Var&)> stacked = [&](const Var& v) -> Var {
    if (auto it = body.sequence_tap.find(v.get()); it != body.sequence_tap.end()) return p.rows_read(it->second.first, it->second.second);
    if (body.dependence(v) == Dependence::invariant) return Var();
    // A gradient summed down to a shape no step changes: the rows summed down after the loop, so
    // the terms of several accumulations (summed to their own shapes) are one stacked value.
    if (const Node* n = v.get()->owner; n && dynamic_cast<const SumToShape*>(n->op.get()))
      if (const Var target = outside.value(n->inputs[1]); target.defined())
        if (const Var rows = stacked(n->inputs[0]); rows.defined()) {
          std::vector<bool> broadcastable{false};
          for (bool b : v.type().broadcastable) broadcastable.push_back(b);
          const Var steps = slice(shape_of(rows, node.loc), 0, 0, 1, 1, node.loc);
          return apply1(std::make_shared<SumToShape>(broadcastable), {rows, concatenate({steps, target}, 0, node.loc)}, node.loc);
        }
    if (auto it = new_output.find(v.get()); it != new_output.end()) return pending[it->second].second;
    new_output[v.get()] = pending.size();
    const Var slot = tensor(v.dtype(), std::vector<bool>(static_cast<size_t>(v.ndim()) + 1, false), "stacked");
    pending.push_back({v.get(), slot});
    out.outputs.push_back({{}, {}, Var(), v, 0, -1});
    return slot;
  };
  std::vector<std::pair<const Accumulation*, Var>> finals;
  for (const Accumulation& a : found) {
    const Var f = accumulated(p.outputs[a.output].initial, a.e, body, stacked, node.loc);
    if (f.defined()) finals.push_back({&a, f});
  }
  if (finals.empty()) return {};
  std::vector<size_t> removed;
  for (const auto& [a, f] : finals) removed.push_back(a->output);
  std::vector<Parts::Output> outputs;
  for (size_t j = 0; j < out.outputs.size(); ++j)
    if (std::find(removed.begin(), removed.end(), j) == removed.end()) outputs.push_back(out.outputs[j]);
  out.outputs = outputs;
  const Assembled assembled = assemble(out);
  std::unordered_map<const Variable*, Var> placed;
  for (size_t j = 0; j < out.outputs.size(); ++j)
    if (out.outputs[j].from < 0)
      for (const auto& [value, slot] : pending)
        if (out.outputs[j].step.get() == value) placed[slot.get()] = assembled.stacked[j];
  std::vector<Var> final_values;
  for (const auto& [a, f] : finals) {
    final_values.push_back(rebuild({f}, placed)[0]);
    for (Node* reader : a->final_readers) {
      const Var old = reader->output(0);
      if (final_values.back().dtype() != old.dtype() || final_values.back().ndim() != old.ndim()) return {};
    }
  }
  for (size_t k = 0; k < finals.size(); ++k)
    for (Node* reader : finals[k].first->final_readers) graph.replace(reader->output(0), final_values[k], "scan_push_out_accumulation");
  return replacements(node, out, assembled);
}

// ---- a loop of one step is its body ----

std::vector<Var> inline_single_step(FunctionGraph&, Node& node) {
  const Parts p = decompose(node);
  if (p.steps_from_sequences || p.until.defined() || !pattern::is_scalar_constant(p.n_steps, 1.0)) return {};
  const Loc& loc = node.loc;
  std::unordered_map<const Variable*, Var> outer;
  for (size_t i = 0; i < p.sequences.size(); ++i)
    for (size_t k = 0; k < p.sequences[i].taps.size(); ++k)
      outer[p.sequences[i].inputs[k].get()] = p.rows_read(i, k)[VarIndex(int64_t{0}, loc)];  // n_steps checked against the rows
  for (const auto& o : p.outputs)
    for (size_t k = 0; k < o.taps.size(); ++k)
      outer[o.inputs[k].get()] = initial_rows(o.taps) == 0 ? o.initial : o.initial[VarIndex(int64_t{o.taps[k]}, loc)];
  for (const auto& m : p.non_sequences) outer[m.input.get()] = m.outer;
  const std::vector<Var> values = rebuild(p.roots(), outer);
  std::vector<Var> r;
  for (size_t j = 0; j < p.outputs.size(); ++j) {
    const auto& o = p.outputs[j];
    Var rows = with_leading_axis(values[j], loc);
    if (!o.taps.empty()) {
      const Var before = initial_rows(o.taps) == 0 ? with_leading_axis(o.initial, loc) : slice(o.initial, 0, -lead_rows(o.taps), std::nullopt, 1, loc);
      rows = concatenate({before, cast(rows, before.dtype(), loc)}, 0, loc);
    }
    if (o.keep > 0) rows = slice(rows, 0, -o.keep, std::nullopt, 1, loc);
    r.push_back(rows);
  }
  return r;
}

// ---- merge loops over the same steps ----

// What decides the number of steps: n_steps, or the sequences' rows less their taps' spread.
std::vector<std::pair<const Variable*, int64_t>> steps_key(const Parts& p) {
  if (!p.steps_from_sequences) return {{p.n_steps.get(), -1}};
  // A sequence checked to have another's shape (shaped_like: a tangent beside its sequence) has its rows.
  auto rows_of = [](const Var& v) {
    const Node* n = v.get()->owner;
    return n && dynamic_cast<const ShapedLike*>(n->op.get()) ? n->inputs[1].get() : v.get();
  };
  std::vector<std::pair<const Variable*, int64_t>> key;
  for (size_t i = 0; i < p.sequences.size(); ++i) key.push_back({rows_of(p.sequences[i].outer), p.spread(i)});
  std::sort(key.begin(), key.end());
  key.erase(std::unique(key.begin(), key.end()), key.end());
  return key;
}

bool depends_on(const Node& reader, const Node& node) {
  for (Node* n : topological_order(reader.inputs))
    if (n == &node) return true;
  return false;
}

// Whether a and b compute the same value, the pairs in `same` (body inputs) taken as equal.
bool same_value(const Var& a, const Var& b, const std::unordered_map<const Variable*, const Variable*>& same,
                std::unordered_map<const Variable*, const Variable*>& proven) {
  if (a.same(b)) return true;
  if (auto it = same.find(a.get()); it != same.end()) return it->second == b.get();
  if (auto it = proven.find(a.get()); it != proven.end()) return it->second == b.get();
  const auto &ca = a.get()->constant, &cb = b.get()->constant;
  if (ca || cb) return ca && cb && a.type() == b.type() && pattern::same_constant(*ca, *cb);
  const Node *na = a.get()->owner, *nb = b.get()->owner;
  if (!na || !nb || a.get()->index != b.get()->index || na->inputs.size() != nb->inputs.size() || !na->op->equals(*nb->op)) return false;
  for (size_t i = 0; i < na->inputs.size(); ++i)
    if (!same_value(na->inputs[i], nb->inputs[i], same, proven)) return false;
  proven[a.get()] = b.get();
  return true;
}

// Outputs of a merged loop that compute the same rows (a loop's states, computed again beside
// their tangents): fed back alike from the same initial value, with steps equal when the taps of
// every such pair are taken as equal. Each later one is dropped; `kept[k]` names the output that
// stands for output k.
std::vector<size_t> drop_equal_outputs(Parts& p) {
  const size_t n = p.outputs.size();
  std::vector<size_t> kept(n);
  for (size_t k = 0; k < n; ++k) kept[k] = k;
  std::vector<std::pair<size_t, size_t>> pairs;
  for (size_t j = 0; j < n; ++j)
    for (size_t k = j + 1; k < n; ++k) {
      const Parts::Output &a = p.outputs[j], &b = p.outputs[k];
      if (kept[k] == k && !a.taps.empty() && a.taps == b.taps && a.keep == b.keep && a.initial.same(b.initial)) {
        pairs.push_back({j, k});
        kept[k] = j;
      }
    }
  for (bool dropped = true; dropped && !pairs.empty();) {  // assume every pair equal; drop those that are not, until none is
    std::unordered_map<const Variable*, const Variable*> same;
    for (auto [j, k] : pairs)
      for (size_t t = 0; t < p.outputs[j].inputs.size(); ++t) same[p.outputs[k].inputs[t].get()] = p.outputs[j].inputs[t].get();
    std::unordered_map<const Variable*, const Variable*> proven;
    dropped = false;
    for (size_t i = 0; i < pairs.size();) {
      const auto [j, k] = pairs[i];
      if (same_value(p.outputs[k].step, p.outputs[j].step, same, proven)) {
        ++i;
        continue;
      }
      kept[k] = k;
      pairs.erase(pairs.begin() + static_cast<int64_t>(i));
      dropped = true;
    }
  }
  if (pairs.empty()) return kept;
  std::unordered_map<const Variable*, Var> replace;
  for (auto [j, k] : pairs)
    for (size_t t = 0; t < p.outputs[j].inputs.size(); ++t) replace[p.outputs[k].inputs[t].get()] = p.outputs[j].inputs[t];
  p.rebuild_body(replace);
  return kept;
}

// The nodes every call runs: those an output of the graph reaches without passing through a side
// of an ifelse (its condition is always read).
std::unordered_set<const Node*> needed_on_every_call(FunctionGraph& graph) {
  std::unordered_set<const Node*> needed;
  std::vector<const Node*> stack;
  auto reach = [&](const Var& v) {
    if (const Node* n = v.get()->owner; n && needed.insert(n).second) stack.push_back(n);
  };
  for (const Var& out : graph.outputs()) reach(out);
  while (!stack.empty()) {
    const Node* n = stack.back();
    stack.pop_back();
    const bool branches = dynamic_cast<const IfElse*>(n->op.get()) != nullptr;
    for (size_t i = 0; i < (branches ? 1 : n->inputs.size()); ++i) reach(n->inputs[i]);
  }
  return needed;
}

std::vector<Var> merge_loops(FunctionGraph& graph, Node& node) {
  const Parts p = decompose(node);
  if (p.until.defined()) return {};
  const auto key = steps_key(p);
  const auto same_steps = [&](const Parts& q) {
    if (q.until.defined() || q.truncate_gradient != p.truncate_gradient || q.steps_from_sequences != p.steps_from_sequences) return false;
    if (steps_key(q) == key) return true;
    const auto a = pattern::uniform_constant(p.n_steps), b = pattern::uniform_constant(q.n_steps);
    return !p.steps_from_sequences && a && b && *a == *b;
  };
  std::optional<std::unordered_set<const Node*>> needed;
  for (Node* other : graph.toposort()) {
    if (other == &node || !dynamic_cast<const Scan*>(other->op.get())) continue;
    bool live = false;
    for (const auto& o : other->outputs) live = live || !graph.clients(o.get()).empty();
    if (!live) continue;
    const Parts q = decompose(*other);
    if (!same_steps(q) || depends_on(node, *other) || depends_on(*other, node)) continue;
    // A loop only a branch needs runs when that branch is taken: merged with one that runs on
    // every call (or in another branch), its work would run when it is not needed (and may fail).
    if (!needed) needed = needed_on_every_call(graph);
    if (!needed->count(&node) || !needed->count(other)) continue;
    // A sequence (same taps) or non-sequence both loops read is read once.
    Parts merged = p;
    std::unordered_map<const Variable*, Var> shared_input;
    for (const auto& s : q.sequences) {
      auto same = std::find_if(p.sequences.begin(), p.sequences.end(), [&](const Parts::Sequence& t) { return t.outer.same(s.outer) && t.taps == s.taps; });
      if (same == p.sequences.end()) merged.sequences.push_back(s);
      else
        for (size_t k = 0; k < s.inputs.size(); ++k) shared_input[s.inputs[k].get()] = same->inputs[k];
    }
    for (auto o : q.outputs) {
      o.from = -2 - o.from;  // the other node's outputs
      merged.outputs.push_back(o);
    }
    for (const auto& m : q.non_sequences) {
      auto same = std::find_if(p.non_sequences.begin(), p.non_sequences.end(), [&](const Parts::NonSequence& t) { return t.outer.same(m.outer); });
      if (same == p.non_sequences.end()) merged.non_sequences.push_back(m);
      else shared_input[m.input.get()] = same->input;
    }
    if (!shared_input.empty()) merged.rebuild_body(shared_input);
    // What both loops compute (the states a loop of tangents computed again) is computed once.
    const std::vector<size_t> kept = drop_equal_outputs(merged);
    Parts once = merged;
    once.outputs.clear();
    std::vector<size_t> position(merged.outputs.size());
    for (size_t j = 0; j < merged.outputs.size(); ++j)
      if (kept[j] == j) {
        position[j] = once.outputs.size();
        once.outputs.push_back(merged.outputs[j]);
      }
    const Assembled a = assemble(once);
    std::vector<Var> r(node.outputs.size());
    for (size_t j = 0; j < merged.outputs.size(); ++j) {
      const Var stacked = a.stacked[position[kept[j]]];
      if (const int from = merged.outputs[j].from; from <= -2) graph.replace(other->output(static_cast<size_t>(-2 - from)), stacked, "scan_merge");
      else r[static_cast<size_t>(from)] = stacked;
    }
    return r;
  }
  return {};
}

}  // namespace

RewriteGroup scan_group() {
  const std::vector<std::type_index> scans{op_class<Scan>()};
  return {"scan",
          {},
          {{"scan_remove_unused", scans, remove_unused},
           {"scan_inline_single_step", scans, inline_single_step},
           // Before the push-outs: each gives its loop new sequences of its own, after which two
           // loops over the same rows no longer look alike.
           {"scan_merge", scans, merge_loops},
           {"scan_push_out_invariants", scans, push_out_invariants},
           {"scan_push_out_accumulation", scans, push_out_accumulation},
           {"scan_push_out_sequence_work", scans, push_out_sequence_work},
           {"scan_save_memory", scans, save_memory}}};
}

}  // namespace kiln

#include "ops/scan.hpp"

#include <algorithm>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "graph/function_graph.hpp"
#include "graph/inner_gradient.hpp"
#include "kiln/ops.hpp"
#include "kiln/scan.hpp"
#include "ops/ifelse.hpp"
#include "ops/shape.hpp"
#include "tensor/copy.hpp"
#include "tensor/handles.hpp"

namespace kiln {

size_t ScanLoop::first_sequence_input(size_t i) const {
  size_t first = 0;
  for (size_t k = 0; k < i; ++k) first += sequence_taps[k].size();
  return first;
}

size_t ScanLoop::first_output_input(size_t j) const {
  size_t first = first_sequence_input(n_sequences());
  for (size_t k = 0; k < j; ++k) first += output_taps[k].size();
  return first;
}

size_t ScanLoop::first_non_sequence_input() const { return first_output_input(n_outputs()); }

int first_tap(const std::vector<int>& taps) { return *std::min_element(taps.begin(), taps.end()); }

int64_t tap_spread(const std::vector<int>& taps) { return *std::max_element(taps.begin(), taps.end()) - first_tap(taps); }

int64_t lead_rows(const std::vector<int>& output_taps) { return output_taps.empty() ? 0 : -static_cast<int64_t>(first_tap(output_taps)); }

int64_t initial_rows(const std::vector<int>& output_taps) {
  return output_taps.size() == 1 && output_taps[0] == -1 ? 0 : lead_rows(output_taps);
}

namespace {

// The outer input positions of a scan node.
struct Layout {
  size_t sequences = 1, initials, non_sequences;
  explicit Layout(const ScanLoop& loop) {
    initials = sequences + loop.n_sequences();
    size_t fed_back = 0;
    for (const auto& taps : loop.output_taps) fed_back += !taps.empty();
    non_sequences = initials + fed_back;
  }
};

// The fed-back outputs' positions among the initial values.
std::vector<int> initial_index(const ScanLoop& loop) {
  std::vector<int> index;
  int next = 0;
  for (const auto& taps : loop.output_taps) index.push_back(taps.empty() ? -1 : next++);
  return index;
}

Shape without_first(const Shape& s) { return Shape(s.begin() + 1, s.end()); }
Type without_first(const Type& t) { return Type{t.dtype, std::vector<bool>(t.broadcastable.begin() + 1, t.broadcastable.end())}; }

}  // namespace

void Scan::params(OpParams& out) const {
  out << loop_.sequence_taps << loop_.output_taps << loop_.n_non_sequences << loop_.steps_from_sequences << loop_.has_until
      << loop_.truncate_gradient
      << loop_.keep;
  // The body, node by node in a topological order: each op (class and parameters) and where each
  // of its inputs comes from (a body input, a node's output, a constant's value).
  std::unordered_map<const Variable*, int64_t> id;
  for (size_t i = 0; i < loop_.body.inputs.size(); ++i) {
    id[loop_.body.inputs[i].get()] = static_cast<int64_t>(i);
    out << loop_.body.inputs[i].type();
  }
  int64_t next = static_cast<int64_t>(loop_.body.inputs.size());
  auto refer = [&](const Var& v) {
    if (auto it = id.find(v.get()); it != id.end()) {
      out << it->second;
      return;
    }
    const Variable& var = *v.get();
    if (!var.constant) throw Error("scan: the body reads '" + var.label() + "', which is neither an input nor a constant");
    const Tensor c = var.constant->contiguous();
    out << int64_t{-2} << var.type << c.shape();
    const auto* bytes = reinterpret_cast<const unsigned char*>(c.raw_data());
    for (size_t b = 0; b < c.nbytes(); ++b) out << bytes[b];
  };
  for (Node* n : topological_order(loop_.body.outputs)) {
    out << *n->op << n->inputs.size();
    for (const Var& in : n->inputs) refer(in);
    for (const auto& o : n->outputs) id[o.get()] = next++;
  }
  for (const Var& o : loop_.body.outputs) refer(o);
}

std::string Scan::name() const {
  std::string s = "scan{" + std::to_string(loop_.n_sequences()) + " sequences, " + std::to_string(loop_.n_outputs()) + " outputs";
  if (loop_.has_until) s += ", until";
  return s + "}";
}

std::vector<Type> Scan::infer_types(const std::vector<Type>& in) const {
  const Layout at(loop_);
  if (in.size() != at.non_sequences + loop_.n_non_sequences)
    throw TypeError(name() + ": takes " + std::to_string(at.non_sequences + loop_.n_non_sequences) + " inputs, got " +
                    std::to_string(in.size()));
  if (in[0].ndim() != 0 || !is_integer(in[0].dtype)) throw TypeError(name() + ": n_steps must be an integer scalar, got " + in[0].str());
  std::vector<Type> out;
  for (size_t j = 0; j < loop_.n_outputs(); ++j) {
    const Type& step = loop_.body.outputs[j].type();
    std::vector<bool> bc{false};
    bc.insert(bc.end(), step.broadcastable.begin(), step.broadcastable.end());
    out.push_back(Type{step.dtype, bc});
  }
  if (loop_.has_until) out.push_back(Type{DType::i64, {}});
  return out;
}

int64_t Scan::steps(const std::vector<Shape>& in, int64_t n_steps) const {
  const Layout at(loop_);
  std::optional<int64_t> allowed;
  // A sequence shorter than its taps' spread allows no step (Theano's slices of it are empty).
  for (size_t i = 0; i < loop_.n_sequences(); ++i) {
    const int64_t rows = std::max<int64_t>(in[at.sequences + i][0] - loop_.spread(i), 0);
    allowed = allowed ? std::min(*allowed, rows) : rows;
  }
  if (loop_.steps_from_sequences) return *allowed;
  if (n_steps < 0) throw ShapeError(name() + ": n_steps is " + std::to_string(n_steps) + "; it must be 0 or more");
  if (allowed && n_steps > *allowed)
    throw ShapeError(name() + ": n_steps is " + std::to_string(n_steps) + " but the sequences allow only " +
                     std::to_string(*allowed) + " steps (the loop runs to the shortest sequence)");
  return n_steps;
}

std::vector<Shape> Scan::body_input_shapes(const std::vector<Shape>& in) const {
  const Layout at(loop_);
  std::vector<Shape> shapes;
  for (size_t i = 0; i < loop_.n_sequences(); ++i)
    for (size_t k = 0; k < loop_.sequence_taps[i].size(); ++k) shapes.push_back(without_first(in[at.sequences + i]));
  const std::vector<int> initial = initial_index(loop_);
  for (size_t j = 0; j < loop_.n_outputs(); ++j) {
    if (initial[j] < 0) continue;
    const Shape& s = in[at.initials + static_cast<size_t>(initial[j])];
    for (size_t k = 0; k < loop_.output_taps[j].size(); ++k) shapes.push_back(loop_.initial_rows(j) ? without_first(s) : s);
  }
  for (size_t i = 0; i < loop_.n_non_sequences; ++i) shapes.push_back(in[at.non_sequences + i]);
  return shapes;
}

std::vector<Shape> Scan::infer_shapes(const std::vector<Shape>& in, const std::vector<const Tensor*>& values) const {
  return stacked_shapes(in, values, [&](const std::vector<Shape>& inputs) { return infer_graph_shapes(loop_.body, inputs); });
}

std::vector<Shape> Scan::stacked_shapes(const std::vector<Shape>& in, const std::vector<const Tensor*>& values,
                                        const std::function<std::vector<Shape>(const std::vector<Shape>&)>& body_shapes) const {
  if (!values.at(0)) throw ShapeError(name() + ": the number of steps is known only at run time");
  const int64_t n = steps(in, static_cast<int64_t>(values[0]->item<double>()));
  const Layout at(loop_);
  const std::vector<int> initial = initial_index(loop_);
  for (size_t j = 0; j < loop_.n_outputs(); ++j) {
    if (initial[j] < 0 || !loop_.initial_rows(j)) continue;
    const Shape& s = in[at.initials + static_cast<size_t>(initial[j])];
    if (s.empty() || s[0] < loop_.initial_rows(j))
      throw ShapeError(name() + ": the initial value of output " + std::to_string(j) + " " + shape_str(s) + " must hold " +
                       std::to_string(loop_.initial_rows(j)) + " rows, one per step its taps reach back");
  }
  const std::vector<Shape> inputs = body_input_shapes(in);
  const std::vector<Shape> step = body_shapes(inputs);
  for (size_t j = 0; j < loop_.n_outputs(); ++j)
    if (!loop_.output_taps[j].empty() && step[j] != inputs[loop_.first_output_input(j)])
      throw ShapeError(name() + ": output " + std::to_string(j) + " is " + shape_str(step[j]) + " at each step but it is fed back " +
                       "as " + shape_str(inputs[loop_.first_output_input(j)]) + " (its initial value's shape): the body must keep it");
  std::vector<Shape> out;
  for (size_t j = 0; j < loop_.n_outputs(); ++j) {
    const int64_t rows = loop_.lead_rows(j) + n;
    Shape s{loop_.keep[j] > 0 ? std::min(loop_.keep[j], rows) : rows};
    s.insert(s.end(), step[j].begin(), step[j].end());
    out.push_back(s);
  }
  if (loop_.has_until) out.push_back(Shape{});
  return out;
}

std::vector<Shape> infer_graph_shapes(const InnerGraph& graph, const std::vector<Shape>& input_shapes) {
  std::unordered_map<const Variable*, Shape> shape;
  std::unordered_map<const Variable*, Tensor> value;  // of shape_of nodes, for the ops that read them
  for (size_t i = 0; i < graph.inputs.size(); ++i) shape[graph.inputs[i].get()] = input_shapes.at(i);
  auto shape_of = [&](const Var& v) -> const Shape& {
    if (auto it = shape.find(v.get()); it != shape.end()) return it->second;
    const Variable& var = *v.get();
    if (!var.constant) throw Error("scan: the body reads '" + var.label() + "', which is neither an input nor a constant");
    return shape.emplace(v.get(), var.constant->shape()).first->second;
  };
  for (Node* n : topological_order(graph.outputs)) {
    std::vector<Shape> shapes;
    std::vector<const Tensor*> values(n->inputs.size(), nullptr);
    for (const Var& in : n->inputs) shapes.push_back(shape_of(in));
    for (int i : n->op->needs_input_values()) {
      const Variable& var = *n->inputs[static_cast<size_t>(i)].get();
      if (var.constant) values[static_cast<size_t>(i)] = &*var.constant;
      else if (auto it = value.find(&var); it != value.end()) values[static_cast<size_t>(i)] = &it->second;
      else if (!n->op->infers_shapes_without_values())
        throw ShapeError("scan: the shape of the body's " + n->op->name() + " (" + n->origin() +
                         ") depends on values computed in the body; only constants and shapes are known before the loop");
    }
    const std::vector<Shape> out = n->op->infer_shapes(shapes, values);
    for (size_t o = 0; o < out.size(); ++o) shape[n->outputs[o].get()] = out[o];
    if (dynamic_cast<const ShapeOf*>(n->op.get())) {
      std::vector<int64_t> dims(shapes[0].begin(), shapes[0].end());
      value[n->outputs[0].get()] = Tensor::from(dims, Shape{static_cast<int64_t>(dims.size())});
    }
  }
  std::vector<Shape> out;
  for (const Var& o : graph.outputs) out.push_back(shape_of(o));
  return out;
}

namespace {

void check_row_index(const char* op, const Type& t) {
  if (t.ndim() != 0 || !is_integer(t.dtype))
    throw TypeError(std::string(op) + ": a row index must be an integer scalar, got " + t.str());
}

int64_t index_value(const Tensor& t) { return static_cast<int64_t>(t.item<double>()); }

}  // namespace

std::vector<Type> RowRange::infer_types(const std::vector<Type>& in) const {
  if (in[0].ndim() < 1) throw TypeError("row_range: needs a value with rows (at least one dimension), got " + in[0].str());
  check_row_index("row_range", in[1]);
  check_row_index("row_range", in[2]);
  Type t = in[0];
  t.broadcastable[0] = false;
  return {t};
}

std::vector<Shape> RowRange::infer_shapes(const std::vector<Shape>& in, const std::vector<const Tensor*>& values) const {
  if (!values.at(1) || !values.at(2)) throw ShapeError("row_range: the rows are known only at run time");
  const int64_t start = index_value(*values[1]), count = index_value(*values[2]);
  // No row: nothing read, wherever it starts (a sequence shorter than its taps' spread gives a
  // loop of no steps, as Theano's empty slices of it do).
  if (count == 0) {
    Shape s = in[0];
    s[0] = 0;
    return {s};
  }
  if (reads_loop_steps_ && count < 0)
    throw ShapeError("scan: n_steps is " + std::to_string(count) + "; it must be 0 or more");
  if (reads_loop_steps_ && start + count > in[0][0])
    throw ShapeError("scan: n_steps is " + std::to_string(count) + " but a sequence of " + std::to_string(in[0][0]) +
                     " rows allows only " + std::to_string(std::max<int64_t>(in[0][0] - start, 0)) +
                     " steps (the loop runs to the shortest sequence)");
  if (start < 0 || count < 0 || start + count > in[0][0])
    throw ShapeError("row_range: rows [" + std::to_string(start) + ", " + std::to_string(start + count) + ") of " +
                     shape_str(in[0]) + " do not exist");
  Shape s = in[0];
  s[0] = count;
  return {s};
}

std::vector<Var> RowRange::L_op(const Node& node, const std::vector<Var>& gouts) const {
  return {pad_rows(gouts[0], node.inputs[0], node.inputs[1], node.loc), Var(), Var()};
}

std::vector<Type> PadRows::infer_types(const std::vector<Type>& in) const {
  if (in[0].dtype != in[1].dtype || in[0].ndim() != in[1].ndim() || in[0].ndim() < 1)
    throw TypeError("pad_rows: cannot pad rows of " + in[0].str() + " into " + in[1].str() + "; they must have the same dtype " +
                    "and number of dimensions");
  check_row_index("pad_rows", in[2]);
  return {in[1]};
}

std::vector<Shape> PadRows::infer_shapes(const std::vector<Shape>& in, const std::vector<const Tensor*>&) const {
  if (in[0][0] > in[1][0] || !std::equal(in[0].begin() + 1, in[0].end(), in[1].begin() + 1))
    throw ShapeError("pad_rows: cannot pad " + shape_str(in[0]) + " to " + shape_str(in[1]));
  return {in[1]};
}

std::vector<Var> PadRows::L_op(const Node& node, const std::vector<Var>& gouts) const {
  const Var& g = node.inputs[0];
  return {row_range(gouts[0], node.inputs[2], shape_of(g, node.loc)[0], node.loc), Var(), Var()};
}

Var row_range(const Var& x, const Var& start, const Var& count, const Loc& loc, bool reads_loop_steps) {
  return apply1(std::make_shared<RowRange>(reads_loop_steps), {x, start, count}, loc);
}

Var pad_rows(const Var& g, const Var& like, const Var& start, const Loc& loc) {
  return apply1(std::make_shared<PadRows>(), {g, like, start}, loc);
}

namespace {

class PadRowsKernel final : public KernelOf<PadRows> {
 public:
  using KernelOf::KernelOf;
  void run(InputValues in, OutputValues out, std::span<std::byte>) const override {
    Tensor& o = out[0];
    const Tensor& g = in[0];
    const int64_t start = index_value(in[2]);
    if (start < 0 || start + g.shape()[0] > o.shape()[0])
      throw ShapeError("pad_rows: " + std::to_string(g.shape()[0]) + " rows at row " + std::to_string(start) + " do not fit in " +
                       shape_str(o.shape()));
    std::memset(o.raw_data(), 0, o.nbytes());
    copy_broadcast(o.view(g.shape(), o.strides(), o.offset() + start * o.strides()[0]), g);
  }
};

class RowRangeKernel final : public KernelOf<RowRange> {
 public:
  using KernelOf::KernelOf;
  void run(InputValues in, OutputValues out, std::span<std::byte>) const override {
    const Tensor& x = in[0];
    Dims shape{std::span<const int64_t>(x.shape())};
    const int64_t start = index_value(in[1]);
    shape[0] = index_value(in[2]);
    // No rows: no element is read, and start may lie past the end (rows stored reversed: before
    // the storage's first byte).
    set_view(out[0], x, shape, x.strides(), shape[0] == 0 ? x.offset() : x.offset() + start * x.strides()[0]);
  }
};

}  // namespace

namespace {

Tensor row_of(const Tensor& base, int64_t r) {
  return base.view(without_first(base.shape()), Shape(base.strides().begin() + 1, base.strides().end()),
                   base.offset() + r * base.strides()[0]);
}

// A body input or destination stepping through the rows of a value: re-pointed in place while it
// stays on the same value.
struct RowCursor {
  Tensor* slot = nullptr;
  const Tensor* on = nullptr;  // the value slot views rows of
  void row(const Tensor& base, int64_t r) {
    if (on == &base) {
      TensorHandles::move(*slot, base.offset() + r * base.strides()[0]);
      return;
    }
    *slot = row_of(base, r);
    on = &base;
  }
};

// Runs the body once per step over the body program compiled with the function (no allocation per
// step): the initial values are copied to the leading rows of their outputs, then each step points
// the body's inputs at this step's rows (of the sequences and of the outputs written before) and
// its outputs at their rows, which the body writes in place.
class ScanKernel final : public KernelOf<Scan> {
 public:
  ScanKernel(std::shared_ptr<const Scan> op, const Node& node, const MakeContext& context) : KernelOf(std::move(op), node) {
    if (!context.inner) throw Error(this->op().name() + " (" + node.origin() + ") runs only inside a compiled function");
    body_ = context.inner->compile(this->op().loop().body);
    if (this->op().loop().has_until) cond_dtype_ = this->op().loop().body.outputs.back().dtype();
  }

  int64_t scratch_bytes(const std::vector<Shape>& in, const std::vector<Shape>&) const override {
    return body_->arena_bytes(op().body_input_shapes(in));
  }

  // By the compiled body's plan, which knows the shapes the body computes from shapes.
  std::vector<Shape> infer_shapes(const Node&, const std::vector<Shape>& in, const std::vector<const Tensor*>& values) const override {
    return op().stacked_shapes(in, values, [&](const std::vector<Shape>& inputs) { return body_->output_shapes(inputs); });
  }

  void run(InputValues in, OutputValues out, std::span<std::byte> scratch) const override {
    const Scan& scan = op();
    const ScanLoop& loop = scan.loop();
    const Layout at(loop);
    std::vector<Shape> shapes;
    for (const Tensor& t : in) shapes.push_back(t.shape());
    const int64_t n = scan.steps(shapes, static_cast<int64_t>(in[0].item<double>()));
    // The row of output j that holds position p (the initial rows, then one per step).
    auto row = [&](size_t j, int64_t p) { return loop.keep[j] > 0 ? p % loop.keep[j] : p; };
    const std::vector<int> initial = initial_index(loop);
    for (size_t j = 0; j < loop.n_outputs(); ++j) {
      if (initial[j] < 0) continue;
      const Tensor& init = in[at.initials + static_cast<size_t>(initial[j])];
      const int64_t lead = loop.lead_rows(j);
      for (int64_t p = 0; p < lead; ++p)
        copy_broadcast(row_of(out[j], row(j, p)), loop.initial_rows(j) ? row_of(init, init.shape()[0] - lead + p) : init);
    }

    std::unique_ptr<InnerRun> body = body_->start(scan.body_input_shapes(shapes), scratch);
    for (size_t i = 0; i < loop.n_non_sequences; ++i) body->input(loop.first_non_sequence_input() + i) = in[at.non_sequences + i];
    std::vector<RowCursor> sequence_rows, tap_rows, destinations(loop.n_outputs());
    for (size_t i = 0; i < loop.n_sequences(); ++i)
      for (size_t k = 0; k < loop.sequence_taps[i].size(); ++k)
        sequence_rows.push_back({&body->input(loop.first_sequence_input(i) + k)});
    for (size_t j = 0; j < loop.n_outputs(); ++j)
      for (size_t k = 0; k < loop.output_taps[j].size(); ++k) tap_rows.push_back({&body->input(loop.first_output_input(j) + k)});
    for (size_t j = 0; j < loop.n_outputs(); ++j) destinations[j].slot = &body->destination(j);
    Tensor cond;
    if (loop.has_until) {
      cond = Tensor::empty({}, cond_dtype_);
      body->destination(loop.n_outputs()) = cond;
    }

    int64_t done = 0;
    for (int64_t s = 0; s < n; ++s) {
      size_t next = 0;
      for (size_t i = 0; i < loop.n_sequences(); ++i)
        for (int tap : loop.sequence_taps[i]) sequence_rows[next++].row(in[at.sequences + i], s + tap - loop.first_tap(i));
      next = 0;
      for (size_t j = 0; j < loop.n_outputs(); ++j)
        for (int tap : loop.output_taps[j]) tap_rows[next++].row(out[j], row(j, loop.lead_rows(j) + s + tap));
      for (size_t j = 0; j < loop.n_outputs(); ++j) destinations[j].row(out[j], row(j, loop.lead_rows(j) + s));
      body->step();
      done = s + 1;
      if (loop.has_until && cond.item<double>() != 0) break;
    }
    // A ring of the last k positions is handed back in order.
    for (size_t j = 0; j < loop.n_outputs(); ++j) {
      const int64_t k = loop.keep[j], written = loop.lead_rows(j) + done;
      if (k <= 0 || written <= k || written % k == 0) continue;
      std::byte* rows = out[j].raw_data();
      const size_t row_bytes = out[j].nbytes() / static_cast<size_t>(k);
      std::rotate(rows, rows + static_cast<size_t>(written % k) * row_bytes, rows + out[j].nbytes());
    }
    if (loop.has_until) out[loop.n_outputs()].data<int64_t>()[0] = done;
  }

 private:
  std::unique_ptr<InnerProgram> body_;
  DType cond_dtype_ = DType::b8;
};

}  // namespace

void add_scan_kernels(KernelTable& table) {
  table.add<Scan, ScanKernel>();
  table.add<RowRange, RowRangeKernel>();
  table.add<PadRows, PadRowsKernel>();
}

namespace {

Var placeholder(const Type& type, const std::string& name) { return tensor(type.dtype, type.broadcastable, name); }

Var index_constant(int64_t i) { return constant(Tensor::scalar(i)); }

Var reverse_rows(const Var& x, const Loc& loc) { return slice(x, 0, std::nullopt, std::nullopt, -1, loc); }

}  // namespace

// Back-propagation through time: a second scan runs the steps from the last to the first. Each of
// its steps replays the forward body on the values that step read (rows of the sequences and of
// the stacked outputs, read backwards through reversed views) and takes its vector-Jacobian
// product (Lop) with the cotangent of the step's outputs: the output gradient of that step plus
// what later steps sent back through the taps, carried as fed-back outputs (one per row a tap
// reaches back). The non-sequences' gradients are summed in fed-back accumulators; the sequences'
// gradients are stacked and padded back into their rows. truncate_gradient k runs only the last k
// steps back; the initial values then get no gradient from the steps.
std::vector<Var> Scan::L_op(const Node& node, const std::vector<Var>& gouts) const {
  const ScanLoop& loop = loop_;
  const Loc& loc = node.loc;
  const Layout at(loop);
  for (int64_t k : loop.keep)
    if (k > 0) throw Error(name() + " (" + node.origin() + "): no gradient of a scan that keeps only its last rows");
  std::vector<Var> grads(node.inputs.size()), outputs;
  for (size_t o = 0; o < node.outputs.size(); ++o) outputs.push_back(node.output(o));
  auto carries = [&](size_t j) { return is_float(outputs[j].dtype()); };
  bool any = false;
  for (size_t j = 0; j < loop.n_outputs(); ++j) any = any || (gouts[j].defined() && carries(j));
  if (!any) return grads;

  const Var n = loop.has_until ? outputs.back() : shape_of(outputs[0], loc)[0] - loop.lead_rows(0);
  const bool truncated = loop.truncate_gradient >= 0;
  const Var steps_back = truncated ? minimum(n, index_constant(loop.truncate_gradient), loc) : n;
  // A value whose row t + c + tap forward step t reads at each tap, seen from the last step back.
  auto backwards = [&](const Var& v, int64_t c, const std::vector<int>& taps, std::vector<int>& back_taps) {
    const int64_t last = first_tap(taps) + tap_spread(taps);
    for (int tap : taps) back_taps.push_back(-tap);
    return reverse_rows(row_range(v, index_constant(0), n + (c + last), loc), loc);
  };

  ScanLoop back;
  std::vector<Var> outer{steps_back}, initials, non_sequences;
  std::vector<Var> sequence_inputs, state_inputs, non_sequence_inputs;
  std::unordered_map<const Variable*, Var> replay;  // the forward body's inputs -> the backward body's
  std::vector<Var> wrt;                              // the forward body's inputs that carry gradients
  auto read_as = [&](const Var& forward_input, std::vector<Var>& inputs) {
    Var p = placeholder(forward_input.type(), forward_input.get()->label());
    replay[forward_input.get()] = p;
    inputs.push_back(p);
    if (is_float(p.dtype())) wrt.push_back(p);
  };
  for (size_t i = 0; i < loop.n_sequences(); ++i) {
    back.sequence_taps.emplace_back();
    outer.push_back(backwards(node.inputs[at.sequences + i], -loop.first_tap(i), loop.sequence_taps[i], back.sequence_taps.back()));
    for (size_t k = 0; k < loop.sequence_taps[i].size(); ++k) read_as(loop.body.inputs[loop.first_sequence_input(i) + k], sequence_inputs);
  }
  for (size_t j = 0; j < loop.n_outputs(); ++j) {
    if (loop.output_taps[j].empty()) continue;
    back.sequence_taps.emplace_back();
    outer.push_back(backwards(outputs[j], loop.lead_rows(j), loop.output_taps[j], back.sequence_taps.back()));
    for (size_t k = 0; k < loop.output_taps[j].size(); ++k) read_as(loop.body.inputs[loop.first_output_input(j) + k], sequence_inputs);
  }
  std::vector<Var> cotangent(loop.n_outputs());
  for (size_t j = 0; j < loop.n_outputs(); ++j) {
    if (!gouts[j].defined() || !carries(j)) continue;
    back.sequence_taps.emplace_back();
    outer.push_back(backwards(gouts[j], loop.lead_rows(j), {0}, back.sequence_taps.back()));
    cotangent[j] = placeholder(without_first(outputs[j].type()), "output" + std::to_string(j) + " gradient");
    sequence_inputs.push_back(cotangent[j]);
  }
  // The values the steps computed, as the stacked outputs saved them: the gradient reads them
  // there instead of computing them again (tanh's gradient reads tanh's value).
  std::vector<Var> saved(loop.n_outputs());
  for (size_t j = 0; j < loop.n_outputs(); ++j) {
    if (!loop.body.outputs[j].get()->owner) continue;  // a body input or a constant handed on
    back.sequence_taps.emplace_back();
    outer.push_back(backwards(outputs[j], loop.lead_rows(j), {0}, back.sequence_taps.back()));
    saved[j] = placeholder(without_first(outputs[j].type()), "output" + std::to_string(j) + "[t]");
    sequence_inputs.push_back(saved[j]);
  }
  // Fed-back outputs of the backward loop: per forward output, the cotangents pending for the
  // rows its taps reach back to (pending[j][r]: for the row r steps before the current one), then
  // per non-sequence its gradient so far.
  std::vector<std::vector<Var>> pending(loop.n_outputs());
  for (size_t j = 0; j < loop.n_outputs(); ++j) {
    if (loop.output_taps[j].empty() || !carries(j)) continue;
    const Var zero = zeros_like(outputs[j][VarIndex(0, loc)], loc);
    for (int64_t r = 0; r < loop.lead_rows(j); ++r) {
      pending[j].push_back(placeholder(zero.type(), "output" + std::to_string(j) + " pending[" + std::to_string(r) + "]"));
      state_inputs.push_back(pending[j].back());
      initials.push_back(zero);
      back.output_taps.push_back({-1});
    }
  }
  const size_t first_non_sequence = loop.first_non_sequence_input();
  std::vector<Var> total;  // per non-sequence carrying a gradient, its running sum
  for (size_t m = 0; m < loop.n_non_sequences; ++m) {
    const Var& w = node.inputs[at.non_sequences + m];
    non_sequences.push_back(w);
    read_as(loop.body.inputs[first_non_sequence + m], non_sequence_inputs);
    if (!is_float(w.dtype())) continue;
    total.push_back(placeholder(w.type(), w.get()->label() + " gradient"));
    state_inputs.push_back(total.back());
    initials.push_back(zeros_like(w, loc));
    back.output_taps.push_back({-1});
  }

  // The backward body: the forward step replayed, and its vector-Jacobian product.
  const std::vector<Var> step_outputs(loop.body.outputs.begin(), loop.body.outputs.begin() + static_cast<int64_t>(loop.n_outputs()));
  const std::vector<Var> replayed = rebuild(step_outputs, replay);
  std::vector<Var> f, eval_points;
  for (size_t j = 0; j < loop.n_outputs(); ++j) {
    Var c = cotangent[j];
    if (!pending[j].empty()) c = c.defined() ? c + pending[j][0] : pending[j][0];
    if (!c.defined()) continue;
    f.push_back(replayed[j]);
    eval_points.push_back(c);
  }
  std::vector<Var> d = inner_vjp(f, wrt, eval_points);
  std::unordered_map<const Variable*, Var> from_saved;
  for (size_t j = 0; j < loop.n_outputs(); ++j)
    if (saved[j].defined()) from_saved[replayed[j].get()] = saved[j];
  d = rebuild(d, from_saved);
  std::unordered_map<const Variable*, Var> gradient_of;  // backward placeholder -> this step's gradient
  for (size_t w = 0; w < wrt.size(); ++w) gradient_of[wrt[w].get()] = d[w];
  auto step_gradient = [&](size_t body_input) { return gradient_of.at(replay.at(loop.body.inputs[body_input].get()).get()); };

  std::vector<Var> back_outputs;
  for (size_t j = 0; j < loop.n_outputs(); ++j) {
    if (pending[j].empty()) continue;
    const std::vector<int>& taps = loop.output_taps[j];
    for (int64_t r = 0; r < loop.lead_rows(j); ++r) {
      Var next = r + 1 < loop.lead_rows(j) ? pending[j][static_cast<size_t>(r + 1)] : Var();
      for (size_t k = 0; k < taps.size(); ++k)
        if (taps[k] == -(r + 1)) {
          const Var g = step_gradient(loop.first_output_input(j) + k);
          next = next.defined() ? next + g : g;
        }
      back_outputs.push_back(next);
    }
  }
  for (size_t m = 0, next = 0; m < loop.n_non_sequences; ++m)
    if (is_float(node.inputs[at.non_sequences + m].dtype()))
      back_outputs.push_back(total[next++] + step_gradient(first_non_sequence + m));
  const size_t first_sequence_gradient = back_outputs.size();
  for (size_t i = 0; i < loop.n_sequences(); ++i) {
    if (!is_float(node.inputs[at.sequences + i].dtype())) continue;
    for (size_t k = 0; k < loop.sequence_taps[i].size(); ++k) {
      back_outputs.push_back(step_gradient(loop.first_sequence_input(i) + k));
      back.output_taps.push_back({});
    }
  }
  for (const auto* kind : {&sequence_inputs, &state_inputs, &non_sequence_inputs})
    back.body.inputs.insert(back.body.inputs.end(), kind->begin(), kind->end());
  back.body.outputs = back_outputs;
  back.n_non_sequences = non_sequence_inputs.size();
  back.keep.assign(back.n_outputs(), 0);
  outer.insert(outer.end(), initials.begin(), initials.end());
  outer.insert(outer.end(), non_sequences.begin(), non_sequences.end());
  const std::vector<Var> stacked = apply(std::make_shared<Scan>(std::move(back)), outer, loc);

  // The gradients of the forward scan's inputs.
  size_t next = 0;
  auto final_value = [&](size_t b) { return stacked[b][VarIndex(-1, loc)]; };
  std::vector<int> initial = initial_index(loop);
  for (size_t j = 0; j < loop.n_outputs(); ++j) {
    if (pending[j].empty()) continue;
    const int64_t lead = loop.lead_rows(j);
    std::vector<Var> rows;  // the gradient of each lead row of output j
    for (int64_t q = 0; q < lead; ++q) {
      Var g = final_value(next + static_cast<size_t>(lead - 1 - q));
      if (truncated) g = ifelse(n <= loop.truncate_gradient, g, zeros_like(g, loc), loc);
      if (gouts[j].defined()) g = g + gouts[j][VarIndex(q, loc)];
      rows.push_back(g);
    }
    next += static_cast<size_t>(lead);
    const Var& init = node.inputs[at.initials + static_cast<size_t>(initial[j])];
    grads[at.initials + static_cast<size_t>(initial[j])] =
        loop.initial_rows(j) ? pad_rows(stack(rows, 0, loc), init, shape_of(init, loc)[0] - lead, loc) : rows[0];
  }
  for (size_t m = 0; m < loop.n_non_sequences; ++m)
    if (is_float(node.inputs[at.non_sequences + m].dtype())) grads[at.non_sequences + m] = final_value(next++);
  next = first_sequence_gradient;
  for (size_t i = 0; i < loop.n_sequences(); ++i) {
    const Var& sequence = node.inputs[at.sequences + i];
    if (!is_float(sequence.dtype())) continue;
    Var sum;
    for (int tap : loop.sequence_taps[i]) {
      const Var start = (n - steps_back) + (tap - loop.first_tap(i));
      const Var g = pad_rows(reverse_rows(stacked[next++], loc), sequence, start, loc);
      sum = sum.defined() ? sum + g : g;
    }
    grads[at.sequences + i] = sum;
  }
  return grads;
}

// ---- Building a scan from the user's body ----

namespace {

// What the body of the scan being built registers while it runs: its shared-variable updates and
// its stop condition. One per thread; scans built inside a body nest.
struct ScanBuild {
  std::vector<std::pair<Shared, Var>> updates;
  // The streams of random draws in the body (and in loops nested in it): updated per step.
  std::vector<std::pair<Shared, Var>> stream_updates;
  Var until;
  ScanBuild* outer = nullptr;
};
thread_local ScanBuild* building = nullptr;

class BuildScope {
 public:
  explicit BuildScope(ScanBuild& build) : build_(build) {
    build_.outer = building;
    building = &build_;
  }
  ~BuildScope() { building = build_.outer; }
  BuildScope(const BuildScope&) = delete;
  BuildScope& operator=(const BuildScope&) = delete;

 private:
  ScanBuild& build_;
};

std::string where(const Loc& loc) { return " (scan at " + loc_str(loc) + ")"; }

}  // namespace

Var until(const Var& cond, Loc loc) {
  if (!building) throw TypeError("until: only a scan's body may return until(cond) (at " + loc_str(loc) + ")");
  if (!cond.defined() || cond.ndim() != 0)
    throw TypeError("until: the condition must be a scalar (0-d), got " + (cond.defined() ? cond.type().str() : std::string("an empty Var")) +
                    " (at " + loc_str(loc) + "); reduce it first, e.g. with max() or sum()");
  building->until = cond;
  return cond;
}

void scan_update(const Shared& variable, const Var& value, Loc loc) {
  if (!building) throw TypeError("scan_update: only a scan's body may update a shared variable per step (at " + loc_str(loc) + ")");
  if (!variable.defined() || !value.defined()) throw TypeError("scan_update: an empty Var (at " + loc_str(loc) + ")");
  if (value.dtype() != variable.dtype() || value.ndim() != variable.ndim())
    throw TypeError("scan_update: the new value of '" + variable.get()->label() + "' " + variable.type().str() + " has type " +
                    value.type().str() + " (at " + loc_str(loc) + "); it must keep the dtype and number of dimensions (cast it)");
  for (const auto& [s, v] : building->updates)
    if (s.same(variable))
      throw TypeError("scan_update: '" + variable.get()->label() + "' is updated twice in one body (at " + loc_str(loc) + ")");
  building->updates.push_back({variable, value});
}

namespace {

// A scan node and how to read its stacked outputs.
struct Built {
  std::vector<Var> stacked;   // per loop output: its lead rows, then one row per step
  std::vector<Var> outputs;   // the user's outputs among them
  std::vector<int64_t> lead;  // per loop output, its lead rows
  Var count;                  // the steps run, for a loop with a stop condition
  Updates updates;
  Loc loc;

  Var steps(size_t j) const {
    if (count.defined()) return row_range(stacked[j], constant(Tensor::scalar(lead[j])), count, loc);
    return lead[j] == 0 ? stacked[j] : slice(stacked[j], 0, lead[j], std::nullopt, 1, loc);
  }
  // The value after the last step (the initial value after none).
  Var final_value(size_t j) const {
    return count.defined() ? stacked[j][VarIndex(count + (lead[j] - 1), loc)] : stacked[j][VarIndex(-1, loc)];
  }
};

Built build_scan(const std::function<std::vector<Var>(const std::vector<Var>&)>& fn, ScanArgs args, Loc loc) {
  ScanLoop loop;
  if (args.n_steps && (!args.n_steps->defined() || args.n_steps->ndim() != 0 || !is_integer(args.n_steps->dtype())))
    throw TypeError("scan: n_steps must be an integer scalar (i32 or i64), got " +
                    (args.n_steps->defined() ? args.n_steps->type().str() : std::string("an empty Var")) + where(loc));
  if (!args.n_steps && args.sequences.empty())
    throw TypeError("scan: give n_steps or at least one sequence: nothing else tells how many steps to run" + where(loc));
  loop.steps_from_sequences = !args.n_steps;
  std::vector<Var> outer{args.n_steps ? cast(*args.n_steps, DType::i64, loc) : constant(Tensor::scalar(int64_t{-1}))};
  // The body's inputs by kind, in the order the loop feeds them (ScanLoop).
  std::vector<Var> sequence_inputs, output_inputs, state_inputs, non_sequence_inputs;
  // Sequences, reversed for go_backwards (the loop then runs forward over them).
  for (size_t i = 0; i < args.sequences.size(); ++i) {
    const SeqTaps& seq = args.sequences[i];
    if (!seq.sequence.defined() || seq.sequence.ndim() < 1)
      throw TypeError("scan: sequence " + std::to_string(i) + " must have at least one dimension (its steps), got " +
                      (seq.sequence.defined() ? seq.sequence.type().str() : std::string("an empty Var")) + where(loc));
    if (seq.taps.empty()) throw TypeError("scan: sequence " + std::to_string(i) + " has no taps" + where(loc));
    // Taps count from the current step's row, as in Theano: taps all after it ({1}: the row after)
    // leave the first rows unread, taps all before it ({-1}) the last ones; the loop reads taps
    // from the first row on, so those rows are cut off. Backwards, the steps run over the same
    // rows in reverse, a tap -1 still reading the row before in x's order: the loop runs forward
    // over the rows reversed, with each tap negated.
    std::vector<int> taps = seq.taps;
    if (args.go_backwards)
      for (int& t : taps) t = -t;
    Var rows = args.go_backwards ? slice(seq.sequence, 0, std::nullopt, std::nullopt, -1, loc) : seq.sequence;
    const int first = *std::min_element(taps.begin(), taps.end()), last = *std::max_element(taps.begin(), taps.end());
    if (first > 0) rows = slice(rows, 0, int64_t{first}, std::nullopt, 1, loc);
    if (last < 0) rows = slice(rows, 0, std::nullopt, int64_t{last}, 1, loc);
    outer.push_back(rows);
    loop.sequence_taps.push_back(taps);
    for (int tap : seq.taps)
      sequence_inputs.push_back(placeholder(without_first(seq.sequence.type()), "sequence" + std::to_string(i) + "[t" +
                                                                                    (tap < 0 ? "" : "+") + std::to_string(tap) + "]"));
  }
  // Outputs fed back: the body reads them at their taps.
  std::vector<Var> initials;
  std::vector<Type> states;  // per output: the type of its value at one step (fed-back outputs only)
  for (size_t j = 0; j < args.outputs_info.size(); ++j) {
    const auto& info = args.outputs_info[j];
    states.emplace_back();
    if (!info) {
      loop.output_taps.push_back({});
      continue;
    }
    const std::string which = "outputs_info[" + std::to_string(j) + "]";
    if (!info->initial.defined()) throw TypeError("scan: " + which + " has an empty initial value" + where(loc));
    if (info->taps.empty()) throw TypeError("scan: " + which + " has no taps" + where(loc));
    for (int tap : info->taps)
      if (tap >= 0)
        throw TypeError("scan: " + which + " has tap " + std::to_string(tap) +
                        "; an output can only read earlier steps (negative taps, -1 being the step before)" + where(loc));
    std::vector<int> sorted = info->taps;
    std::sort(sorted.begin(), sorted.end());
    if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
      throw TypeError("scan: " + which + " repeats a tap" + where(loc));
    loop.output_taps.push_back(info->taps);
    const bool rows = initial_rows(info->taps) > 0;
    if (rows && info->initial.ndim() < 1)
      throw TypeError("scan: " + which + " reads " + std::to_string(-sorted.front()) + " steps back, so its initial value needs " +
                      "that many rows (a leading axis), got " + info->initial.type().str() + where(loc));
    states.back() = rows ? without_first(info->initial.type()) : info->initial.type();
    initials.push_back(info->initial);
    for (int tap : info->taps)
      output_inputs.push_back(placeholder(states.back(), "output" + std::to_string(j) + "[t" + std::to_string(tap) + "]"));
  }
  for (size_t i = 0; i < args.non_sequences.size(); ++i) {
    if (!args.non_sequences[i].defined())
      throw TypeError("scan: non_sequences[" + std::to_string(i) + "] is an empty Var" + where(loc));
    non_sequence_inputs.push_back(placeholder(args.non_sequences[i].type(), "non_sequence" + std::to_string(i)));
  }

  // The body.
  ScanBuild build;
  std::vector<Var> returned;
  const uint64_t made_before_body = Variable::ids_given();
  {
    std::vector<Var> fn_args = sequence_inputs;
    fn_args.insert(fn_args.end(), output_inputs.begin(), output_inputs.end());
    fn_args.insert(fn_args.end(), non_sequence_inputs.begin(), non_sequence_inputs.end());
    BuildScope scope(build);
    returned = fn(fn_args);
  }
  const bool stops = build.until.defined() && !returned.empty() && returned.back().same(build.until);
  if (build.until.defined() && !stops) throw TypeError("scan: the body called until(cond) but did not return it last" + where(loc));
  Var cond = stops ? returned.back() : Var();
  if (stops) returned.pop_back();
  if (args.outputs_info.empty()) {  // map: no output fed back
    loop.output_taps.assign(returned.size(), {});
    states.assign(returned.size(), Type{});
  }
  if (returned.size() != loop.output_taps.size())
    throw TypeError("scan: the body returned " + std::to_string(returned.size()) + " values (until(cond) apart) but " +
                    "outputs_info has " + std::to_string(loop.output_taps.size()) + " entries; return one value per entry " +
                    "(nullopt for an output that is not fed back)" + where(loc));
  for (size_t j = 0, fed = 0; j < returned.size(); ++j) {
    if (!returned[j].defined()) throw TypeError("scan: the body returned an empty Var as output " + std::to_string(j) + where(loc));
    if (loop.output_taps[j].empty()) continue;
    const Type& want = states[j];
    const Type& got = returned[j].type();
    const std::string initial_type = initials[fed++].type().str();
    if (got.dtype != want.dtype || got.ndim() != want.ndim())
      throw TypeError("scan: output " + std::to_string(j) + " of the body is " + got.str() + " but it is fed back from an initial " +
                      "value " + initial_type + " (so each step must return " + want.str() + "): give the initial value the dtype and " +
                      "number of dimensions the body computes (cast it, e.g. cast(h0, " + dtype_name(got.dtype) + ")), or cast the " +
                      "body's result" + where(loc));
    for (int64_t d = 0; d < want.ndim(); ++d)
      if (want.broadcastable[d] && !got.broadcastable[d])
        throw TypeError("scan: output " + std::to_string(j) + " of the body is " + got.str() + ", not broadcastable in dimension " +
                        std::to_string(d) + " where its initial value " + initial_type + " is: give an initial value that " +
                        "does not declare that dimension broadcastable (tensor(dtype, {false, ...}))" + where(loc));
  }
  // A random draw made in the body from a shared stream draws fresh numbers at every step, as in
  // Theano: its stream becomes a state of the loop, updated per step as scan_update would (an
  // update the body writes for it wins), and its final value comes back in the updates. A draw
  // made before the body and read in it is a captured value, the same at every step.
  {
    std::vector<Var> roots = returned;
    if (stops) roots.push_back(cond);
    for (const auto& [s, value] : build.updates) roots.push_back(value);
    for (Node* n : topological_order(roots)) {
      const auto state_update = n->op->state_update();
      if (!state_update) continue;
      const Var& state = n->inputs[static_cast<size_t>(state_update->first)];
      if (state.get()->is_shared() && n->outputs[0]->id > made_before_body)
        build.stream_updates.push_back({Shared(state.ptr()), n->output(static_cast<size_t>(state_update->second))});
    }
    const size_t written_by_body = build.updates.size();
    for (const auto& [s, value] : build.stream_updates) {
      auto same_state = [&](const std::pair<Shared, Var>& u) { return u.first.same(s); };
      const auto first = build.updates.begin(), drawn = first + static_cast<int64_t>(written_by_body);
      if (std::any_of(drawn, build.updates.end(), same_state))
        throw TypeError("scan: two random draws in the body read the stream '" + s.get()->label() +
                        "'; each would draw the same numbers (draw each from the RandomStreams)" + where(loc));
      if (std::none_of(first, drawn, same_state)) build.updates.push_back({s, value});
    }
  }
  // Shared variables the body updates: more outputs, fed back at -1 from the variable's value.
  std::unordered_map<const Variable*, Var> replace;
  for (const auto& [s, value] : build.updates) {
    Var p = placeholder(s.type(), s.get()->label() + "[t-1]");
    replace[s.get()] = p;
    state_inputs.push_back(p);
    initials.push_back(s);
    loop.output_taps.push_back({-1});
    returned.push_back(value);
  }

  // Values the body reads from outside it become inputs as well (implicit non-sequences): what
  // in the body does not depend on its inputs is computed once, before the loop.
  std::vector<Var> roots = returned;
  if (stops) roots.push_back(cond);
  std::unordered_map<const Variable*, bool> inside;
  for (const auto* kind : {&sequence_inputs, &output_inputs, &state_inputs, &non_sequence_inputs})
    for (const Var& p : *kind) inside[p.get()] = true;
  auto is_inside = [&](const Var& v) {
    if (replace.count(v.get())) return true;
    const auto it = inside.find(v.get());
    return it != inside.end() && it->second;
  };
  const std::vector<Node*> order = topological_order(roots);
  // What the body made and reads only in a branch of an ifelse stays in the body even where it
  // does not depend on the body's inputs: computed before the loop, it would run whether or not a
  // step takes the branch, and fail where the branch could not run.
  const std::unordered_set<const Node*> every_step = nodes_read(roots, true, false);
  for (Node* n : order) {
    bool any = n->outputs[0]->id > made_before_body && !every_step.count(n);
    for (const Var& in : n->inputs) any = any || is_inside(in);
    for (const auto& o : n->outputs) inside[o.get()] = any;
  }
  // Shape arithmetic on outside values (shape_of(x), its elements, their products) that a body op
  // reads to decide a shape is computed in the body, from the captured value's shape: captured,
  // it would be a value the body's plan does not know, and the body's shapes must follow from its
  // inputs' shapes (a gradient taken in the body reshapes to shape_of(x) this way).
  std::unordered_map<const Variable*, bool> arithmetic;
  std::function<bool(const Var&)> is_shape_arithmetic = [&](const Var& v) -> bool {
    const Node* n = v.get()->owner;
    if (!n) return v.get()->constant.has_value();
    if (auto it = arithmetic.find(v.get()); it != arithmetic.end()) return it->second;
    bool shape_only = dynamic_cast<const ShapeOf*>(n->op.get()) != nullptr;
    if (!shape_only) {
      shape_only = is_integer(v.dtype());
      for (const Var& in : n->inputs) shape_only = shape_only && (is_inside(in) || is_shape_arithmetic(in));
    }
    return arithmetic[v.get()] = shape_only;
  };
  std::function<void(const Var&)> pull_in = [&](const Var& v) {
    const Node* n = v.get()->owner;
    if (!n || is_inside(v)) return;
    for (const auto& o : n->outputs) inside[o.get()] = true;
    if (dynamic_cast<const ShapeOf*>(n->op.get())) return;  // its operand is captured as a value
    for (const Var& in : n->inputs) pull_in(in);
  };
  for (Node* n : order)
    if (inside[n->outputs[0].get()])
      for (int i : n->op->needs_input_values())
        if (const Var& v = n->inputs[static_cast<size_t>(i)]; !is_inside(v) && is_shape_arithmetic(v)) pull_in(v);
  std::vector<Var> implicit_outer, implicit_inputs;
  auto bring_in = [&](const Var& v) {
    if (is_inside(v) || v.get()->constant) return;
    auto [it, fresh] = replace.try_emplace(v.get(), Var());
    if (!fresh) return;
    it->second = placeholder(v.type(), v.get()->label());
    implicit_inputs.push_back(it->second);
    implicit_outer.push_back(v);
  };
  for (Node* n : order)
    if (inside[n->outputs[0].get()])
      for (const Var& in : n->inputs) bring_in(in);
  for (const Var& r : roots) bring_in(r);
  // The body's own graph: made again where it reads the placeholders of captured values.
  std::vector<Var> body_outputs = rebuild(roots, replace);
  for (const auto* kind : {&sequence_inputs, &output_inputs, &state_inputs, &non_sequence_inputs, &implicit_inputs})
    loop.body.inputs.insert(loop.body.inputs.end(), kind->begin(), kind->end());
  loop.body.outputs = std::move(body_outputs);
  loop.n_non_sequences = non_sequence_inputs.size() + implicit_inputs.size();
  loop.has_until = stops;
  loop.truncate_gradient = args.truncate_gradient;
  loop.keep.assign(loop.n_outputs(), 0);

  outer.insert(outer.end(), initials.begin(), initials.end());
  outer.insert(outer.end(), args.non_sequences.begin(), args.non_sequences.end());
  outer.insert(outer.end(), implicit_outer.begin(), implicit_outer.end());
  Built built;
  for (size_t j = 0; j < loop.n_outputs(); ++j) built.lead.push_back(loop.lead_rows(j));
  built.stacked = apply(std::make_shared<Scan>(std::move(loop)), outer, loc);
  if (stops) {
    built.count = built.stacked.back();
    built.stacked.pop_back();
  }
  built.loc = loc;
  const size_t n_user = built.stacked.size() - build.updates.size();
  built.outputs.assign(built.stacked.begin(), built.stacked.begin() + static_cast<int64_t>(n_user));
  for (size_t u = 0; u < build.updates.size(); ++u) {
    built.updates.push_back({build.updates[u].first, built.final_value(n_user + u)});
    // A loop nested in a body hands its streams on: the enclosing loop carries them too, so that
    // its steps do not start every inner loop from the same state.
    const auto streams_of_this_loop = [&](const std::pair<Shared, Var>& s) { return s.first.same(build.updates[u].first); };
    if (building && std::any_of(build.stream_updates.begin(), build.stream_updates.end(), streams_of_this_loop))
      building->stream_updates.push_back(built.updates.back());
  }
  return built;
}

}  // namespace

// The tangents of a loop are computed beside its states, in one loop over the same steps: its
// body, then the body's Jacobian-vector product, with the tangents of fed-back outputs fed back
// from the tangents of the initial values. The states are computed again here; scan_merge runs it
// as one loop with this one and keeps one copy of each state. A loop that stops early or keeps
// only its last rows takes the general construction (std::nullopt).
std::optional<std::vector<Var>> Scan::R_op(const Node& node, const std::vector<Var>& tangents) const {
  const ScanLoop& loop = loop_;
  if (loop.has_until || std::any_of(loop.keep.begin(), loop.keep.end(), [](int64_t k) { return k > 0; })) return std::nullopt;
  const Loc& loc = node.loc;
  const size_t n_seq = loop.n_sequences(), n_out = loop.n_outputs(), n_non = loop.n_non_sequences;
  const Layout at(loop);
  auto has_tangent = [&](size_t input) { return tangents[input].defined() && is_float(node.inputs[input].dtype()); };
  auto tangent_of = [&](size_t input) { return cast(tangents[input], node.inputs[input].dtype(), loc); };

  // The same steps: the same n_steps, or sequences whose tangents have their rows (checked).
  ScanArgs args;
  if (!loop.steps_from_sequences) args.n_steps = node.inputs[0];
  std::vector<size_t> seq_with_tangent, non_with_tangent;
  // The loop's taps read its sequences from their first row (scan() cut the rows user taps skip):
  // given to scan() again they start at 0, so that nothing is cut twice.
  auto from_first_row = [&](size_t i) {
    std::vector<int> taps = loop.sequence_taps[i];
    const int first = first_tap(taps);
    for (int& t : taps) t -= first;
    return taps;
  };
  for (size_t i = 0; i < n_seq; ++i) args.sequences.push_back({node.inputs[at.sequences + i], from_first_row(i)});
  for (size_t i = 0; i < n_seq; ++i)
    if (has_tangent(at.sequences + i)) {
      const Var seq = node.inputs[at.sequences + i];
      args.sequences.push_back({shaped_like(tangent_of(at.sequences + i), seq, "the tangent of sequence " + std::to_string(i) + " of a scan", loc), from_first_row(i)});
      seq_with_tangent.push_back(i);
    }
  std::vector<std::optional<Taps>> tangent_info;
  size_t initial = at.initials;
  for (size_t j = 0; j < n_out; ++j) {
    if (loop.output_taps[j].empty()) {
      args.outputs_info.push_back(std::nullopt);
      tangent_info.push_back(std::nullopt);
      continue;
    }
    const Var& init = node.inputs[initial];
    args.outputs_info.push_back(Taps{init, loop.output_taps[j]});
    tangent_info.push_back(Taps{has_tangent(initial) ? tangent_of(initial) : zeros_like(init, loc), loop.output_taps[j]});
    ++initial;
  }
  args.outputs_info.insert(args.outputs_info.end(), tangent_info.begin(), tangent_info.end());
  for (size_t m = 0; m < n_non; ++m) args.non_sequences.push_back(node.inputs[at.non_sequences + m]);
  for (size_t m = 0; m < n_non; ++m)
    if (has_tangent(at.non_sequences + m)) {
      args.non_sequences.push_back(tangent_of(at.non_sequences + m));
      non_with_tangent.push_back(m);
    }

  auto step = [&](const std::vector<Var>& a) {
    // a: the sequence taps (the sequences, then their tangents), the output taps (the states,
    // then their tangents), the non-sequences, then their tangents: the order args lists them.
    size_t next = 0;
    std::unordered_map<const Variable*, Var> primal;
    std::vector<Var> wrt, directions;
    auto bind = [&](size_t body_input) { primal[loop.body.inputs[body_input].get()] = a[next++]; };
    auto seed = [&](size_t body_input) {
      wrt.push_back(primal.at(loop.body.inputs[body_input].get()));
      directions.push_back(a[next++]);
    };
    for (size_t i = 0; i < n_seq; ++i)
      for (size_t k = 0; k < loop.sequence_taps[i].size(); ++k) bind(loop.first_sequence_input(i) + k);
    for (size_t i : seq_with_tangent)
      for (size_t k = 0; k < loop.sequence_taps[i].size(); ++k) seed(loop.first_sequence_input(i) + k);
    for (size_t j = 0; j < n_out; ++j)
      for (size_t k = 0; k < loop.output_taps[j].size(); ++k) bind(loop.first_output_input(j) + k);
    for (size_t j = 0; j < n_out; ++j)
      for (size_t k = 0; k < loop.output_taps[j].size(); ++k) seed(loop.first_output_input(j) + k);
    for (size_t m = 0; m < n_non; ++m) bind(loop.first_non_sequence_input() + m);
    for (size_t m : non_with_tangent) seed(loop.first_non_sequence_input() + m);
    std::vector<Var> float_wrt, float_directions;
    for (size_t w = 0; w < wrt.size(); ++w)
      if (is_float(wrt[w].dtype())) float_wrt.push_back(wrt[w]), float_directions.push_back(directions[w]);
    std::vector<Var> outputs = rebuild(std::vector<Var>(loop.body.outputs.begin(), loop.body.outputs.begin() + static_cast<int64_t>(n_out)), primal);
    const std::vector<Var> carried = inner_jvp(outputs, float_wrt, float_directions);
    for (size_t j = 0; j < n_out; ++j) outputs.push_back(cast(carried[j], outputs[j].dtype(), loc));
    return outputs;
  };
  const Built built = build_scan(step, std::move(args), loc);
  std::vector<Var> out(node.outputs.size());
  for (size_t j = 0; j < n_out; ++j)
    if (is_float(node.outputs[j]->type.dtype)) out[j] = built.stacked[n_out + j];
  return out;
}

ScanResult scan(const std::function<std::vector<Var>(const std::vector<Var>&)>& fn, ScanArgs args, Loc loc) {
  const Built built = build_scan(fn, std::move(args), loc);
  ScanResult result{.outputs = {}, .updates = built.updates};
  for (size_t j = 0; j < built.outputs.size(); ++j) result.outputs.push_back(built.steps(j));
  return result;
}

ScanResult map(const std::function<std::vector<Var>(const std::vector<Var>&)>& fn, std::vector<SeqTaps> sequences,
               std::vector<Var> non_sequences, bool go_backwards, Loc loc) {
  ScanArgs args;
  args.sequences = std::move(sequences);
  args.non_sequences = std::move(non_sequences);
  args.go_backwards = go_backwards;
  return scan(fn, std::move(args), loc);
}

ScanResult reduce(const std::function<std::vector<Var>(const std::vector<Var>&)>& fn, std::vector<SeqTaps> sequences,
                  std::vector<Var> initial, std::vector<Var> non_sequences, bool go_backwards, Loc loc) {
  ScanArgs args;
  args.sequences = std::move(sequences);
  args.outputs_info.assign(initial.begin(), initial.end());
  args.non_sequences = std::move(non_sequences);
  args.go_backwards = go_backwards;
  const Built built = build_scan(fn, std::move(args), loc);
  ScanResult result{.outputs = {}, .updates = built.updates};
  for (size_t j = 0; j < built.outputs.size(); ++j) result.outputs.push_back(built.final_value(j));
  return result;
}

ScanResult foldl(const std::function<std::vector<Var>(const std::vector<Var>&)>& fn, std::vector<SeqTaps> sequences,
                 std::vector<Var> initial, std::vector<Var> non_sequences, Loc loc) {
  return reduce(fn, std::move(sequences), std::move(initial), std::move(non_sequences), false, loc);
}

ScanResult foldr(const std::function<std::vector<Var>(const std::vector<Var>&)>& fn, std::vector<SeqTaps> sequences,
                 std::vector<Var> initial, std::vector<Var> non_sequences, Loc loc) {
  return reduce(fn, std::move(sequences), std::move(initial), std::move(non_sequences), true, loc);
}

}  // namespace kiln

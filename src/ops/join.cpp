#include "ops/join.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "kiln/ops.hpp"
#include "ops/elemwise.hpp"
#include "ops/reduce.hpp"
#include "ops/shape.hpp"
#include "tensor/copy.hpp"

namespace kiln {

std::vector<Type> Join::infer_types(const std::vector<Type>& in) const {
  if (in.empty()) throw TypeError("concatenate: needs at least one input");
  const int64_t nd = in[0].ndim();
  if (axis_ >= nd) throw TypeError(name() + ": axis out of range for " + in[0].str());
  std::vector<bool> bc = in[0].broadcastable;
  for (const Type& t : in) {
    if (t.ndim() != nd || t.dtype != in[0].dtype)
      throw TypeError("concatenate: inputs must share ndim and dtype, got " + in[0].str() + " and " + t.str());
    for (int64_t d = 0; d < nd; ++d) bc[d] = bc[d] && t.broadcastable[d];
  }
  if (in.size() > 1) bc[axis_] = false;
  return {Type{in[0].dtype, bc}};
}

std::vector<Shape> Join::infer_shapes(const std::vector<Shape>& in, const std::vector<const Tensor*>&) const {
  Shape out = in[0];
  for (size_t i = 1; i < in.size(); ++i) {
    for (size_t d = 0; d < out.size(); ++d)
      if (static_cast<int64_t>(d) != axis_ && in[i][d] != out[d])
        throw ShapeError("concatenate: input " + std::to_string(i) + " has shape " + shape_str(in[i]) + " but input 0 has " +
                         shape_str(in[0]) + "; all dimensions except axis " + std::to_string(axis_) + " must match");
    out[axis_] += in[i][axis_];
  }
  return {out};
}


std::vector<Var> Join::L_op(const Node& node, const std::vector<Var>& gouts) const {
  std::vector<Var> in{gouts[0]};
  in.insert(in.end(), node.inputs.begin(), node.inputs.end());
  std::vector<Var> pieces = apply(std::make_shared<JoinSplit>(axis_), in, node.loc);
  for (size_t i = 0; i < pieces.size(); ++i)
    if (!is_float(node.inputs[i].dtype())) pieces[i] = Var();
  return pieces;
}

std::vector<Type> JoinSplit::infer_types(const std::vector<Type>& in) const {
  std::vector<Type> out;
  for (size_t i = 1; i < in.size(); ++i) out.push_back(Type{in[0].dtype, in[i].broadcastable});
  return out;
}

std::vector<Shape> JoinSplit::infer_shapes(const std::vector<Shape>& in, const std::vector<const Tensor*>&) const {
  return std::vector<Shape>(in.begin() + 1, in.end());
}


std::vector<Var> JoinSplit::L_op(const Node& node, const std::vector<Var>& gouts) const {
  std::vector<Var> parts;
  for (size_t i = 0; i < gouts.size(); ++i)
    parts.push_back(gouts[i].defined() ? gouts[i] : zeros_like(node.output(i), node.loc));
  std::vector<Var> g{concatenate(parts, axis_, node.loc)};
  g.resize(node.inputs.size());
  return g;
}

namespace {

class JoinKernel final : public KernelOf<Join> {
 public:
  using KernelOf::KernelOf;
  void run(InputValues in, OutputValues out, std::span<std::byte>) const override {
    const int64_t axis = op().axis();
    const Tensor& o = out[0];
    const size_t es = dtype_size(o.dtype());
    Dims shape{std::span<const int64_t>(o.shape())};
    int64_t start = 0;
    for (const Tensor& x : in) {  // each input into its part of the output, no handle made for it
      shape[static_cast<size_t>(axis)] = x.shape()[axis];
      copy_broadcast(Region{o.raw_data() + start * o.strides()[axis] * static_cast<int64_t>(es), o.dtype(), shape, o.strides()},
                     region_of(x));
      start += x.shape()[axis];
    }
  }
};

class JoinSplitKernel final : public KernelOf<JoinSplit> {
 public:
  using KernelOf::KernelOf;
  void run(InputValues in, OutputValues out, std::span<std::byte>) const override {
    const int64_t axis = op().axis();
    const Tensor& g = in[0];
    const int64_t es = static_cast<int64_t>(dtype_size(g.dtype()));
    Dims shape{std::span<const int64_t>(g.shape())};
    int64_t start = 0;
    for (size_t i = 0; i < out.size(); ++i) {  // each output from its part of g, no handle made for it
      shape[static_cast<size_t>(axis)] = in[i + 1].shape()[axis];
      copy_broadcast(region_of(out[i]), Region{g.raw_data() + start * g.strides()[axis] * es, g.dtype(), shape, g.strides()});
      start += shape[static_cast<size_t>(axis)];
    }
  }
};

}  // namespace

void add_join_kernels(KernelTable& table) {
  table.add<Join, JoinKernel>();
  table.add<JoinSplit, JoinSplitKernel>();
}

std::optional<int64_t> stacked_length(const Var& v) {
  const Node* n = v.get()->owner;
  if (!n || v.ndim() != 1) return std::nullopt;
  auto join = dynamic_cast<const Join*>(n->op.get());
  if (!join) return std::nullopt;
  for (const Var& in : n->inputs)
    if (!in.type().broadcastable[0]) return std::nullopt;
  return static_cast<int64_t>(n->inputs.size());
}

Var concatenate(const std::vector<Var>& xs, int64_t axis, Loc loc) {
  if (xs.empty()) throw TypeError("concatenate: needs at least one input (at " + loc_str(loc) + ")");
  DType dtype = result_dtype(xs);
  const int64_t nd = xs[0].ndim();
  if (nd == 0) throw TypeError("concatenate: cannot join 0-d values; use stack (at " + loc_str(loc) + ")");
  int64_t a = axis < 0 ? axis + nd : axis;
  if (a < 0 || a >= nd)
    throw TypeError("concatenate: axis " + std::to_string(axis) + " is out of range for " + xs[0].type().str() + " (at " + loc_str(loc) + ")");
  std::vector<Var> cast_inputs;
  for (const Var& x : xs) cast_inputs.push_back(cast(x, dtype, loc));
  return apply1(std::make_shared<Join>(a), cast_inputs, loc);
}

Var stack(const std::vector<Var>& xs, int64_t axis, Loc loc) {
  if (xs.empty()) throw TypeError("stack: needs at least one input (at " + loc_str(loc) + ")");
  const int64_t nd = xs[0].ndim();
  int64_t a = axis < 0 ? axis + nd + 1 : axis;
  if (a < 0 || a > nd)
    throw TypeError("stack: axis " + std::to_string(axis) + " is out of range for inputs of " + std::to_string(nd) +
                    " dimensions; it must be in [" + std::to_string(-nd - 1) + ", " + std::to_string(nd) + "] (at " + loc_str(loc) + ")");
  std::vector<Var> expanded;
  for (size_t i = 0; i < xs.size(); ++i) {
    if (xs[i].ndim() != nd) throw TypeError("stack: inputs differ in ndim: " + types_str(xs) + " (at " + loc_str(loc) + ")");
    // Checked here, before the axis is inserted: concatenate would name itself and the new axis.
    const Var x = i == 0 ? xs[0] : shaped_like(xs[i], xs[0], "stack: input " + std::to_string(i) + " (as input 0)", loc);
    std::vector<int64_t> pattern;
    for (int64_t d = 0; d < nd; ++d) {
      if (d == a) pattern.push_back(-1);
      pattern.push_back(d);
    }
    if (a == nd) pattern.push_back(-1);
    expanded.push_back(dimshuffle(x, pattern, loc));
  }
  return concatenate(expanded, a, loc);
}

// tile, repeat and pad are built from dimshuffle, fill (broadcasting), reshape and concatenate,
// so they run, fuse and differentiate (both ways) as those do.
namespace {

// v broadcast over a constant b8 `like` of this shape (the value of like is never read), for op
// on x: a shape too large for memory is op's error, at the user's line.
Var broadcast_over(const Var& v, const Shape& like_shape, const char* op, const Var& x, const Loc& loc) {
  try {
    return fill_like(constant(Tensor::zeros(like_shape, DType::b8)), v, loc);
  } catch (const MemoryError&) {
    double elements = 1;
    for (int64_t n : like_shape) elements *= static_cast<double>(n);
    std::ostringstream count;
    count.precision(3);
    count << elements;
    throw MemoryError(std::string(op) + ": the result for " + x.type().str() + " has at least " + count.str() +
                      " elements, more than memory can hold (at " + loc_str(loc) + ")");
  }
}

// shape_of(x) with axis d multiplied by factor[d].
Var scaled_shape(const Var& x, const std::vector<int64_t>& factor, const Loc& loc) {
  return shape_of(x, loc) * constant(Tensor::from(factor, {static_cast<int64_t>(factor.size())}));
}

}  // namespace

Var tile(const Var& x, std::vector<int64_t> reps, Loc loc) {
  if (!x.defined()) throw TypeError("tile: x is an empty Var (at " + loc_str(loc) + ")");
  for (int64_t r : reps)
    if (r < 0)
      throw TypeError("tile: repetitions must be 0 or more, got " + std::to_string(r) + " for " + x.type().str() + " (at " +
                      loc_str(loc) + ")");
  const int64_t nd = std::max<int64_t>(x.ndim(), static_cast<int64_t>(reps.size()));
  reps.insert(reps.begin(), static_cast<size_t>(nd - static_cast<int64_t>(reps.size())), 1);
  const Var v = pad_left(x, nd, loc);
  if (std::all_of(reps.begin(), reps.end(), [](int64_t r) { return r == 1; })) return v;
  // (1, x0, 1, x1, ...) over (r0, 1, r1, 1, ...), then (r0 * x0, r1 * x1, ...).
  std::vector<int64_t> pattern;
  Shape like;
  for (int64_t d = 0; d < nd; ++d) {
    pattern.insert(pattern.end(), {-1, d});
    like.insert(like.end(), {reps[static_cast<size_t>(d)], 1});
  }
  const Var spread = broadcast_over(dimshuffle(v, pattern, loc), like, "tile", x, loc);
  return reshape(spread, scaled_shape(v, reps, loc), nd, loc);
}

Var repeat(const Var& x, int64_t repeats, std::optional<int64_t> axis, Loc loc) {
  if (!x.defined()) throw TypeError("repeat: x is an empty Var (at " + loc_str(loc) + ")");
  if (repeats < 0)
    throw TypeError("repeat: repeats must be 0 or more, got " + std::to_string(repeats) + " (at " + loc_str(loc) + ")");
  if (!axis) return repeat(flatten(x, 1, loc), repeats, 0, loc);  // NumPy's axis=None: the flattened values
  const int64_t nd = x.ndim();
  const int64_t a = *axis < 0 ? *axis + nd : *axis;
  if (a < 0 || a >= nd)
    throw TypeError("repeat: axis " + std::to_string(*axis) + " is out of range for " + x.type().str() + " (at " +
                    loc_str(loc) + ")");
  if (repeats == 1) return x;
  // (..., n, 1, ...) over (1, ..., 1, r, 1, ...), then (..., n * r, ...).
  std::vector<int64_t> pattern;
  Shape like;
  std::vector<int64_t> factor(static_cast<size_t>(nd), 1);
  factor[static_cast<size_t>(a)] = repeats;
  for (int64_t d = 0; d < nd; ++d) {
    pattern.push_back(d);
    like.push_back(1);
    if (d == a) {
      pattern.push_back(-1);
      like.push_back(repeats);
    }
  }
  const Var spread = broadcast_over(dimshuffle(x, pattern, loc), like, "repeat", x, loc);
  return reshape(spread, scaled_shape(x, factor, loc), nd, loc);
}

Var pad(const Var& x, std::vector<std::pair<int64_t, int64_t>> widths, double value, Loc loc) {
  if (!x.defined()) throw TypeError("pad: x is an empty Var (at " + loc_str(loc) + ")");
  const int64_t nd = x.ndim();
  if (widths.size() == 1 && nd > 1) widths.assign(static_cast<size_t>(nd), widths[0]);
  if (static_cast<int64_t>(widths.size()) != nd)
    throw TypeError("pad: takes one {before, after} pair per axis (or one for all), got " + std::to_string(widths.size()) +
                    " pairs for " + x.type().str() + " (at " + loc_str(loc) + ")");
  if (nd == 0) throw TypeError("pad: cannot pad a 0-d value " + x.type().str() + " (at " + loc_str(loc) + ")");
  for (const auto& [before, after] : widths)
    if (before < 0 || after < 0)
      throw TypeError("pad: widths must be 0 or more, got {" + std::to_string(before) + ", " + std::to_string(after) +
                      "} (at " + loc_str(loc) + ")");
  if (!is_float(x.dtype()) && !std::isfinite(value))
    throw TypeError("pad: the value " + std::to_string(value) + " has no " + dtype_name(x.dtype()) + " equivalent (x is " +
                    x.type().str() + "; at " + loc_str(loc) + ")");
  const Var fill_value = constant(Tensor::full({}, value, x.dtype()));
  Var out = x;
  for (int64_t d = 0; d < nd; ++d) {
    const auto [before, after] = widths[static_cast<size_t>(d)];
    if (before == 0 && after == 0) continue;
    // A block of `value` with out's shape but w on axis d: the sum over d (which exists for an
    // empty axis too) gives the other axes, read for its shape alone.
    const Var rows = fill_like(sum(out, {d}, true, loc), fill_value, loc);
    auto block = [&](int64_t w) {
      Shape like(static_cast<size_t>(nd), 1);
      like[static_cast<size_t>(d)] = w;
      return cast(broadcast_over(rows, like, "pad", x, loc), x.dtype(), loc);
    };
    std::vector<Var> parts;
    if (before > 0) parts.push_back(block(before));
    parts.push_back(out);
    if (after > 0) parts.push_back(block(after));
    out = concatenate(parts, d, loc);
  }
  return out;
}

}  // namespace kiln

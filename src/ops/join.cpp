#include "ops/join.hpp"

#include "kiln/ops.hpp"
#include "ops/elemwise.hpp"
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
    Tensor& o = out[0];
    int64_t start = 0;
    for (const Tensor& x : in) {
      Shape shape = o.shape();
      shape[axis] = x.shape()[axis];
      copy_broadcast(o.view(shape, o.strides(), o.offset() + start * o.strides()[axis]), x);
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
    int64_t start = 0;
    for (size_t i = 0; i < out.size(); ++i) {
      Shape shape = g.shape();
      shape[axis] = in[i + 1].shape()[axis];
      copy_broadcast(out[i], g.view(shape, g.strides(), g.offset() + start * g.strides()[axis]));
      start += shape[axis];
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
  if (a < 0 || a > nd) throw TypeError("stack: axis " + std::to_string(axis) + " is out of range (at " + loc_str(loc) + ")");
  std::vector<Var> expanded;
  for (const Var& x : xs) {
    if (x.ndim() != nd) throw TypeError("stack: inputs differ in ndim: " + types_str(xs) + " (at " + loc_str(loc) + ")");
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

}  // namespace kiln

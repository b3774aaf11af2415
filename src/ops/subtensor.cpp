#include "ops/subtensor.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kiln/ops.hpp"
#include "ops/elemwise.hpp"
#include "ops/reduce.hpp"
#include "ops/shape.hpp"
#include "tensor/copy.hpp"
#include "tensor/dispatch.hpp"
#include "tensor/nd_loop.hpp"

namespace kiln {

namespace {

std::string entries_str(const std::vector<IndexEntry>& entries) {
  std::string s;
  for (size_t i = 0; i < entries.size(); ++i) {
    const IndexEntry& e = entries[i];
    s += i ? "," : "";
    if (e.is_integer) {
      s += std::to_string(e.index);
    } else {
      s += (e.start ? std::to_string(*e.start) : "") + ":" + (e.stop ? std::to_string(*e.stop) : "");
      if (e.step != 1) s += ":" + std::to_string(e.step);
    }
  }
  return s;
}

struct Resolved {
  int64_t start, step, length;
};

// NumPy's rules for one index entry on an axis of size n.
Resolved resolve(const IndexEntry& e, int64_t n, const std::string& op, const Shape& shape, size_t axis) {
  if (e.is_integer) {
    int64_t i = e.index < 0 ? e.index + n : e.index;
    if (i < 0 || i >= n)
      throw ShapeError(op + ": index " + std::to_string(e.index) + " is out of bounds for axis " + std::to_string(axis) +
                       " with size " + std::to_string(n) + " (shape " + shape_str(shape) + ")");
    return {i, 1, 1};
  }
  const int64_t step = e.step;
  int64_t start, stop;
  auto clamp = [&](std::optional<int64_t> v, int64_t dflt, int64_t lo, int64_t hi) {
    if (!v) return dflt;
    int64_t x = *v < 0 ? *v + n : *v;
    return std::min(std::max(x, lo), hi);
  };
  if (step > 0) {
    start = clamp(e.start, 0, 0, n);
    stop = clamp(e.stop, n, 0, n);
  } else {
    start = clamp(e.start, n - 1, -1, n - 1);
    stop = clamp(e.stop, -1, -1, n - 1);
  }
  // In unsigned arithmetic: a step near INT64_MAX or INT64_MIN (which has no negation) must not
  // overflow. A slice of one element or none has no step to speak of: 1 keeps its stride in range.
  const int64_t distance = step > 0 ? stop - start : start - stop;
  const uint64_t stride = step > 0 ? static_cast<uint64_t>(step) : uint64_t{0} - static_cast<uint64_t>(step);
  const int64_t length = distance > 0 ? static_cast<int64_t>((static_cast<uint64_t>(distance) - 1) / stride) + 1 : 0;
  return {start, length > 1 ? step : 1, length};
}

// x[entries]'s shape and strides; returns its offset.
int64_t region_geometry(const Tensor& x, std::span<const IndexEntry> entries, const std::string& op, Dims& shape,
                        Dims& strides) {
  shape.clear();
  strides.clear();
  int64_t offset = x.offset();
  for (int64_t d = 0; d < x.ndim(); ++d) {
    if (d >= static_cast<int64_t>(entries.size())) {
      shape.push_back(x.shape()[d]);
      strides.push_back(x.strides()[d]);
      continue;
    }
    Resolved r = resolve(entries[d], x.shape()[d], op, x.shape(), d);
    if (r.length > 0) offset += r.start * x.strides()[d];
    if (!entries[d].is_integer) {
      shape.push_back(r.length);
      strides.push_back(x.strides()[d] * r.step);
    }
  }
  return offset;
}

Shape region_shape(const Shape& x, std::span<const IndexEntry> entries, const std::string& op) {
  Shape out;
  for (size_t d = 0; d < x.size(); ++d) {
    if (d >= entries.size()) {
      out.push_back(x[d]);
      continue;
    }
    Resolved r = resolve(entries[d], x[d], op, x, d);
    if (!entries[d].is_integer) out.push_back(r.length);
  }
  return out;
}

std::vector<bool> region_broadcastable(const Type& x, const std::vector<IndexEntry>& entries, const std::string& op) {
  if (static_cast<int64_t>(entries.size()) > x.ndim())
    throw TypeError(op + ": too many indices (" + std::to_string(entries.size()) + ") for " + x.str());
  std::vector<bool> bc;
  for (int64_t d = 0; d < x.ndim(); ++d) {
    if (d >= static_cast<int64_t>(entries.size())) bc.push_back(x.broadcastable[d]);
    else if (!entries[d].is_integer) {
      if (entries[d].step == 0) throw TypeError(op + ": slice step cannot be zero");
      const IndexEntry& e = entries[d];
      bc.push_back(x.broadcastable[d] && !e.start && !e.stop && e.step == 1);
    }
  }
  return bc;
}

void check_broadcast(const Shape& value, const Shape& target, const std::string& op) {
  const int64_t pad = static_cast<int64_t>(target.size()) - static_cast<int64_t>(value.size());
  bool ok = pad >= 0;
  for (size_t d = 0; ok && d < value.size(); ++d) ok = value[d] == target[pad + d] || value[d] == 1;
  if (!ok)
    throw ShapeError(op + ": value of shape " + shape_str(value) + " cannot be broadcast to the region's shape " +
                     shape_str(target));
}

// Broadcasts y (ndim <= target's) to the target shape as a strided view.
Tensor broadcast_to(const Tensor& y, const Shape& target, const std::string& op) {
  check_broadcast(y.shape(), target, op);
  const int64_t pad = static_cast<int64_t>(target.size()) - y.ndim();
  Shape strides(target.size(), 0);
  for (int64_t d = 0; d < y.ndim(); ++d) strides[pad + d] = y.shape()[d] == 1 ? 0 : y.strides()[d];
  return y.view(target, strides, y.offset());
}

void add_into(Tensor& dst, const Tensor& src) {
  dispatch_dtype(dst.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, bool>) {
      throw TypeError("inc_subtensor: cannot increment b8 values");
    } else {
      T* pd = reinterpret_cast<T*>(dst.storage()->data());
      const T* ps = reinterpret_cast<const T*>(src.storage()->data());
      auto loop = collapse_loop<2>(dst.shape(), {dst.strides(), src.strides()}, {dst.offset(), src.offset()});
      run_loop(loop, [&](int64_t n, std::array<int64_t, 2> off, std::array<int64_t, 2> st) {
        for (int64_t i = 0; i < n; ++i) pd[off[0] + i * st[0]] += ps[off[1] + i * st[1]];
      });
    }
  });
}

// The gradient of the value y written (broadcast) into a region, given the region's gradient.
Var gradient_of_written_value(const Var& region, const Var& y, const Loc& loc) {
  Var gy = sum_to_shape_of(region, pad_left(y, region.ndim(), loc), loc);
  if (y.ndim() < region.ndim()) {
    std::vector<int64_t> lead;
    for (int64_t d = 0; d < region.ndim() - y.ndim(); ++d) lead.push_back(d);
    gy = sum(gy, lead, false, loc);
  }
  return gy;
}

// out = x with its region `entries` set to, or incremented by, y broadcast.
void write_region(Tensor& out, const Tensor& x, const Tensor& y, std::span<const IndexEntry> entries, const std::string& op, bool set) {
  copy_broadcast(out, x);
  Dims shape, strides;
  const int64_t offset = region_geometry(out, entries, op, shape, strides);
  Tensor region = out.view(Shape(shape.begin(), shape.end()), Shape(strides.begin(), strides.end()), offset);
  const Tensor value = broadcast_to(y, region.shape(), op);
  if (set) copy_broadcast(region, value);
  else add_into(region, value);
}

}  // namespace

std::string Subtensor::name() const { return "subtensor[" + entries_str(entries_) + "]"; }

std::vector<Type> Subtensor::infer_types(const std::vector<Type>& in) const {
  return {Type{in[0].dtype, region_broadcastable(in[0], entries_, name())}};
}

std::vector<Shape> Subtensor::infer_shapes(const std::vector<Shape>& in, const std::vector<const Tensor*>&) const {
  return {region_shape(in[0], entries_, name())};
}


std::vector<Var> Subtensor::L_op(const Node& node, const std::vector<Var>& gouts) const {
  const Var& x = node.inputs[0];
  if (!is_float(x.dtype())) return {Var()};
  return {apply1(std::make_shared<IncSubtensor>(entries_, false), {zeros_like(x, node.loc), gouts[0]}, node.loc)};
}

std::string IncSubtensor::name() const { return std::string(set_ ? "set" : "inc") + "_subtensor[" + entries_str(entries_) + "]"; }

std::vector<Type> IncSubtensor::infer_types(const std::vector<Type>& in) const {
  auto bc = region_broadcastable(in[0], entries_, name());
  if (in[1].ndim() > static_cast<int64_t>(bc.size()))
    throw TypeError(name() + ": value " + in[1].str() + " has more dimensions than the region (" +
                    std::to_string(bc.size()) + ")");
  if (in[1].dtype != in[0].dtype)
    throw TypeError(name() + ": value " + in[1].str() + " must have the dtype of " + in[0].str());
  return {in[0]};
}

std::vector<Shape> IncSubtensor::infer_shapes(const std::vector<Shape>& in, const std::vector<const Tensor*>&) const {
  check_broadcast(in[1], region_shape(in[0], entries_, name()), name());
  return {in[0]};
}


std::vector<Var> IncSubtensor::L_op(const Node& node, const std::vector<Var>& gouts) const {
  const Loc loc = node.loc;
  const Var& g = gouts[0];
  Var region = apply1(std::make_shared<Subtensor>(entries_), {g}, loc);
  Var gx = set_ ? apply1(std::make_shared<IncSubtensor>(entries_, true), {g, constant(Tensor::zeros({}, g.dtype()))}, loc) : g;
  const Var& y = node.inputs[1];
  const Var gy = gradient_of_written_value(region, y, loc);
  return {is_float(node.inputs[0].dtype()) ? gx : Var(), is_float(y.dtype()) ? gy : Var()};
}

// ---- DynamicSlice, DynamicSliceUpdate

namespace {

void check_bound_types(const std::string& op, const std::vector<Type>& in, size_t first) {
  for (size_t i = first; i < in.size(); ++i)
    if (in[i].ndim() != 0 || (in[i].dtype != DType::i64 && in[i].dtype != DType::i32))
      throw TypeError(op + ": a slice bound must be a 0-d integer (i32 or i64), got " + in[i].str());
}

std::vector<const Tensor*> bound_values(const std::vector<const Tensor*>& values, size_t first, const std::string& op) {
  std::vector<const Tensor*> bounds(values.begin() + static_cast<std::ptrdiff_t>(first), values.end());
  for (const Tensor* b : bounds)
    if (!b) throw ShapeError(op + ": the slice's size is known only from its bounds' values");
  return bounds;
}

// The entries of a DynamicSlice: full slices before its axis, then its own.
SmallVector<IndexEntry, 6> entries_at(const DynamicSlice& slice, std::span<const Tensor* const> bounds) {
  SmallVector<IndexEntry, 6> entries(static_cast<size_t>(slice.axis()) + 1, IndexEntry{});
  entries.back() = slice.entry(bounds);
  return entries;
}

std::vector<bool> sliced_broadcastable(const Type& x, int64_t axis) {
  std::vector<bool> bc = x.broadcastable;
  bc[static_cast<size_t>(axis)] = false;
  return bc;
}

}  // namespace

IndexEntry DynamicSlice::entry(std::span<const Tensor* const> bounds) const {
  IndexEntry e;
  size_t next = 0;
  if (has_start_) e.start = bounds[next++]->item<int64_t>();
  if (has_stop_) e.stop = bounds[next++]->item<int64_t>();
  if (has_step_) e.step = bounds[next++]->item<int64_t>();
  if (e.step == 0) throw ShapeError(name() + ": the slice step is zero; it must be a nonzero integer");
  return e;
}

std::string DynamicSlice::name() const {
  std::string bounds = std::string(has_start_ ? "start" : "") + ":" + (has_stop_ ? "stop" : "") + (has_step_ ? ":step" : "");
  return "dynamic_slice{axis=" + std::to_string(axis_) + "," + bounds + "}";
}

std::vector<Type> DynamicSlice::infer_types(const std::vector<Type>& in) const {
  if (static_cast<int>(in.size()) != 1 + n_bounds()) throw TypeError(name() + ": takes x and " + std::to_string(n_bounds()) + " bounds");
  if (axis_ >= in[0].ndim()) throw TypeError(name() + ": axis out of range for " + in[0].str());
  check_bound_types(name(), in, 1);
  return {Type{in[0].dtype, sliced_broadcastable(in[0], axis_)}};
}

std::vector<int> DynamicSlice::needs_input_values() const {
  std::vector<int> inputs;
  for (int i = 1; i <= n_bounds(); ++i) inputs.push_back(i);
  return inputs;
}

std::vector<Shape> DynamicSlice::infer_shapes(const std::vector<Shape>& in, const std::vector<const Tensor*>& values) const {
  const std::vector<const Tensor*> bounds = bound_values(values, 1, name());
  return {region_shape(in[0], entries_at(*this, bounds), name())};
}

std::vector<Var> DynamicSlice::L_op(const Node& node, const std::vector<Var>& gouts) const {
  std::vector<Var> grads(node.inputs.size());
  const Var& x = node.inputs[0];
  if (!is_float(x.dtype())) return grads;
  std::vector<Var> inputs{zeros_like(x, node.loc), gouts[0]};
  inputs.insert(inputs.end(), node.inputs.begin() + 1, node.inputs.end());
  grads[0] = apply1(std::make_shared<DynamicSliceUpdate>(std::static_pointer_cast<const DynamicSlice>(node.op), false), inputs,
                    node.loc);
  return grads;
}

std::string DynamicSliceUpdate::name() const {
  return std::string(set_ ? "set" : "inc") + "_" + slice_->name();
}

std::vector<Type> DynamicSliceUpdate::infer_types(const std::vector<Type>& in) const {
  if (static_cast<int>(in.size()) != 2 + slice_->n_bounds())
    throw TypeError(name() + ": takes x, a value and " + std::to_string(slice_->n_bounds()) + " bounds");
  check_bound_types(name(), in, 2);
  if (in[1].ndim() > in[0].ndim())
    throw TypeError(name() + ": value " + in[1].str() + " has more dimensions than the region (" + std::to_string(in[0].ndim()) + ")");
  if (in[1].dtype != in[0].dtype) throw TypeError(name() + ": value " + in[1].str() + " must have the dtype of " + in[0].str());
  return {in[0]};
}

std::vector<int> DynamicSliceUpdate::needs_input_values() const {
  std::vector<int> inputs;
  for (int i = 2; i < 2 + slice_->n_bounds(); ++i) inputs.push_back(i);
  return inputs;
}

std::vector<Shape> DynamicSliceUpdate::infer_shapes(const std::vector<Shape>& in, const std::vector<const Tensor*>& values) const {
  const std::vector<const Tensor*> bounds = bound_values(values, 2, name());
  check_broadcast(in[1], region_shape(in[0], entries_at(*slice_, bounds), name()), name());
  return {in[0]};
}

std::vector<Var> DynamicSliceUpdate::L_op(const Node& node, const std::vector<Var>& gouts) const {
  const Loc loc = node.loc;
  const Var& g = gouts[0];
  const std::vector<Var> bounds(node.inputs.begin() + 2, node.inputs.end());
  std::vector<Var> slice_inputs{g};
  slice_inputs.insert(slice_inputs.end(), bounds.begin(), bounds.end());
  const Var region = apply1(slice_, slice_inputs, loc);
  Var gx = g;
  if (set_) {
    std::vector<Var> cleared{g, constant(Tensor::zeros({}, g.dtype()))};
    cleared.insert(cleared.end(), bounds.begin(), bounds.end());
    gx = apply1(std::make_shared<DynamicSliceUpdate>(slice_, true), cleared, loc);
  }
  const Var& y = node.inputs[1];
  const Var gy = gradient_of_written_value(region, y, loc);
  std::vector<Var> grads(node.inputs.size());
  grads[0] = is_float(node.inputs[0].dtype()) ? gx : Var();
  grads[1] = is_float(y.dtype()) ? gy : Var();
  return grads;
}

std::vector<Type> Take::infer_types(const std::vector<Type>& in) const {
  const Type& x = in[0];
  const Type& idx = in[1];
  if (!is_integer(idx.dtype)) throw TypeError("take: indices must be integers (i32 or i64), got " + idx.str());
  if (axis_ >= x.ndim()) throw TypeError("take: axis " + std::to_string(axis_) + " out of range for " + x.str());
  std::vector<bool> bc(x.broadcastable.begin(), x.broadcastable.begin() + axis_);
  bc.insert(bc.end(), idx.broadcastable.begin(), idx.broadcastable.end());
  bc.insert(bc.end(), x.broadcastable.begin() + axis_ + 1, x.broadcastable.end());
  return {Type{x.dtype, bc}};
}

std::vector<Shape> Take::infer_shapes(const std::vector<Shape>& in, const std::vector<const Tensor*>&) const {
  Shape out(in[0].begin(), in[0].begin() + axis_);
  out.insert(out.end(), in[1].begin(), in[1].end());
  out.insert(out.end(), in[0].begin() + axis_ + 1, in[0].end());
  return {out};
}



std::vector<Type> OneHotEncode::infer_types(const std::vector<Type>& in) const {
  if (!is_integer(in[0].dtype))
    throw TypeError(name() + ": indices must be integers (i32 or i64), got " + in[0].str() + "; cast them first");
  std::vector<bool> bc = in[0].broadcastable;
  bc.push_back(n_ == 1);
  return {Type{dtype_, bc}};
}

std::vector<Shape> OneHotEncode::infer_shapes(const std::vector<Shape>& in, const std::vector<const Tensor*>&) const {
  Shape out = in[0];
  out.push_back(n_);
  return {out};
}

Var one_hot(const Var& indices, int64_t n, DType dtype, Loc loc) {
  if (!indices.defined()) throw TypeError("one_hot: indices is an empty Var (at " + loc_str(loc) + ")");
  if (n < 0) throw TypeError("one_hot: the number of classes must be 0 or more, got " + std::to_string(n) + " (at " + loc_str(loc) + ")");
  return apply1(std::make_shared<OneHotEncode>(n, dtype), {indices}, loc);
}

std::vector<Var> Take::L_op(const Node& node, const std::vector<Var>& gouts) const {
  const Var& x = node.inputs[0];
  if (!is_float(x.dtype())) return {Var(), Var()};
  return {apply1(std::make_shared<TakeInc>(axis_, false), {zeros_like(x, node.loc), gouts[0], node.inputs[1]}, node.loc), Var()};
}

std::vector<Type> TakeInc::infer_types(const std::vector<Type>& in) const {
  Take take(axis_);
  Type region = take.infer_types({in[0], in[2]})[0];
  if (in[1].ndim() > region.ndim() || in[1].dtype != in[0].dtype)
    throw TypeError(name() + ": value " + in[1].str() + " does not fit the taken rows " + region.str());
  return {in[0]};
}

std::vector<Shape> TakeInc::infer_shapes(const std::vector<Shape>& in, const std::vector<const Tensor*>&) const {
  return {in[0]};
}


std::vector<Var> TakeInc::L_op(const Node& node, const std::vector<Var>& gouts) const {
  const Loc loc = node.loc;
  const Var& g = gouts[0];
  const Var& idx = node.inputs[2];
  Var gx = set_ ? apply1(std::make_shared<TakeInc>(axis_, true), {g, constant(Tensor::zeros({}, g.dtype())), idx}, loc) : g;
  Var rows = apply1(std::make_shared<Take>(axis_), {g, idx}, loc);
  if (set_) {
    Var last = apply1(std::make_shared<LastOccurrence>(axis_), {idx, g}, loc);
    std::vector<int64_t> pattern(axis_, -1);
    for (int64_t d = 0; d < idx.ndim(); ++d) pattern.push_back(d);
    pattern.resize(rows.ndim(), -1);
    rows = rows * dimshuffle(last, pattern, loc);
  }
  const Var& y = node.inputs[1];
  Var gy = sum_to_shape_of(rows, pad_left(y, rows.ndim(), loc), loc);
  if (y.ndim() < rows.ndim()) {
    std::vector<int64_t> lead;
    for (int64_t d = 0; d < rows.ndim() - y.ndim(); ++d) lead.push_back(d);
    gy = sum(gy, lead, false, loc);
  }
  return {is_float(node.inputs[0].dtype()) ? gx : Var(), is_float(y.dtype()) ? gy : Var(), Var()};
}

std::vector<Type> LastOccurrence::infer_types(const std::vector<Type>& in) const {
  return {Type{in[1].dtype, in[0].broadcastable}};
}

std::vector<Shape> LastOccurrence::infer_shapes(const std::vector<Shape>& in, const std::vector<const Tensor*>&) const {
  return {in[0]};
}


namespace {

class SubtensorKernel final : public KernelOf<Subtensor> {
 public:
  using KernelOf::KernelOf;
  void run(InputValues in, OutputValues out, std::span<std::byte>) const override {
    Dims shape, strides;
    const int64_t offset = region_geometry(in[0], op().entries(), op().name(), shape, strides);
    set_view(out[0], in[0], shape, strides, offset);
  }
};

class IncSubtensorKernel final : public KernelOf<IncSubtensor> {
 public:
  using KernelOf::KernelOf;
  void run(InputValues in, OutputValues out, std::span<std::byte>) const override {
    write_region(out[0], in[0], in[1], op().entries(), op().name(), op().set());
  }
};

// Calls block(outer, j, row) for every (outer position, index position): row is the checked index.
template <class F>
void for_each_take_row(const Tensor& x, const Tensor& indices, int64_t axis, const std::string& op, F block) {
  const int64_t n = x.shape()[axis];
  int64_t outer = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= x.shape()[d];
  const int64_t count = indices.numel();
  auto row_of = [&](int64_t j) {
    const int64_t i = indices.dtype() == DType::i64 && indices.is_contiguous()
                          ? indices.data<int64_t>()[j]
                          : static_cast<int64_t>(indices.item_as_double(j));
    const int64_t r = i < 0 ? i + n : i;
    if (r < 0 || r >= n)
      throw ShapeError(op + ": index " + std::to_string(i) + " is out of bounds for axis " + std::to_string(axis) +
                       " with size " + std::to_string(n) + " (input " + x.str() + ")");
    return r;
  };
  for (int64_t j = 0; j < count; ++j) row_of(j);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < count; ++j) block(o, j, row_of(j));
}

int64_t inner_size(const Tensor& x, int64_t axis) {
  int64_t inner = 1;
  for (int64_t d = axis + 1; d < x.ndim(); ++d) inner *= x.shape()[d];
  return inner;
}

class TakeKernel final : public KernelOf<Take> {
 public:
  using KernelOf::KernelOf;
  void run(InputValues in, OutputValues out, std::span<std::byte>) const override {
    const int64_t axis = op().axis();
    Tensor x = in[0].contiguous();
    const int64_t inner = inner_size(x, axis);
    const int64_t n = x.shape()[axis];
    const int64_t k = in[1].numel();
    const size_t es = dtype_size(x.dtype());
    const std::byte* px = x.raw_data();
    std::byte* po = out[0].raw_data();
    for_each_take_row(x, in[1], axis, op().name(), [&](int64_t o, int64_t j, int64_t row) {
      std::memcpy(po + ((o * k + j) * inner) * es, px + ((o * n + row) * inner) * es, inner * es);
    });
  }
};

class OneHotEncodeKernel final : public KernelOf<OneHotEncode> {
 public:
  using KernelOf::KernelOf;
  int64_t scratch_bytes(const std::vector<Shape>& in, const std::vector<Shape>&) const override {
    return shape_numel(in[0]) * static_cast<int64_t>(sizeof(int64_t));
  }
  void run(InputValues in, OutputValues out, std::span<std::byte> scratch) const override {
    const Tensor& idx = in[0];
    Tensor& o = out[0];
    const int64_t n = op().n(), count = idx.numel();
    int64_t* column = reinterpret_cast<int64_t*>(scratch.data());
    for (int64_t j = 0; j < count; ++j) {  // every index is checked before the output is written
      const int64_t i = static_cast<int64_t>(idx.item_as_double(j));
      const int64_t c = i < 0 ? i + n : i;
      if (c < 0 || c >= n)
        throw ShapeError(op().name() + ": index " + std::to_string(i) + " is out of bounds for " + std::to_string(n) +
                         " classes (indices " + idx.str() + ")" +
                         (n == 0 ? std::string("; with no classes, no index is valid")
                                 : "; indices must lie in [-" + std::to_string(n) + ", " + std::to_string(n) + ")"));
      column[j] = c;
    }
    dispatch_dtype(o.dtype(), [&](auto tag) {
      using T = decltype(tag);
      T* po = reinterpret_cast<T*>(o.raw_data());
      std::fill_n(po, count * n, T(0));
      for (int64_t j = 0; j < count; ++j) po[j * n + column[j]] = T(1);
    });
  }
};

class TakeIncKernel final : public KernelOf<TakeInc> {
 public:
  using KernelOf::KernelOf;
  void run(InputValues in, OutputValues out, std::span<std::byte>) const override {
    const int64_t axis = op().axis();
    const bool set = op().set();
    const std::string name = op().name();
    Tensor& o = out[0];
    if (!set && o.dtype() == DType::b8) throw TypeError(name + ": cannot increment b8 values");
    copy_broadcast(o, in[0]);
    Shape region = Take(axis).infer_shapes({in[0].shape(), in[2].shape()}, {})[0];
    Tensor y = broadcast_to(in[1], region, name).contiguous();
    const int64_t inner = inner_size(o, axis);
    const int64_t n = o.shape()[axis];
    const int64_t k = in[2].numel();
    dispatch_dtype(o.dtype(), [&](auto tag) {
      using T = decltype(tag);
      T* po = reinterpret_cast<T*>(o.raw_data());
      const T* py = reinterpret_cast<const T*>(y.raw_data());
      for_each_take_row(o, in[2], axis, name, [&](int64_t oi, int64_t j, int64_t row) {
        T* dst = po + (oi * n + row) * inner;
        const T* src = py + (oi * k + j) * inner;
        if constexpr (std::is_same_v<T, bool>) std::copy_n(src, inner, dst);
        else if (set) std::copy_n(src, inner, dst);
        else for (int64_t i = 0; i < inner; ++i) dst[i] += src[i];
      });
    });
  }
};

class LastOccurrenceKernel final : public KernelOf<LastOccurrence> {
 public:
  using KernelOf::KernelOf;
  void run(InputValues in, OutputValues out, std::span<std::byte>) const override {
    const int64_t n = in[1].shape()[op().axis()];
    std::vector<int64_t> idx = in[0].to_vector<int64_t>();
    std::vector<double> last(idx.size(), 0.0);
    std::vector<bool> seen(n, false);
    for (size_t j = idx.size(); j-- > 0;) {
      const int64_t row = idx[j] < 0 ? idx[j] + n : idx[j];
      if (row < 0 || row >= n) throw ShapeError(op().name() + ": index " + std::to_string(idx[j]) + " is out of bounds");
      last[j] = seen[row] ? 0.0 : 1.0;
      seen[row] = true;
    }
    copy_broadcast(out[0], Tensor::from(last, in[0].shape()));
  }
};

}  // namespace

namespace {

// The bound inputs in[first..] (at most three), with no allocation: the kernels run every call.
SmallVector<const Tensor*, 3> bounds_of(InputValues in, size_t first) {
  SmallVector<const Tensor*, 3> bounds;
  for (size_t i = first; i < in.size(); ++i) bounds.push_back(&in[i]);
  return bounds;
}

class DynamicSliceKernel final : public KernelOf<DynamicSlice> {
 public:
  using KernelOf::KernelOf;
  void run(InputValues in, OutputValues out, std::span<std::byte>) const override {
    Dims shape, strides;
    const int64_t offset = region_geometry(in[0], entries_at(op(), bounds_of(in, 1)), op().name(), shape, strides);
    set_view(out[0], in[0], shape, strides, offset);
  }
};

class DynamicSliceUpdateKernel final : public KernelOf<DynamicSliceUpdate> {
 public:
  using KernelOf::KernelOf;
  void run(InputValues in, OutputValues out, std::span<std::byte>) const override {
    write_region(out[0], in[0], in[1], entries_at(op().slice(), bounds_of(in, 2)), op().name(), op().set());
  }
};

}  // namespace

void add_subtensor_kernels(KernelTable& table) {
  table.add<Subtensor, SubtensorKernel>();
  table.add<IncSubtensor, IncSubtensorKernel>();
  table.add<Take, TakeKernel>();
  table.add<OneHotEncode, OneHotEncodeKernel>();
  table.add<TakeInc, TakeIncKernel>();
  table.add<LastOccurrence, LastOccurrenceKernel>();
  table.add<DynamicSlice, DynamicSliceKernel>();
  table.add<DynamicSliceUpdate, DynamicSliceUpdateKernel>();
}

Var slice(const Var& x, int64_t axis, SliceBound start, SliceBound stop, SliceBound step, Loc loc) {
  const int64_t nd = x.ndim();
  const int64_t a = axis < 0 ? axis + nd : axis;
  if (a < 0 || a >= nd)
    throw TypeError("slice: axis " + std::to_string(axis) + " is out of range for " + x.type().str() + " (at " + loc_str(loc) + ")");
  if (step.number == 0) throw TypeError("slice: step cannot be zero (at " + loc_str(loc) + ")");
  if (!start.symbolic.defined() && !stop.symbolic.defined() && !step.symbolic.defined()) {
    std::vector<IndexEntry> entries(a + 1);
    entries[a] = IndexEntry{false, 0, start.number, stop.number, step.number.value_or(1)};
    return apply1(std::make_shared<Subtensor>(entries), {x}, loc);
  }
  // Some bound is known only when the function runs: every given bound becomes an input.
  std::vector<Var> inputs{x};
  auto add_bound = [&](const SliceBound& b, const char* which) {
    if (b.symbolic.defined()) {
      if (b.symbolic.ndim() != 0 || (b.symbolic.dtype() != DType::i64 && b.symbolic.dtype() != DType::i32))
        throw TypeError(std::string("slice: the ") + which + " must be a 0-d integer, got " + b.symbolic.type().str() + " (at " +
                        loc_str(loc) + ")");
      inputs.push_back(b.symbolic);
    } else if (b.number) {
      inputs.push_back(constant(Tensor::scalar(*b.number)));
    }
    return b.symbolic.defined() || b.number.has_value();
  };
  const bool has_start = add_bound(start, "start"), has_stop = add_bound(stop, "stop"), has_step = add_bound(step, "step");
  return apply1(std::make_shared<DynamicSlice>(a, has_start, has_stop, has_step), inputs, loc);
}

Var take(const Var& x, const Var& indices, int64_t axis, Loc loc) {
  const int64_t nd = x.ndim();
  const int64_t a = axis < 0 ? axis + nd : axis;
  if (a < 0 || a >= nd)
    throw TypeError("take: axis " + std::to_string(axis) + " is out of range for " + x.type().str() + " (at " + loc_str(loc) + ")");
  return apply1(std::make_shared<Take>(a), {x, indices}, loc);
}

Var Var::operator[](const VarIndex& index) const {
  if (ndim() == 0) throw TypeError("x[i]: cannot index a 0-d value " + type().str() + " (at " + loc_str(index.loc) + ")");
  if (index.symbolic.defined()) return take(*this, index.symbolic, 0, index.loc);
  std::vector<IndexEntry> entries{IndexEntry{true, index.number, {}, {}, 1}};
  return apply1(std::make_shared<Subtensor>(entries), {*this}, index.loc);
}

namespace {
// A constant every value of which the dtype holds exactly.
bool exactly_in(const Var& value, DType dtype) {
  const std::optional<Tensor>& c = value.get()->constant;
  if (!c) return false;
  const double low = dtype == DType::b8 ? 0 : dtype == DType::i32 ? -2147483648.0 : -9223372036854775808.0;
  const double above = dtype == DType::b8 ? 2 : dtype == DType::i32 ? 2147483648.0 : 9223372036854775808.0;
  for (double v : c->to_vector<double>())
    if (v != std::trunc(v) || v < low || v >= above) return false;  // NaN fails the first test
  return true;
}

Var update_subtensor(const Var& sub, const Var& value, bool set, const Loc& loc) {
  const char* what = set ? "set_subtensor" : "inc_subtensor";
  const Node* n = sub.defined() ? sub.get()->owner : nullptr;
  if (n) {
    // NumPy's same_kind rule for x[i] += v: an increment of a higher kind (float into integer,
    // number into boolean) would be cut before it is added; a bare number that converts exactly
    // is taken.
    if (!set && sub.dtype() == DType::b8)  // said when the graph is built, not when it runs
      throw TypeError(std::string(what) + ": cannot increment b8 values (" + sub.type().str() +
                      "); cast them to an integer dtype, or use set_subtensor(sub, maximum(sub, v)) for an or (at " + loc_str(loc) + ")");
    auto kind = [](DType d) { return d == DType::b8 ? 0 : is_integer(d) ? 1 : 2; };
    if (!set && value.defined() && kind(value.dtype()) > kind(sub.dtype()) && !exactly_in(value, sub.dtype()))
      throw TypeError(std::string(what) + ": cannot add " + value.type().str() + " increments to " + sub.type().str() +
                      " values without cutting them (NumPy's same_kind rule); cast the increment with cast(v, " +
                      dtype_name(sub.dtype()) + ") or the values first (at " + loc_str(loc) + ")");
    Var v = cast(value, sub.dtype(), loc);
    Var updated;
    if (auto st = dynamic_cast<const Subtensor*>(n->op.get())) {
      updated = apply1(std::make_shared<IncSubtensor>(st->entries(), set), {n->inputs[0], v}, loc);
    } else if (auto tk = dynamic_cast<const Take*>(n->op.get())) {
      updated = apply1(std::make_shared<TakeInc>(tk->axis(), set), {n->inputs[0], v, n->inputs[1]}, loc);
    } else if (dynamic_cast<const DynamicSlice*>(n->op.get())) {
      std::vector<Var> inputs{n->inputs[0], v};
      inputs.insert(inputs.end(), n->inputs.begin() + 1, n->inputs.end());
      updated = apply1(std::make_shared<DynamicSliceUpdate>(std::static_pointer_cast<const DynamicSlice>(n->op), set), inputs, loc);
    }
    if (updated.defined()) {
      // Indexing that views what it indexes (slices, a single index), nested, updates the value
      // at the root, as NumPy's x[1][0:2] = v changes x (it returned x[1] changed); a lookup of
      // several indices makes a copy, as NumPy's does, and is where the update stops.
      const Node* parent = n->inputs[0].get()->owner;
      const auto* lookup = parent ? dynamic_cast<const Take*>(parent->op.get()) : nullptr;
      const bool views = parent && (dynamic_cast<const Subtensor*>(parent->op.get()) || dynamic_cast<const DynamicSlice*>(parent->op.get()) ||
                                    (lookup && parent->inputs[1].ndim() == 0));
      return views ? update_subtensor(n->inputs[0], updated, true, loc) : updated;
    }
  }
  throw TypeError(std::string(what) + ": the first argument must be an indexing result (x[i], slice, take), got " +
                  (sub.defined() ? sub.type().str() : std::string("an empty Var")) + " (at " + loc_str(loc) + ")");
}
}  // namespace

Var set_subtensor(const Var& sub, const Var& value, Loc loc) { return update_subtensor(sub, value, true, loc); }
Var inc_subtensor(const Var& sub, const Var& value, Loc loc) { return update_subtensor(sub, value, false, loc); }

}  // namespace kiln

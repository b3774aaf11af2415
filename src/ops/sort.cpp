// Sorting along an axis: argsort, and sort as the values taken along the sorting indices (so its
// gradient goes back through the permutation).
#include "ops/sort.hpp"

#include <algorithm>
#include <numeric>

#include "kiln/ops.hpp"
#include "ops/along_axis.hpp"
#include "tensor/dispatch.hpp"

namespace kiln {

namespace {

// take_along and its gradient: integer indices of the values' ndim, then of their shape.
void check_along_types(const std::string& op, const Type& values, const Type& indices, int64_t axis) {
  if (!is_integer(indices.dtype)) throw TypeError(op + ": indices must be integers, got " + indices.str());
  if (values.ndim() != indices.ndim() || axis >= values.ndim())
    throw TypeError(op + ": the indices must have the values' ndim, got " + indices.str() + " for " + values.str());
}
Shape check_along_shapes(const std::string& op, const std::vector<Shape>& in) {
  if (in[0] != in[1])
    throw ShapeError(op + ": the indices must have the values' shape, got " + shape_str(in[1]) + " for values of shape " +
                     shape_str(in[0]));
  return in[0];
}

// A stable sort of v[0, n) with `buffer` (n elements) as its working space: bottom-up merges of
// runs that insertion sort made (std::stable_sort would allocate its own buffer).
template <class Less> void merge_sort(int64_t* v, int64_t* buffer, int64_t n, Less less) {
  constexpr int64_t kRun = 16;
  for (int64_t start = 0; start < n; start += kRun) {
    const int64_t end = std::min(n, start + kRun);
    for (int64_t i = start + 1; i < end; ++i) {
      const int64_t item = v[i];
      int64_t j = i;
      for (; j > start && less(item, v[j - 1]); --j) v[j] = v[j - 1];
      v[j] = item;
    }
  }
  int64_t* from = v;
  int64_t* to = buffer;
  for (int64_t width = kRun; width < n; width *= 2) {
    for (int64_t lo = 0; lo < n; lo += 2 * width) {
      const int64_t mid = std::min(n, lo + width), hi = std::min(n, lo + 2 * width);
      std::merge(from + lo, from + mid, from + mid, from + hi, to + lo, less);  // stable: the left run first on ties
    }
    std::swap(from, to);
  }
  if (from != v) std::copy_n(from, n, v);
}

class ArgsortKernel final : public KernelOf<Argsort> {
 public:
  using KernelOf::KernelOf;
  // One row's order, and std::stable_sort's buffer (as long again): sorting allocates nothing.
  int64_t scratch_bytes(const std::vector<Shape>& in, const std::vector<Shape>&) const override {
    return 2 * in[0][static_cast<size_t>(op().axis())] * static_cast<int64_t>(sizeof(int64_t));
  }
  void run(InputValues in, OutputValues out, std::span<std::byte> scratch) const override {
    const Tensor& x = in[0];
    int64_t* po = reinterpret_cast<int64_t*>(out[0].raw_data());
    int64_t* order = reinterpret_cast<int64_t*>(scratch.data());
    int64_t* buffer = order + x.shape()[op().axis()];
    dispatch_dtype(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      const T* px = reinterpret_cast<const T*>(x.raw_data());
      for_each_run_along(x, op().axis(), [&](int64_t xo, int64_t oo, int64_t n, int64_t xs, int64_t os) {
        std::iota(order, order + n, int64_t{0});
        const T* row = px + xo;
        merge_sort(order, buffer, n, [&](int64_t i, int64_t j) {
          const T a = row[i * xs], b = row[j * xs];
          if (b != b) return a == a;  // NaN last: a number comes before a NaN
          return a < b;
        });
        for (int64_t i = 0; i < n; ++i) po[oo + i * os] = order[i];
      });
    });
  }
};

// Every index of `indices` in row-major order, checked against n (negative ones count from n),
// into `out` (the kernel's scratch: numel i64 values).
const int64_t* checked_indices(const Tensor& indices, int64_t n, const std::string& op, std::span<std::byte> out) {
  int64_t* v = reinterpret_cast<int64_t*>(out.data());
  for (int64_t k = 0; k < indices.numel(); ++k) {
    const int64_t i = indices.dtype() == DType::i64 && indices.is_contiguous() ? indices.data<int64_t>()[k]
                                                                               : static_cast<int64_t>(indices.item_as_double(k));
    const int64_t c = i < 0 ? i + n : i;
    if (c < 0 || c >= n)
      throw ShapeError(op + ": index " + std::to_string(i) + " is out of bounds for an axis of size " + std::to_string(n) +
                       " (indices " + indices.str() + ")");
    v[k] = c;
  }
  return v;
}

int64_t index_scratch(const std::vector<Shape>& in) { return shape_numel(in[1]) * static_cast<int64_t>(sizeof(int64_t)); }

class TakeAlongKernel final : public KernelOf<TakeAlong> {
 public:
  using KernelOf::KernelOf;
  int64_t scratch_bytes(const std::vector<Shape>& in, const std::vector<Shape>&) const override { return index_scratch(in); }
  void run(InputValues in, OutputValues out, std::span<std::byte> scratch) const override {
    const Tensor& x = in[0];
    const int64_t axis = op().axis();
    const int64_t* idx = checked_indices(in[1], x.shape()[axis], op().name(), scratch);
    dispatch_dtype(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      const T* px = reinterpret_cast<const T*>(x.raw_data());
      T* po = reinterpret_cast<T*>(out[0].raw_data());
      for_each_run_along(x, axis, [&](int64_t xo, int64_t oo, int64_t n, int64_t xs, int64_t os) {
        for (int64_t i = 0; i < n; ++i) po[oo + i * os] = px[xo + idx[oo + i * os] * xs];
      });
    });
  }
};

class TakeAlongGradKernel final : public KernelOf<TakeAlongGrad> {
 public:
  using KernelOf::KernelOf;
  int64_t scratch_bytes(const std::vector<Shape>& in, const std::vector<Shape>&) const override { return index_scratch(in); }
  void run(InputValues in, OutputValues out, std::span<std::byte> scratch) const override {
    const Tensor& g = in[0];  // read through its strides
    const int64_t axis = op().axis();
    const int64_t* idx = checked_indices(in[1], g.shape()[axis], op().name(), scratch);
    dispatch_dtype(g.dtype(), [&](auto tag) {
      using T = decltype(tag);
      if constexpr (std::is_same_v<T, bool>) {
        throw TypeError(op().name() + ": no kernel for b8");
      } else {
        const T* pg = reinterpret_cast<const T*>(g.raw_data());
        T* po = reinterpret_cast<T*>(out[0].raw_data());
        std::fill_n(po, g.numel(), T(0));
        for_each_run_along(g, axis, [&](int64_t go, int64_t oo, int64_t n, int64_t gs, int64_t os) {
          for (int64_t i = 0; i < n; ++i) po[oo + idx[oo + i * os] * os] += pg[go + i * gs];
        });
      }
    });
  }
};

}  // namespace

std::vector<Type> Argsort::infer_types(const std::vector<Type>& in) const {
  if (axis_ >= in[0].ndim()) throw TypeError(name() + ": axis out of range for " + in[0].str());
  return {Type{DType::i64, in[0].broadcastable}};
}

std::vector<Shape> Argsort::infer_shapes(const std::vector<Shape>& in, const std::vector<const Tensor*>&) const {
  return {in[0]};
}

std::vector<Type> TakeAlong::infer_types(const std::vector<Type>& in) const {
  check_along_types(name(), in[0], in[1], axis_);
  return {Type{in[0].dtype, in[1].broadcastable}};
}

std::vector<Shape> TakeAlong::infer_shapes(const std::vector<Shape>& in, const std::vector<const Tensor*>&) const {
  return {check_along_shapes(name(), in)};
}

std::vector<Var> TakeAlong::L_op(const Node& node, const std::vector<Var>& gouts) const {
  const Var& x = node.inputs[0];
  if (!is_float(x.dtype())) return {Var(), Var()};
  return {apply1(std::make_shared<TakeAlongGrad>(axis_), {cast(gouts[0], x.dtype(), node.loc), node.inputs[1]}, node.loc),
          Var()};
}

std::vector<Type> TakeAlongGrad::infer_types(const std::vector<Type>& in) const {
  check_along_types(name(), in[0], in[1], axis_);
  return {Type{in[0].dtype, in[0].broadcastable}};
}

std::vector<Shape> TakeAlongGrad::infer_shapes(const std::vector<Shape>& in, const std::vector<const Tensor*>&) const {
  return {check_along_shapes(name(), in)};
}

std::vector<Var> TakeAlongGrad::L_op(const Node& node, const std::vector<Var>& gouts) const {
  return {apply1(std::make_shared<TakeAlong>(axis_), {gouts[0], node.inputs[1]}, node.loc), Var()};
}

void add_sort_kernels(KernelTable& table) {
  table.add<Argsort, ArgsortKernel>();
  table.add<TakeAlong, TakeAlongKernel>();
  table.add<TakeAlongGrad, TakeAlongGradKernel>();
}

namespace {
int64_t sort_axis(const Var& x, int64_t axis, const char* op, const Loc& loc) {
  if (!x.defined()) throw TypeError(std::string(op) + ": x is an empty Var (at " + loc_str(loc) + ")");
  const int64_t nd = x.ndim();
  const int64_t a = axis < 0 ? axis + nd : axis;
  if (a < 0 || a >= nd)
    throw TypeError(std::string(op) + ": axis " + std::to_string(axis) + " is out of range for " + x.type().str() +
                    (nd == 0 ? " (a 0-d value has nothing to sort)" : "") + " (at " + loc_str(loc) + ")");
  return a;
}
}  // namespace

Var argsort(const Var& x, int64_t axis, Loc loc) {
  const int64_t a = sort_axis(x, axis, "argsort", loc);
  return apply1(std::make_shared<Argsort>(a), {x}, loc);
}

Var sort(const Var& x, int64_t axis, Loc loc) {
  const int64_t a = sort_axis(x, axis, "sort", loc);
  return apply1(std::make_shared<TakeAlong>(a), {x, apply1(std::make_shared<Argsort>(a), {x}, loc)}, loc);
}

}  // namespace kiln

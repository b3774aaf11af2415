// Running reductions along an axis: cumsum.
#include "ops/cumulative.hpp"

#include "kiln/ops.hpp"
#include "ops/scalar_ops.hpp"
#include "ops/along_axis.hpp"
#include "tensor/dispatch.hpp"

namespace kiln {

std::vector<Type> CumSum::infer_types(const std::vector<Type>& in) const {
  const Type& x = in.at(0);
  if (axis_ < 0 || axis_ >= x.ndim()) throw TypeError(name() + ": axis out of range for " + x.str());
  if (x.dtype == DType::b8 || x.dtype == DType::i32)
    throw TypeError(name() + ": takes f32, f64 or i64 values, got " + x.str() + " (cumsum() casts them to i64 first)");
  std::vector<bool> bc = x.broadcastable;
  return {Type{x.dtype, bc}};
}

std::vector<Shape> CumSum::infer_shapes(const std::vector<Shape>& in, const std::vector<const Tensor*>&) const {
  return {in[0]};
}

std::vector<Var> CumSum::L_op(const Node& node, const std::vector<Var>& gouts) const {
  const Var& x = node.inputs[0];
  if (!is_float(x.dtype())) return {Var()};
  const Loc loc = node.loc;
  auto reversed = [&](const Var& v) { return slice(v, axis_, std::nullopt, std::nullopt, -1, loc); };
  return {reversed(cumsum(reversed(gouts[0]), axis_, loc))};
}

std::optional<std::vector<Var>> CumSum::R_op(const Node& node, const std::vector<Var>& tangents) const {
  if (!tangents[0].defined()) return std::vector<Var>{Var()};
  return std::vector<Var>{cumsum(cast(tangents[0], node.inputs[0].dtype(), node.loc), axis_, node.loc)};
}

namespace {

class CumSumKernel final : public KernelOf<CumSum> {
 public:
  using KernelOf::KernelOf;
  void run(InputValues in, OutputValues out, std::span<std::byte>) const override {
    const Tensor& x = in[0];
    Tensor& o = out[0];  // contiguous
    if (o.numel() == 0) return;
    dispatch_dtype(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      if constexpr (std::is_same_v<T, bool>) {
        throw TypeError(op().name() + ": no kernel for b8");
      } else {
        const T* px = reinterpret_cast<const T*>(x.raw_data());
        T* po = reinterpret_cast<T*>(o.raw_data());
        for_each_run_along(x, op().axis(), [&](int64_t xo, int64_t oo, int64_t n, int64_t xs, int64_t os) {
          T acc = T(0);
          for (int64_t i = 0; i < n; ++i) {
            acc = wrapping_add(acc, static_cast<T>(px[xo + i * xs]));
            po[oo + i * os] = acc;
          }
        });
      }
    });
  }
};

}  // namespace

void add_cumulative_kernels(KernelTable& table) { table.add<CumSum, CumSumKernel>(); }

Var cumsum(const Var& x, std::optional<int64_t> axis, Loc loc) {
  if (!x.defined()) throw TypeError("cumsum: x is an empty Var (at " + loc_str(loc) + ")");
  Var v = x;
  if (!is_float(v.dtype()) && v.dtype() != DType::i64) v = cast(v, DType::i64, loc);  // NumPy: at least the platform int
  if (!axis) return cumsum(flatten(v, 1, loc), 0, loc);  // NumPy's axis=None: over the flattened values
  const int64_t nd = v.ndim();
  const int64_t a = *axis < 0 ? *axis + nd : *axis;
  if (a < 0 || a >= nd)
    throw TypeError("cumsum: axis " + std::to_string(*axis) + " is out of range for " + x.type().str() +
                    " (give an axis in [-" + std::to_string(nd) + ", " + std::to_string(nd) + "), or none to sum the flattened values; at " +
                    loc_str(loc) + ")");
  return apply1(std::make_shared<CumSum>(a), {v}, loc);
}

}  // namespace kiln

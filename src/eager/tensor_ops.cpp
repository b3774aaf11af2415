// The public eager operations: each builds its symbolic expression (once per key, in run_eager)
// with the very functions of ops.hpp, so types, broadcasting and errors are the symbolic ones.
#include "eager/run_eager.hpp"
#include "kiln/eager.hpp"
#include "tensor/copy.hpp"
#include "tensor/small_vector.hpp"
#include "tensor/tensor_book.hpp"

namespace kiln {
namespace {

using Vars = std::span<const Var>;
using Params = std::span<const int64_t>;

EagerArg arg(const TensorOperand& o) {
  if (o.tensor) return *o.tensor;
  if (o.is_integer) return o.integer;
  return o.number;
}

Tensor eager(EagerBuild build, std::initializer_list<EagerArg> args, std::initializer_list<int64_t> params,
             const Loc& loc) {
  return run_eager(build, std::span(args.begin(), args.size()), std::span(params.begin(), params.size()), loc);
}

// An operation that is a view of its argument (its result may share the argument's storage).
Tensor eager_view(EagerBuild build, std::initializer_list<EagerArg> args, std::initializer_list<int64_t> params,
                  const Loc& loc) {
  return run_eager(build, std::span(args.begin(), args.size()), std::span(params.begin(), params.size()), loc, nullptr, true);
}

Tensor in_place(EagerBuild build, const Tensor& a, const TensorOperand& b) {
  check_writable_view(a, "in-place operation");
  // An operand that overlaps a otherwise than as a itself would be read after it is written.
  Tensor read = b.tensor && b.tensor->shares_memory(a) &&
                        !(b.tensor->offset() == a.offset() && b.tensor->shape() == a.shape() && b.tensor->strides() == a.strides())
                    ? b.tensor->clone()
                    : Tensor();
  const EagerArg second = read.defined() ? EagerArg(read) : arg(b);
  const EagerArg args[] = {a, second};
  return run_eager(build, args, {}, b.loc, &a);
}

Axes axes_of(Params p) { return Axes(p.begin() + 1, p.end()); }
Tensor reduction(EagerBuild build, const Tensor& x, std::span<const int64_t> axes, bool keepdims, const Loc& loc) {
  SmallVector<int64_t, 8> params{keepdims};
  for (int64_t axis : axes) params.push_back(axis);
  const EagerArg args[] = {x};
  return run_eager(build, args, params, loc);
}

std::optional<int64_t> optional_at(Params p, size_t i) { return p[i] ? std::optional<int64_t>(p[i + 1]) : std::nullopt; }

}  // namespace

#define KILN_EAGER_OPERATOR(op)                                                                                  \
  Tensor operator op(const TensorOperand& a, const TensorOperand& b) {                                          \
    return eager(+[](Vars v, Params, const Loc& loc) { return Operand(v[0], loc) op Operand(v[1], loc); },       \
                 {arg(a), arg(b)}, {}, a.loc);                                                                   \
  }
KILN_EAGER_OPERATOR(+)
KILN_EAGER_OPERATOR(-)
KILN_EAGER_OPERATOR(*)
KILN_EAGER_OPERATOR(/)
KILN_EAGER_OPERATOR(%)
KILN_EAGER_OPERATOR(<)
KILN_EAGER_OPERATOR(<=)
KILN_EAGER_OPERATOR(>)
KILN_EAGER_OPERATOR(>=)
KILN_EAGER_OPERATOR(==)
KILN_EAGER_OPERATOR(!=)
#undef KILN_EAGER_OPERATOR

Tensor operator-(const Tensor& a) {
  return eager(+[](Vars v, Params, const Loc& loc) { return -Operand(v[0], loc); }, {a}, {}, Loc::current());
}

#define KILN_EAGER_IN_PLACE(name, op)                                                                            \
  Tensor name(const Tensor& a, const TensorOperand& b) {                                                        \
    return in_place(+[](Vars v, Params, const Loc& loc) { return Operand(v[0], loc) op Operand(v[1], loc); }, a, b); \
  }
KILN_EAGER_IN_PLACE(add_, +)
KILN_EAGER_IN_PLACE(sub_, -)
KILN_EAGER_IN_PLACE(mul_, *)
KILN_EAGER_IN_PLACE(div_, /)
#undef KILN_EAGER_IN_PLACE

#define KILN_EAGER_COMPOUND(op, name)                                                                            \
  Tensor& operator op(Tensor& a, const TensorOperand& b) {                                                       \
    const InternalTensors internal; /* the handle name returns is dropped at once: not the user's */             \
    name(a, b);                                                                                                  \
    return a;                                                                                                    \
  }
KILN_EAGER_COMPOUND(+=, add_)
KILN_EAGER_COMPOUND(-=, sub_)
KILN_EAGER_COMPOUND(*=, mul_)
KILN_EAGER_COMPOUND(/=, div_)
#undef KILN_EAGER_COMPOUND

#define KILN_EAGER_UNARY(name)                                                                                   \
  Tensor name(const Tensor& x, Loc loc) {                                                                        \
    return eager(+[](Vars v, Params, const Loc& l) { return name(v[0], l); }, {x}, {}, loc);                     \
  }
KILN_EAGER_UNARY(exp)
KILN_EAGER_UNARY(log)
KILN_EAGER_UNARY(log1p)
KILN_EAGER_UNARY(expm1)
KILN_EAGER_UNARY(sqrt)
KILN_EAGER_UNARY(sqr)
KILN_EAGER_UNARY(tanh)
KILN_EAGER_UNARY(sigmoid)
KILN_EAGER_UNARY(softplus)
KILN_EAGER_UNARY(relu)
KILN_EAGER_UNARY(abs)
KILN_EAGER_UNARY(sign)
KILN_EAGER_UNARY(sin)
KILN_EAGER_UNARY(cos)
KILN_EAGER_UNARY(square)
KILN_EAGER_UNARY(floor)
KILN_EAGER_UNARY(ceil)
KILN_EAGER_UNARY(round)
KILN_EAGER_UNARY(erf)
Tensor transpose(const Tensor& x, Loc loc) {
  return eager_view(+[](Vars v, Params, const Loc& l) { return transpose(v[0], l); }, {x}, {}, loc);
}
KILN_EAGER_UNARY(zeros_like)
KILN_EAGER_UNARY(ones_like)
#undef KILN_EAGER_UNARY

#define KILN_EAGER_BINARY(name)                                                                                  \
  Tensor name(const Tensor& x, const Tensor& y, Loc loc) {                                                       \
    return eager(+[](Vars v, Params, const Loc& l) { return name(v[0], v[1], l); }, {x, y}, {}, loc);           \
  }
KILN_EAGER_BINARY(pow)
KILN_EAGER_BINARY(maximum)
KILN_EAGER_BINARY(minimum)
KILN_EAGER_BINARY(dot)
KILN_EAGER_BINARY(matmul)
KILN_EAGER_BINARY(categorical_crossentropy)
KILN_EAGER_BINARY(binary_crossentropy)
#undef KILN_EAGER_BINARY

#define KILN_EAGER_REDUCTION(name)                                                                               \
  EagerBuild build_##name() {                                                                                    \
    return +[](Vars v, Params p, const Loc& l) { return name(v[0], axes_of(p), p[0] != 0, l); };                 \
  }                                                                                                              \
  Tensor name(const Tensor& x, Axes axes, bool keepdims, Loc loc) {                                              \
    return reduction(build_##name(), x, axes, keepdims, loc);                                                    \
  }
KILN_EAGER_REDUCTION(sum)
KILN_EAGER_REDUCTION(mean)
KILN_EAGER_REDUCTION(max)
KILN_EAGER_REDUCTION(min)
KILN_EAGER_REDUCTION(prod)
KILN_EAGER_REDUCTION(argmax)
KILN_EAGER_REDUCTION(argmin)
KILN_EAGER_REDUCTION(logsumexp)
#undef KILN_EAGER_REDUCTION

namespace {
Tensor deviation(bool standard, const Tensor& x, const Axes& axes, bool keepdims, int64_t ddof, const Loc& loc) {
  SmallVector<int64_t, 8> params{standard, keepdims, ddof};
  for (int64_t axis : axes) params.push_back(axis);
  const EagerArg args[] = {x};
  return run_eager(+[](Vars v, Params p, const Loc& l) {
                     const Axes a(p.begin() + 3, p.end());
                     return p[0] ? kiln::std(v[0], a, p[1] != 0, p[2], l) : var(v[0], a, p[1] != 0, p[2], l);
                   },
                   args, params, loc);
}
}  // namespace

Tensor var(const Tensor& x, Axes axes, bool keepdims, int64_t ddof, Loc loc) { return deviation(false, x, axes, keepdims, ddof, loc); }
Tensor std(const Tensor& x, Axes axes, bool keepdims, int64_t ddof, Loc loc) { return deviation(true, x, axes, keepdims, ddof, loc); }

Tensor Tensor::sum(Loc loc) const { return kiln::sum(*this, Axes{}, false, loc); }
Tensor Tensor::mean(Loc loc) const { return kiln::mean(*this, Axes{}, false, loc); }
Tensor Tensor::sum(int64_t axis, bool keepdims, Loc loc) const { return kiln::sum(*this, axis, keepdims, loc); }
Tensor Tensor::mean(int64_t axis, bool keepdims, Loc loc) const { return kiln::mean(*this, axis, keepdims, loc); }

Tensor detail::reduce_along(Reduction reduction, const Tensor& x, int64_t axis, bool keepdims, Loc loc) {
  static constexpr EagerBuild (*builds[])() = {build_sum, build_mean, build_max,      build_min,
                                               build_prod, build_argmax, build_logsumexp, build_argmin};
  const int64_t axes[] = {axis};
  return kiln::reduction(builds[static_cast<size_t>(reduction)](), x, axes, keepdims, loc);
}

Tensor mod(const TensorOperand& a, const TensorOperand& b) { return a % b; }

Tensor clip(const Tensor& x, const TensorOperand& lo, const TensorOperand& hi, Loc loc) {
  return eager(+[](Vars v, Params, const Loc& l) { return clip(v[0], Operand(v[1], l), Operand(v[2], l), l); },
               {x, arg(lo), arg(hi)}, {}, loc);
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b, Loc loc) {
  return eager(+[](Vars v, Params, const Loc& l) { return where(v[0], v[1], v[2], l); }, {cond, a, b}, {}, loc);
}

Tensor cast(const Tensor& x, DType dtype, Loc loc) {
  return eager(+[](Vars v, Params p, const Loc& l) { return cast(v[0], static_cast<DType>(p[0]), l); }, {x},
               {static_cast<int64_t>(dtype)}, loc);
}

Tensor dimshuffle(const Tensor& x, std::vector<int64_t> pattern, Loc loc) {
  const EagerArg args[] = {x};
  return run_eager(+[](Vars v, Params p, const Loc& l) { return dimshuffle(v[0], std::vector<int64_t>(p.begin(), p.end()), l); },
                   args, pattern, loc, nullptr, true);
}

namespace {
Tensor reshape_to(const Tensor& x, Params shape, const Loc& loc) {
  const EagerArg args[] = {x};
  return run_eager(+[](Vars v, Params p, const Loc& l) { return reshape(v[0], Shape(p.begin(), p.end()), l); }, args,
                   shape, loc, nullptr, true);
}
}  // namespace

Tensor reshape(const Tensor& x, Shape shape, Loc loc) { return reshape_to(x, shape, loc); }

Tensor reshape(const Tensor& x, std::initializer_list<int64_t> shape, Loc loc) {
  return reshape_to(x, Params(shape.begin(), shape.size()), loc);
}

Tensor flatten(const Tensor& x, int64_t outdim, Loc loc) {
  return eager_view(+[](Vars v, Params p, const Loc& l) { return flatten(v[0], p[0], l); }, {x}, {outdim}, loc);
}

Tensor tile(const Tensor& x, std::vector<int64_t> reps, Loc loc) {
  const EagerArg args[] = {x};
  return run_eager(+[](Vars v, Params p, const Loc& l) { return tile(v[0], std::vector<int64_t>(p.begin(), p.end()), l); },
                   args, reps, loc);
}

Tensor repeat(const Tensor& x, int64_t repeats, std::optional<int64_t> axis, Loc loc) {
  return eager(+[](Vars v, Params p, const Loc& l) { return repeat(v[0], p[0], optional_at(p, 1), l); }, {x},
               {repeats, axis.has_value(), axis.value_or(0)}, loc);
}

Tensor sort(const Tensor& x, int64_t axis, Loc loc) {
  return eager(+[](Vars v, Params p, const Loc& l) { return sort(v[0], p[0], l); }, {x}, {axis}, loc);
}

Tensor argsort(const Tensor& x, int64_t axis, Loc loc) {
  return eager(+[](Vars v, Params p, const Loc& l) { return argsort(v[0], p[0], l); }, {x}, {axis}, loc);
}

Tensor cumsum(const Tensor& x, std::optional<int64_t> axis, Loc loc) {
  return eager(+[](Vars v, Params p, const Loc& l) { return cumsum(v[0], optional_at(p, 0), l); }, {x},
               {axis.has_value(), axis.value_or(0)}, loc);
}

Tensor one_hot(const Tensor& indices, int64_t n, DType dtype, Loc loc) {
  return eager(+[](Vars v, Params p, const Loc& l) { return one_hot(v[0], p[0], static_cast<DType>(p[1]), l); }, {indices},
               {n, static_cast<int64_t>(dtype)}, loc);
}

Tensor softmax(const Tensor& x, int64_t axis, Loc loc) {
  return eager(+[](Vars v, Params p, const Loc& l) { return softmax(v[0], p[0], l); }, {x}, {axis}, loc);
}

Tensor log_softmax(const Tensor& x, int64_t axis, Loc loc) {
  return eager(+[](Vars v, Params p, const Loc& l) { return log_softmax(v[0], p[0], l); }, {x}, {axis}, loc);
}

Tensor slice(const Tensor& x, int64_t axis, std::optional<int64_t> start, std::optional<int64_t> stop, int64_t step, Loc loc) {
  return eager_view(+[](Vars v, Params p, const Loc& l) { return slice(v[0], p[0], optional_at(p, 1), optional_at(p, 3), p[5], l); },
                    {x}, {axis, start.has_value(), start.value_or(0), stop.has_value(), stop.value_or(0), step}, loc);
}

Tensor take(const Tensor& x, const Tensor& indices, int64_t axis, Loc loc) {
  return eager(+[](Vars v, Params p, const Loc& l) { return take(v[0], v[1], p[0], l); }, {x, indices}, {axis}, loc);
}

Tensor concatenate(const std::vector<Tensor>& xs, int64_t axis, Loc loc) {
  const std::vector<EagerArg> args(xs.begin(), xs.end());
  const int64_t params[] = {axis};
  return run_eager(+[](Vars v, Params p, const Loc& l) { return concatenate(std::vector<Var>(v.begin(), v.end()), p[0], l); },
                   args, params, loc);
}

Tensor stack(const std::vector<Tensor>& xs, int64_t axis, Loc loc) {
  const std::vector<EagerArg> args(xs.begin(), xs.end());
  const int64_t params[] = {axis};
  return run_eager(+[](Vars v, Params p, const Loc& l) { return stack(std::vector<Var>(v.begin(), v.end()), p[0], l); },
                   args, params, loc);
}

Tensor concatenate(std::initializer_list<Tensor> xs, int64_t axis, Loc loc) { return concatenate(std::vector<Tensor>(xs), axis, loc); }

Tensor stack(std::initializer_list<Tensor> xs, int64_t axis, Loc loc) { return stack(std::vector<Tensor>(xs), axis, loc); }

}  // namespace kiln

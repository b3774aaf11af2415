#pragma once
#include <concepts>
#include <cstdint>
#include <string>
#include <type_traits>
#include <optional>
#include <vector>

#include "kiln/ops.hpp"
#include "kiln/scope.hpp"

namespace kiln {

// Eager operations (docs/eager.md): the operators and free functions of ops.hpp on Tensors, run
// at once through the same kernels, type rules and errors as compiled functions. Each returns a
// fresh handle made at the caller's line (in its dispose scope, if any); views (reshape,
// transpose, slice) share the argument's storage.
struct TensorOperand {
  TensorOperand(const Tensor& t, Loc loc = Loc::current()) : tensor(&t), loc(loc) {}  // NOLINT
  // Any number but a bool: integers (int, long long, unsigned, size_t...) are weak integers,
  // the rest weak floats.
  template <class Number>
    requires(std::is_arithmetic_v<Number> && !std::is_same_v<Number, bool>)
  TensorOperand(Number v, Loc loc = Loc::current())  // NOLINT
      : number(static_cast<double>(v)), integer(checked_integer(v)), is_integer(std::is_integral_v<Number>), loc(loc) {}
  const Tensor* tensor = nullptr;
  double number = 0;
  int64_t integer = 0;
  bool is_integer = false;
  Loc loc;

 private:
  template <class Number> static int64_t checked_integer(Number v) {
    if constexpr (std::is_integral_v<Number> && std::is_unsigned_v<Number> && sizeof(Number) >= sizeof(int64_t)) {
      if (v > static_cast<Number>(INT64_MAX))
        throw TypeError("the number " + std::to_string(v) + " does not fit an i64 operand");
    }
    if constexpr (std::is_integral_v<Number>) return static_cast<int64_t>(v);
    else return 0;
  }
};

Tensor operator+(const TensorOperand& a, const TensorOperand& b);
Tensor operator-(const TensorOperand& a, const TensorOperand& b);
Tensor operator*(const TensorOperand& a, const TensorOperand& b);
Tensor operator/(const TensorOperand& a, const TensorOperand& b);
Tensor operator-(const Tensor& a);
Tensor operator<(const TensorOperand& a, const TensorOperand& b);
Tensor operator<=(const TensorOperand& a, const TensorOperand& b);
Tensor operator>(const TensorOperand& a, const TensorOperand& b);
Tensor operator>=(const TensorOperand& a, const TensorOperand& b);
Tensor operator==(const TensorOperand& a, const TensorOperand& b);
Tensor operator!=(const TensorOperand& a, const TensorOperand& b);
Tensor operator%(const TensorOperand& a, const TensorOperand& b);
Tensor mod(const TensorOperand& a, const TensorOperand& b);

// In place: a's storage is overwritten with the result (which must keep a's shape and dtype);
// the return value is a fresh handle on it.
Tensor add_(const Tensor& a, const TensorOperand& b);
Tensor sub_(const Tensor& a, const TensorOperand& b);
Tensor mul_(const Tensor& a, const TensorOperand& b);
Tensor div_(const Tensor& a, const TensorOperand& b);
// The same, as LibTorch's compound assignments: a's storage is overwritten and a stays the handle
// it was (no tensor is made, so an accumulator updated inside a loop's dispose scope survives it).
Tensor& operator+=(Tensor& a, const TensorOperand& b);
Tensor& operator-=(Tensor& a, const TensorOperand& b);
Tensor& operator*=(Tensor& a, const TensorOperand& b);
Tensor& operator/=(Tensor& a, const TensorOperand& b);

Tensor exp(const Tensor& x, Loc loc = Loc::current());
Tensor log(const Tensor& x, Loc loc = Loc::current());
Tensor log1p(const Tensor& x, Loc loc = Loc::current());
Tensor expm1(const Tensor& x, Loc loc = Loc::current());
Tensor sqrt(const Tensor& x, Loc loc = Loc::current());
Tensor sqr(const Tensor& x, Loc loc = Loc::current());
Tensor tanh(const Tensor& x, Loc loc = Loc::current());
Tensor sigmoid(const Tensor& x, Loc loc = Loc::current());
Tensor softplus(const Tensor& x, Loc loc = Loc::current());
Tensor relu(const Tensor& x, Loc loc = Loc::current());
Tensor abs(const Tensor& x, Loc loc = Loc::current());
Tensor sign(const Tensor& x, Loc loc = Loc::current());
Tensor sin(const Tensor& x, Loc loc = Loc::current());
Tensor cos(const Tensor& x, Loc loc = Loc::current());
Tensor square(const Tensor& x, Loc loc = Loc::current());
Tensor floor(const Tensor& x, Loc loc = Loc::current());
Tensor ceil(const Tensor& x, Loc loc = Loc::current());
Tensor round(const Tensor& x, Loc loc = Loc::current());
Tensor erf(const Tensor& x, Loc loc = Loc::current());
Tensor clip(const Tensor& x, const TensorOperand& lo, const TensorOperand& hi, Loc loc = Loc::current());
Tensor pow(const Tensor& x, const Tensor& y, Loc loc = Loc::current());
Tensor maximum(const Tensor& x, const Tensor& y, Loc loc = Loc::current());
Tensor minimum(const Tensor& x, const Tensor& y, Loc loc = Loc::current());
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b, Loc loc = Loc::current());
Tensor cast(const Tensor& x, DType dtype, Loc loc = Loc::current());

Tensor sum(const Tensor& x, Axes axes = {}, bool keepdims = false, Loc loc = Loc::current());
Tensor mean(const Tensor& x, Axes axes = {}, bool keepdims = false, Loc loc = Loc::current());
Tensor max(const Tensor& x, Axes axes = {}, bool keepdims = false, Loc loc = Loc::current());
Tensor min(const Tensor& x, Axes axes = {}, bool keepdims = false, Loc loc = Loc::current());
Tensor prod(const Tensor& x, Axes axes = {}, bool keepdims = false, Loc loc = Loc::current());
Tensor argmax(const Tensor& x, Axes axes = {}, bool keepdims = false, Loc loc = Loc::current());
Tensor argmin(const Tensor& x, Axes axes = {}, bool keepdims = false, Loc loc = Loc::current());
Tensor var(const Tensor& x, Axes axes = {}, bool keepdims = false, int64_t ddof = 0, Loc loc = Loc::current());
Tensor std(const Tensor& x, Axes axes = {}, bool keepdims = false, int64_t ddof = 0, Loc loc = Loc::current());
Tensor logsumexp(const Tensor& x, Axes axes = {}, bool keepdims = false, Loc loc = Loc::current());

namespace detail {
enum class Reduction { sum, mean, max, min, prod, argmax, logsumexp, argmin };
Tensor reduce_along(Reduction reduction, const Tensor& x, int64_t axis, bool keepdims, Loc loc);
}  // namespace detail
// One axis given as a number, as in argmax(p, 1): the same as {1}, with no Axes to build (a
// braced list still picks the overloads above).
#define KILN_EAGER_ONE_AXIS(name)                                                                 \
  template <std::integral Axis>                                                                   \
    requires(!std::same_as<Axis, bool>)                                                           \
  Tensor name(const Tensor& x, Axis axis, bool keepdims = false, Loc loc = Loc::current()) {      \
    return detail::reduce_along(detail::Reduction::name, x, static_cast<int64_t>(axis), keepdims, loc); \
  }
KILN_EAGER_ONE_AXIS(sum)
KILN_EAGER_ONE_AXIS(mean)
KILN_EAGER_ONE_AXIS(max)
KILN_EAGER_ONE_AXIS(min)
KILN_EAGER_ONE_AXIS(prod)
KILN_EAGER_ONE_AXIS(argmax)
KILN_EAGER_ONE_AXIS(argmin)
KILN_EAGER_ONE_AXIS(logsumexp)
#undef KILN_EAGER_ONE_AXIS
template <std::integral Axis>
  requires(!std::same_as<Axis, bool>)
Tensor var(const Tensor& x, Axis axis, bool keepdims = false, int64_t ddof = 0, Loc loc = Loc::current()) {
  return var(x, Axes{static_cast<int64_t>(axis)}, keepdims, ddof, loc);
}
template <std::integral Axis>
  requires(!std::same_as<Axis, bool>)
Tensor std(const Tensor& x, Axis axis, bool keepdims = false, int64_t ddof = 0, Loc loc = Loc::current()) {
  return std(x, Axes{static_cast<int64_t>(axis)}, keepdims, ddof, loc);
}

Tensor dot(const Tensor& a, const Tensor& b, Loc loc = Loc::current());
Tensor matmul(const Tensor& a, const Tensor& b, Loc loc = Loc::current());

Tensor transpose(const Tensor& x, Loc loc = Loc::current());
Tensor dimshuffle(const Tensor& x, std::vector<int64_t> pattern, Loc loc = Loc::current());
Tensor reshape(const Tensor& x, Shape shape, Loc loc = Loc::current());
Tensor reshape(const Tensor& x, std::initializer_list<int64_t> shape, Loc loc = Loc::current());
Tensor flatten(const Tensor& x, int64_t outdim = 1, Loc loc = Loc::current());
Tensor concatenate(const std::vector<Tensor>& xs, int64_t axis = 0, Loc loc = Loc::current());
Tensor stack(const std::vector<Tensor>& xs, int64_t axis = 0, Loc loc = Loc::current());
// Braced lists of tensors (an empty list picks these too, and is refused as the symbolic one is).
Tensor concatenate(std::initializer_list<Tensor> xs, int64_t axis = 0, Loc loc = Loc::current());
Tensor stack(std::initializer_list<Tensor> xs, int64_t axis = 0, Loc loc = Loc::current());
Tensor tile(const Tensor& x, std::vector<int64_t> reps, Loc loc = Loc::current());
Tensor repeat(const Tensor& x, int64_t repeats, std::optional<int64_t> axis = std::nullopt, Loc loc = Loc::current());
Tensor sort(const Tensor& x, int64_t axis = -1, Loc loc = Loc::current());
Tensor argsort(const Tensor& x, int64_t axis = -1, Loc loc = Loc::current());
Tensor zeros_like(const Tensor& x, Loc loc = Loc::current());
Tensor ones_like(const Tensor& x, Loc loc = Loc::current());
Tensor slice(const Tensor& x, int64_t axis, std::optional<int64_t> start = std::nullopt,
             std::optional<int64_t> stop = std::nullopt, int64_t step = 1, Loc loc = Loc::current());
Tensor take(const Tensor& x, const Tensor& indices, int64_t axis = 0, Loc loc = Loc::current());
Tensor cumsum(const Tensor& x, std::optional<int64_t> axis = std::nullopt, Loc loc = Loc::current());
Tensor one_hot(const Tensor& indices, int64_t n, DType dtype = DType::f32, Loc loc = Loc::current());

Tensor softmax(const Tensor& x, int64_t axis = -1, Loc loc = Loc::current());
Tensor log_softmax(const Tensor& x, int64_t axis = -1, Loc loc = Loc::current());
Tensor categorical_crossentropy(const Tensor& probs, const Tensor& labels, Loc loc = Loc::current());
Tensor binary_crossentropy(const Tensor& output, const Tensor& target, Loc loc = Loc::current());

}  // namespace kiln

#pragma once
#include <concepts>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "kiln/graph.hpp"

namespace kiln {

// An operand of an operator: a Var or a number, remembering the user's source line.
struct Operand {
  Operand(const Var& v, Loc loc = Loc::current()) : var(v), loc(loc) {}  // NOLINT
  Operand(const Shared& v, Loc loc = Loc::current()) : var(v), loc(loc) {}  // NOLINT
  Operand(double v, Loc loc = Loc::current()) : var(v), loc(loc) {}  // NOLINT
  Operand(int v, Loc loc = Loc::current()) : var(v), loc(loc) {}  // NOLINT
  Operand(int64_t v, Loc loc = Loc::current()) : var(v), loc(loc) {}  // NOLINT
  Var var;
  Loc loc;
};

Var operator+(const Operand& a, const Operand& b);
Var operator-(const Operand& a, const Operand& b);
Var operator*(const Operand& a, const Operand& b);
Var operator/(const Operand& a, const Operand& b);
Var operator-(const Operand& a);
Var operator<(const Operand& a, const Operand& b);
Var operator<=(const Operand& a, const Operand& b);
Var operator>(const Operand& a, const Operand& b);
Var operator>=(const Operand& a, const Operand& b);
Var operator==(const Operand& a, const Operand& b);
Var operator!=(const Operand& a, const Operand& b);
// NumPy's remainder (Python's %): the result has the sign of b; an integer % 0 is 0, a float % 0 NaN.
Var operator%(const Operand& a, const Operand& b);
Var mod(const Operand& a, const Operand& b);

// Elementwise (NumPy broadcasting and dtype promotion: docs/ops.md).
Var exp(const Var& x, Loc loc = Loc::current());
Var log(const Var& x, Loc loc = Loc::current());
Var log1p(const Var& x, Loc loc = Loc::current());
Var expm1(const Var& x, Loc loc = Loc::current());
Var sqrt(const Var& x, Loc loc = Loc::current());
Var sqr(const Var& x, Loc loc = Loc::current());
Var tanh(const Var& x, Loc loc = Loc::current());
Var sigmoid(const Var& x, Loc loc = Loc::current());
Var softplus(const Var& x, Loc loc = Loc::current());
Var relu(const Var& x, Loc loc = Loc::current());
Var abs(const Var& x, Loc loc = Loc::current());
Var sign(const Var& x, Loc loc = Loc::current());
Var sin(const Var& x, Loc loc = Loc::current());
Var cos(const Var& x, Loc loc = Loc::current());
Var square(const Var& x, Loc loc = Loc::current());  // x * x, the same op as sqr
// Rounding: integers and bools are kept as they are (and keep their dtype); round sends half-way
// cases to the even neighbour, as NumPy's round. Their gradient is zero.
Var floor(const Var& x, Loc loc = Loc::current());
Var ceil(const Var& x, Loc loc = Loc::current());
Var round(const Var& x, Loc loc = Loc::current());
Var erf(const Var& x, Loc loc = Loc::current());
Var pow(const Var& x, const Var& y, Loc loc = Loc::current());
// minimum(maximum(x, lo), hi), as NumPy's clip; the gradient passes to x where lo <= x <= hi.
Var clip(const Var& x, const Operand& lo, const Operand& hi, Loc loc = Loc::current());
Var maximum(const Var& x, const Var& y, Loc loc = Loc::current());
Var minimum(const Var& x, const Var& y, Loc loc = Loc::current());
Var where(const Var& cond, const Var& a, const Var& b, Loc loc = Loc::current());
Var cast(const Var& x, DType dtype, Loc loc = Loc::current());

// Reductions; empty axes: all of them. Negative axes count from the end.
using Axes = std::vector<int64_t>;
Var sum(const Var& x, Axes axes = {}, bool keepdims = false, Loc loc = Loc::current());
Var mean(const Var& x, Axes axes = {}, bool keepdims = false, Loc loc = Loc::current());
Var max(const Var& x, Axes axes = {}, bool keepdims = false, Loc loc = Loc::current());
Var min(const Var& x, Axes axes = {}, bool keepdims = false, Loc loc = Loc::current());
Var prod(const Var& x, Axes axes = {}, bool keepdims = false, Loc loc = Loc::current());
Var argmax(const Var& x, Axes axes = {}, bool keepdims = false, Loc loc = Loc::current());
// The index (i64) of the first minimum (or first NaN) along one axis, or over all of them flattened.
Var argmin(const Var& x, Axes axes = {}, bool keepdims = false, Loc loc = Loc::current());
// Variance and standard deviation as NumPy's: the squared deviations from the mean summed and
// divided by max(N - ddof, 0), N the number of elements reduced (NaN for no elements); integer
// and bool inputs give f64.
Var var(const Var& x, Axes axes = {}, bool keepdims = false, int64_t ddof = 0, Loc loc = Loc::current());
Var std(const Var& x, Axes axes = {}, bool keepdims = false, int64_t ddof = 0, Loc loc = Loc::current());
// log(sum(exp(x), axes)) without overflow: the maximum over the axes is taken out first.
Var logsumexp(const Var& x, Axes axes = {}, bool keepdims = false, Loc loc = Loc::current());
// One axis given as a number, as in sum(x, 1) or argmax(p, -1): the same as {1}. A braced list
// still picks the overloads above, so sum(x, {}) reduces every axis.
#define KILN_ONE_AXIS(name)                                                                  \
  template <std::integral Axis>                                                              \
    requires(!std::same_as<Axis, bool>)                                                      \
  Var name(const Var& x, Axis axis, bool keepdims = false, Loc loc = Loc::current()) {       \
    return name(x, Axes{static_cast<int64_t>(axis)}, keepdims, loc);                         \
  }
KILN_ONE_AXIS(sum)
KILN_ONE_AXIS(mean)
KILN_ONE_AXIS(max)
KILN_ONE_AXIS(min)
KILN_ONE_AXIS(prod)
KILN_ONE_AXIS(argmax)
KILN_ONE_AXIS(argmin)
KILN_ONE_AXIS(logsumexp)
#undef KILN_ONE_AXIS
template <std::integral Axis>
  requires(!std::same_as<Axis, bool>)
Var var(const Var& x, Axis axis, bool keepdims = false, int64_t ddof = 0, Loc loc = Loc::current()) {
  return var(x, Axes{static_cast<int64_t>(axis)}, keepdims, ddof, loc);
}
template <std::integral Axis>
  requires(!std::same_as<Axis, bool>)
Var std(const Var& x, Axis axis, bool keepdims = false, int64_t ddof = 0, Loc loc = Loc::current()) {
  return std(x, Axes{static_cast<int64_t>(axis)}, keepdims, ddof, loc);
}

// Running sum along an axis (negative counts from the end; none: over the flattened values), as
// NumPy's cumsum: integers and bools sum as i64. Its gradient is the reverse running sum.
Var cumsum(const Var& x, std::optional<int64_t> axis = std::nullopt, Loc loc = Loc::current());

// Matrix products: dot has NumPy dot semantics up to 2-D; matmul NumPy matmul semantics.
Var dot(const Var& a, const Var& b, Loc loc = Loc::current());
Var matmul(const Var& a, const Var& b, Loc loc = Loc::current());

// Shape and movement (views where possible).
Var transpose(const Var& x, Loc loc = Loc::current());
Var dimshuffle(const Var& x, std::vector<int64_t> pattern, Loc loc = Loc::current());
Var reshape(const Var& x, Shape shape, Loc loc = Loc::current());
Var reshape(const Var& x, std::initializer_list<int64_t> shape, Loc loc = Loc::current());  // reshape(x, {6})
Var reshape(const Var& x, const Var& shape, std::optional<int64_t> ndim = std::nullopt, Loc loc = Loc::current());
Var flatten(const Var& x, int64_t outdim = 1, Loc loc = Loc::current());
Var shape_of(const Var& x, Loc loc = Loc::current());  // 1-D i64 vector of x's shape
Var concatenate(const std::vector<Var>& xs, int64_t axis = 0, Loc loc = Loc::current());
Var stack(const std::vector<Var>& xs, int64_t axis = 0, Loc loc = Loc::current());
// A number given to arange: integers (int, long, ...) and floats are told apart, as NumPy does.
struct RangeValue {
  template <class N>
    requires(std::is_arithmetic_v<N> && !std::is_same_v<N, bool>)
  RangeValue(N v)  // NOLINT
      : value(static_cast<double>(v)), integer(integer_of(v)), is_integer(std::is_integral_v<N>), fits_i64(fits(v)) {}
  double value;
  int64_t integer;  // 0 for a float (which need not fit)
  bool is_integer;
  bool fits_i64;  // false for an unsigned integer above INT64_MAX (kiln has no u64): arange refuses it

 private:
  template <class N> static int64_t integer_of(N v) {
    if constexpr (std::is_integral_v<N>) return static_cast<int64_t>(v);
    else return 0;
  }
  template <class N> static bool fits(N v) {
    if constexpr (std::is_integral_v<N> && std::is_unsigned_v<N>) return v <= static_cast<std::make_unsigned_t<int64_t>>(INT64_MAX);
    else return true;
  }
};
// NumPy's arange: the constant vector start, start + step, ... up to stop (excluded); i64 when
// every argument is an integer, f64 otherwise. step may be negative, never zero.
Var arange(RangeValue stop, Loc loc = Loc::current());
Var arange(RangeValue start, RangeValue stop, RangeValue step = 1, Loc loc = Loc::current());
// A new last axis of n classes: 1 at each index, 0 elsewhere, as NumPy's eye(n, dtype)[indices]
// (negative indices count from the end; indices out of range raise ShapeError when it runs).
Var one_hot(const Var& indices, int64_t n, DType dtype = DType::f32, Loc loc = Loc::current());
// NumPy's tile: x repeated reps[d] times along each axis (reps shorter than x's ndim is padded
// with 1 on the left; longer, x gains axes of 1 on the left).
Var tile(const Var& x, std::vector<int64_t> reps, Loc loc = Loc::current());
// NumPy's repeat with one count: each element `repeats` times in a row along axis (none: over the
// flattened values).
Var repeat(const Var& x, int64_t repeats, std::optional<int64_t> axis = std::nullopt, Loc loc = Loc::current());
// NumPy's pad in constant mode: widths[d] = {before, after} values of `value` added on axis d
// (one pair for every axis, or a single pair used for all).
Var pad(const Var& x, std::vector<std::pair<int64_t, int64_t>> widths, double value = 0, Loc loc = Loc::current());
// Sorted along axis, ascending, NaN last (NumPy's sort with kind="stable"); argsort gives the i64
// indices that sort. The gradient of sort sends each value's gradient back through the permutation.
Var sort(const Var& x, int64_t axis = -1, Loc loc = Loc::current());
Var argsort(const Var& x, int64_t axis = -1, Loc loc = Loc::current());
Var zeros_like(const Var& x, Loc loc = Loc::current());
Var ones_like(const Var& x, Loc loc = Loc::current());

// Indexing.
// A slice bound: a number, std::nullopt (NumPy's default for that end), or a 0-d integer Var
// whose value is known when the function runs.
struct SliceBound {
  SliceBound(std::nullopt_t) {}  // NOLINT
  template <std::integral I>
    requires(!std::same_as<I, bool>)
  SliceBound(I value) : number(static_cast<int64_t>(value)) {}  // NOLINT
  SliceBound(std::optional<int64_t> value) : number(value) {}  // NOLINT
  SliceBound(const Var& value) : symbolic(value) {}  // NOLINT
  std::optional<int64_t> number;
  Var symbolic;
};
// x[start:stop:step] along one axis, NumPy's rules (negative bounds count from the end, bounds
// clamped); with a symbolic bound (X[i * bs:(i + 1) * bs]), the slice's size is found when the
// function runs. A view; its gradient flows back to x.
Var slice(const Var& x, int64_t axis, SliceBound start = std::nullopt, SliceBound stop = std::nullopt, SliceBound step = 1,
          Loc loc = Loc::current());
Var take(const Var& x, const Var& indices, int64_t axis = 0, Loc loc = Loc::current());
// sub must come from indexing (x[i], slice, take): a copy of x with that part set / incremented.
Var set_subtensor(const Var& sub, const Var& value, Loc loc = Loc::current());
Var inc_subtensor(const Var& sub, const Var& value, Loc loc = Loc::current());

// Neural networks (numerically stable).
Var softmax(const Var& x, int64_t axis = -1, Loc loc = Loc::current());
Var log_softmax(const Var& x, int64_t axis = -1, Loc loc = Loc::current());
// Per row: -log(probs[row, label]) for integer labels, or -sum(targets * log(probs)) for a
// float target distribution of the same shape as probs.
Var categorical_crossentropy(const Var& probs, const Var& labels, Loc loc = Loc::current());
// Elementwise -(target * log(output) + (1 - target) * log(1 - output)), as Theano's. With
// output = sigmoid(z) its value and gradient are computed stably (from z) in every mode.
Var binary_crossentropy(const Var& output, const Var& target, Loc loc = Loc::current());

// Control flow: lazy, only the branch cond selects runs (nodes only the other branch needs are
// jumped over). cond is a 0-d value; the branches may differ in shape.
Var ifelse(const Var& cond, const Var& then_value, const Var& else_value, Loc loc = Loc::current());
std::vector<Var> ifelse(const Var& cond, const std::vector<Var>& then_values, const std::vector<Var>& else_values,
                        Loc loc = Loc::current());

}  // namespace kiln

#pragma once
#include <cmath>
#include <type_traits>

#include "ops/scalar_math.hpp"

namespace kiln {

// Integer arithmetic wraps around as NumPy's does (two's complement), done on the unsigned type:
// signed overflow is undefined behaviour in C++. Floats are computed as they are.
template <class T> T wrapping_add(T x, T y) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>)
    return static_cast<T>(static_cast<std::make_unsigned_t<T>>(x) + static_cast<std::make_unsigned_t<T>>(y));
  else
    return static_cast<T>(x + y);
}
template <class T> T wrapping_sub(T x, T y) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>)
    return static_cast<T>(static_cast<std::make_unsigned_t<T>>(x) - static_cast<std::make_unsigned_t<T>>(y));
  else
    return static_cast<T>(x - y);
}
template <class T> T wrapping_neg(T x) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>)
    return wrapping_sub(T(0), x);
  else
    return static_cast<T>(-x);  // -0.0 for 0.0, as IEEE negation
}
template <class T> T wrapping_mul(T x, T y) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>)
    return static_cast<T>(static_cast<std::make_unsigned_t<T>>(x) * static_cast<std::make_unsigned_t<T>>(y));
  else
    return static_cast<T>(x * y);
}

// The closed set of scalar operations every elementwise computation applies (tinygrad's few
// primitives): Elemwise nodes apply one, fused Composite nodes a short program of them.
enum class ScalarOp {
  neg, exp, log, log1p, expm1, sqrt, sqr, tanh, sigmoid, softplus, relu, abs, sign, sin, cos, floor, ceil, round,
  erf, cast,
  add, sub, mul, div, pow, mod, maximum, minimum, lt, le, gt, ge, eq, ne, fill, where
};
// Unary ops come before cast and binary ones from add (scalar_op_arity relies on the order).
const char* scalar_op_name(ScalarOp op);
int scalar_op_arity(ScalarOp op);
bool is_variadic(ScalarOp op);  // add, mul

// NumPy's remainder (Python's %): the result has the divisor's sign. Floats as NumPy's divmod
// (fmod, then moved into the divisor's sign; a zero result takes the divisor's sign; x % 0 is
// NaN); integers: x % 0 is 0 (NumPy's, with a warning), and x % -1 is 0 (no overflow at the
// lowest value).
template <class T> T remainder_of(T x, T y) {
  if constexpr (std::is_floating_point_v<T>) {
    T m = std::fmod(x, y);
    if (y == T(0)) return m;
    if (m != T(0)) {
      if ((y < T(0)) != (m < T(0))) m += y;
    } else {
      m = std::copysign(T(0), y);
    }
    return m;
  } else {
    if (y == T(0) || y == T(-1)) return T(0);
    T m = static_cast<T>(x % y);
    if (m != T(0) && ((m < T(0)) != (y < T(0)))) m = static_cast<T>(m + y);
    return m;
  }
}

// The scalar function of op on T, handed to body(f, costly) (costly: transcendental, worth
// threads sooner). Returns false when op has no function for T. One table serves the tensor
// kernels and the fused block interpreter.
template <class T, class Body> bool visit_unary(ScalarOp op, Body&& body) {
  if constexpr (!std::is_floating_point_v<T>) {  // rounding an integer or a bool leaves it as it is
    if (op == ScalarOp::floor || op == ScalarOp::ceil || op == ScalarOp::round) {
      body([](T x) { return x; }, false);
      return true;
    }
  }
  if constexpr (std::is_same_v<T, bool>) {  // NumPy: abs of a bool is itself (and so is max(x, 0))
    if (op == ScalarOp::abs || op == ScalarOp::relu) {
      body([](bool x) { return x; }, false);
      return true;
    }
  } else {
    switch (op) {
      case ScalarOp::neg: body([](T x) { return wrapping_neg(x); }, false); return true;
      case ScalarOp::sqr: body([](T x) { return wrapping_mul(x, x); }, false); return true;
      case ScalarOp::relu: body([](T x) { return x > T(0) || x != x ? x : T(0); }, false); return true;  // max(x, 0): NaN stays
      case ScalarOp::abs:  // floats: the sign bit cleared, as fabs (-0 and -NaN lose their sign)
        if constexpr (std::is_floating_point_v<T>) body([](T x) { return std::fabs(x); }, false);
        else body([](T x) { return x < T(0) ? wrapping_neg(x) : x; }, false);
        return true;
      case ScalarOp::sign: body([](T x) { return x != x ? x : static_cast<T>((T(0) < x) - (x < T(0))); }, false); return true;  // NaN as NumPy
      default: break;
    }
  }
  if constexpr (std::is_floating_point_v<T>) {
    switch (op) {
      case ScalarOp::exp: body([](T x) { return fastmath::exp(x); }, true); return true;
      case ScalarOp::log: body([](T x) { return std::log(x); }, true); return true;
      case ScalarOp::log1p: body([](T x) { return std::log1p(x); }, true); return true;
      case ScalarOp::expm1: body([](T x) { return std::expm1(x); }, true); return true;
      case ScalarOp::sqrt: body([](T x) { return std::sqrt(x); }, false); return true;
      case ScalarOp::tanh: body([](T x) { return fastmath::tanh(x); }, true); return true;
      case ScalarOp::sigmoid: body([](T x) { return fastmath::sigmoid(x); }, true); return true;
      case ScalarOp::softplus: body([](T x) { return fastmath::softplus(x); }, true); return true;
      case ScalarOp::sin: body([](T x) { return std::sin(x); }, true); return true;
      case ScalarOp::cos: body([](T x) { return std::cos(x); }, true); return true;
      case ScalarOp::floor: body([](T x) { return std::floor(x); }, false); return true;
      case ScalarOp::ceil: body([](T x) { return std::ceil(x); }, false); return true;
      // Half-way cases to the even neighbour, as NumPy's round (the default rounding mode).
      case ScalarOp::round: body([](T x) { return std::nearbyint(x); }, false); return true;
      case ScalarOp::erf: body([](T x) { return std::erf(x); }, true); return true;
      default: break;
    }
  }
  return false;
}

// Binary functions: arithmetic gives T, comparisons give bool.
template <class T, class Body> bool visit_binary(ScalarOp op, Body&& body) {
  if constexpr (std::is_same_v<T, bool>) {
    switch (op) {
      case ScalarOp::eq: body([](bool x, bool y) { return x == y; }, false); return true;
      case ScalarOp::ne: body([](bool x, bool y) { return x != y; }, false); return true;
      case ScalarOp::maximum: body([](bool x, bool y) { return x || y; }, false); return true;
      case ScalarOp::minimum: body([](bool x, bool y) { return x && y; }, false); return true;
      case ScalarOp::lt: body([](bool x, bool y) { return !x && y; }, false); return true;
      case ScalarOp::le: body([](bool x, bool y) { return !x || y; }, false); return true;
      case ScalarOp::gt: body([](bool x, bool y) { return x && !y; }, false); return true;
      case ScalarOp::ge: body([](bool x, bool y) { return x || !y; }, false); return true;
      default: return false;
    }
  } else {
    switch (op) {
      case ScalarOp::add: body([](T x, T y) { return wrapping_add(x, y); }, false); return true;
      case ScalarOp::sub: body([](T x, T y) { return wrapping_sub(x, y); }, false); return true;
      case ScalarOp::mul: body([](T x, T y) { return wrapping_mul(x, y); }, false); return true;
      case ScalarOp::maximum: body([](T x, T y) { return x != x ? x : (x > y ? x : y); }, false); return true;
      case ScalarOp::minimum: body([](T x, T y) { return x != x ? x : (x < y ? x : y); }, false); return true;
      case ScalarOp::lt: body([](T x, T y) { return x < y; }, false); return true;
      case ScalarOp::le: body([](T x, T y) { return x <= y; }, false); return true;
      case ScalarOp::gt: body([](T x, T y) { return x > y; }, false); return true;
      case ScalarOp::ge: body([](T x, T y) { return x >= y; }, false); return true;
      case ScalarOp::eq: body([](T x, T y) { return x == y; }, false); return true;
      case ScalarOp::ne: body([](T x, T y) { return x != y; }, false); return true;
      case ScalarOp::mod: body([](T x, T y) { return remainder_of(x, y); }, false); return true;
      default: break;
    }
    if constexpr (std::is_floating_point_v<T>) {
      if (op == ScalarOp::div) { body([](T x, T y) { return x / y; }, false); return true; }
      if (op == ScalarOp::pow) { body([](T x, T y) { return std::pow(x, y); }, true); return true; }
    }
    return false;
  }
}

// Whether op has a kernel for inputs of dtype T (cast, fill and where take every dtype).
template <class T> bool has_kernel(ScalarOp op) {
  if (op == ScalarOp::cast || op == ScalarOp::fill || op == ScalarOp::where) return true;
  auto none = [](auto, bool) {};
  return scalar_op_arity(op) == 1 ? visit_unary<T>(op, none) : visit_binary<T>(op, none);
}

}  // namespace kiln

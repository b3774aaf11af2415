#pragma once
#include <cmath>
#include <type_traits>

#include "ops/scalar_math.hpp"

namespace kiln {

// The closed set of scalar operations every elementwise computation applies (tinygrad's few
// primitives): Elemwise nodes apply one, fused Composite nodes a short program of them.
enum class ScalarOp {
  neg, exp, log, log1p, expm1, sqrt, sqr, tanh, sigmoid, softplus, relu, abs, sign, sin, cos, cast,
  add, sub, mul, div, pow, maximum, minimum, lt, le, gt, ge, eq, ne, fill, where
};
const char* scalar_op_name(ScalarOp op);
int scalar_op_arity(ScalarOp op);
bool is_variadic(ScalarOp op);  // add, mul

// The scalar function of op on T, handed to body(f, costly) (costly: transcendental, worth
// threads sooner). Returns false when op has no function for T. One table serves the tensor
// kernels and the fused block interpreter.
template <class T, class Body> bool visit_unary(ScalarOp op, Body&& body) {
  if constexpr (std::is_same_v<T, bool>) {  // NumPy: abs of a bool is itself (and so is max(x, 0))
    if (op == ScalarOp::abs || op == ScalarOp::relu) {
      body([](bool x) { return x; }, false);
      return true;
    }
  } else {
    switch (op) {
      case ScalarOp::neg: body([](T x) { return static_cast<T>(-x); }, false); return true;
      case ScalarOp::sqr: body([](T x) { return static_cast<T>(x * x); }, false); return true;
      case ScalarOp::relu: body([](T x) { return x > T(0) ? x : T(0); }, false); return true;
      case ScalarOp::abs: body([](T x) { return x < T(0) ? static_cast<T>(-x) : x; }, false); return true;
      case ScalarOp::sign: body([](T x) { return static_cast<T>((T(0) < x) - (x < T(0))); }, false); return true;
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
      case ScalarOp::add: body([](T x, T y) { return static_cast<T>(x + y); }, false); return true;
      case ScalarOp::sub: body([](T x, T y) { return static_cast<T>(x - y); }, false); return true;
      case ScalarOp::mul: body([](T x, T y) { return static_cast<T>(x * y); }, false); return true;
      case ScalarOp::maximum: body([](T x, T y) { return x != x ? x : (x > y ? x : y); }, false); return true;
      case ScalarOp::minimum: body([](T x, T y) { return x != x ? x : (x < y ? x : y); }, false); return true;
      case ScalarOp::lt: body([](T x, T y) { return x < y; }, false); return true;
      case ScalarOp::le: body([](T x, T y) { return x <= y; }, false); return true;
      case ScalarOp::gt: body([](T x, T y) { return x > y; }, false); return true;
      case ScalarOp::ge: body([](T x, T y) { return x >= y; }, false); return true;
      case ScalarOp::eq: body([](T x, T y) { return x == y; }, false); return true;
      case ScalarOp::ne: body([](T x, T y) { return x != y; }, false); return true;
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

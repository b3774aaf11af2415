#pragma once
#include <cstdint>
#include <type_traits>

#include "kiln/tensor.hpp"

namespace kiln {

// Calls fn(T{}) with T the C++ type of dtype: one switch instead of one per kernel.
template <class Fn> decltype(auto) dispatch_dtype(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::f32: return fn(float{});
    case DType::f64: return fn(double{});
    case DType::i32: return fn(int32_t{});
    case DType::i64: return fn(int64_t{});
    case DType::b8: return fn(bool{});
  }
  throw Error("kiln: unknown dtype");
}

template <class Fn> decltype(auto) dispatch_float(DType dtype, const char* op, Fn&& fn) {
  switch (dtype) {
    case DType::f32: return fn(float{});
    case DType::f64: return fn(double{});
    default: throw TypeError(std::string(op) + ": needs a float tensor (f32 or f64), got " + dtype_name(dtype));
  }
}

}  // namespace kiln

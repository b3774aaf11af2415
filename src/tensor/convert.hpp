#pragma once
#include <string>

#include "kiln/tensor.hpp"

namespace kiln {

// The input-conversion rule (API.md): a value is converted only when no value changes:
// b8 -> any number; i32 -> i64/f64; f32 -> f64; i32/i64 -> f32, i64 -> f64/i32 when every value is
// exact. Anything else raises TypeError with `what` naming the value.
Tensor convert_lossless(const Tensor& value, DType target, const std::string& what);

}  // namespace kiln

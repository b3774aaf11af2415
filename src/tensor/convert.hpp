#pragma once
#include <string>

#include "kiln/tensor.hpp"

namespace kiln {

// The input-conversion rule, decided by the dtypes alone (as Theano does): b8 -> any; i32 -> i64,
// f64; f32 -> f64. Anything else raises TypeError with `what` naming the value.
bool converts_losslessly(DType from, DType to);
Tensor convert_lossless(const Tensor& value, DType target, const std::string& what);

}  // namespace kiln

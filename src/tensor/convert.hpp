#pragma once
#include <string>

#include "kiln/tensor.hpp"

namespace kiln {

// The conversions that lose nothing whatever the values: b8 -> any; i32 -> i64, f64; f32 -> f64.
bool converts_losslessly(DType from, DType to);
// value in dtype target: converted when converts_losslessly says so, or from i32 to f32 when every
// value is exact in f32 (API.md's input rule); anything else raises TypeError with `what` naming
// the value.
Tensor convert_lossless(const Tensor& value, DType target, const std::string& what);

}  // namespace kiln

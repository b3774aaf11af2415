#pragma once
#include <cstdint>

#include "kiln/tensor.hpp"

namespace kiln {

// Calls run(x_offset, out_offset, n, x_step, out_step) for every 1-D run along `axis`: x_offset
// and x_step read x through its strides; out_offset and out_step address a contiguous tensor of
// x's shape. Runs come in the row-major order of the other axes.
template <class F> void for_each_run_along(const Tensor& x, int64_t axis, F run) {
  const int64_t nd = x.ndim(), n = x.shape()[axis];
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= x.shape()[d];
  for (int64_t d = axis + 1; d < nd; ++d) inner *= x.shape()[d];
  if (x.numel() == 0) return;
  for (int64_t r = 0; r < outer * inner; ++r) {
    int64_t rest = r, offset = 0;
    for (int64_t d = nd - 1; d >= 0; --d) {
      if (d == axis) continue;
      const int64_t size = x.shape()[d];
      offset += (rest % size) * x.strides()[d];
      rest /= size;
    }
    run(offset, (r / inner) * n * inner + r % inner, n, x.strides()[axis], inner);
  }
}

}  // namespace kiln

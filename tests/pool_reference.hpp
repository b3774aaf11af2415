#pragma once
// A plain reference for max_pool2d and avg_pool2d and their gradients, written from the rules in
// include/kiln/conv.hpp (PyTorch's), one window element at a time in double: for pool_test and the
// oracle sweep.
#include <cmath>
#include <cstdint>
#include <vector>

#include "kiln/kiln.hpp"

namespace kiln::test {

inline int64_t reference_pooled_size(int64_t size, int64_t window, int64_t stride, int64_t pad, bool ignore_border) {
  if (ignore_border) return (size + 2 * pad - window) / stride + 1;
  int64_t out = (size + 2 * pad - window + stride - 1) / stride + 1;
  if ((out - 1) * stride >= size + pad) --out;  // the last window starts inside the input or its left padding
  return out;
}

struct PoolReference {
  Shape shape;                      // the output's
  std::vector<double> values;       // row-major
  std::vector<double> input_grad;   // the input's gradient for the output gradient given (if any)
};

// x: the N x C x H x W input's values, row-major. output_grad: row-major in the output's shape, or
// empty for no gradient.
inline PoolReference reference_pool(bool max, const std::vector<double>& x, const Shape& shape, const Pool2dOptions& o,
                                    const std::vector<double>& output_grad = {}) {
  const int64_t N = shape[0], C = shape[1], H = shape[2], W = shape[3];
  const auto stride = o.stride.value_or(o.window);
  const int64_t OH = reference_pooled_size(H, o.window[0], stride[0], o.padding[0], o.ignore_border);
  const int64_t OW = reference_pooled_size(W, o.window[1], stride[1], o.padding[1], o.ignore_border);
  PoolReference r{{N, C, OH, OW}, {}, std::vector<double>(x.size(), 0.0)};
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          std::vector<int64_t> inside;  // the input elements of the window, row-major
          int64_t within_padded = 0;    // the window's elements inside the padded input
          for (int64_t i = 0; i < o.window[0]; ++i)
            for (int64_t j = 0; j < o.window[1]; ++j) {
              const int64_t h = oh * stride[0] - o.padding[0] + i, w = ow * stride[1] - o.padding[1] + j;
              if (h >= H + o.padding[0] || w >= W + o.padding[1]) continue;  // beyond the padded input
              ++within_padded;
              if (h >= 0 && h < H && w >= 0 && w < W) inside.push_back(((n * C + c) * H + h) * W + w);
            }
          const size_t out_index = r.values.size();
          if (max) {
            // Padding is -infinity; the first maximum wins, and the first NaN beats everything.
            int64_t best = -1;
            for (int64_t k : inside)
              if (best < 0 || (std::isnan(x[k]) && !std::isnan(x[best])) || x[k] > x[best]) best = k;
            r.values.push_back(x[best]);
            if (!output_grad.empty()) r.input_grad[best] += output_grad[out_index];
          } else {
            double sum = 0;
            for (int64_t k : inside) sum += x[k];
            const double divisor = static_cast<double>(o.count_include_pad ? within_padded : static_cast<int64_t>(inside.size()));
            r.values.push_back(sum / divisor);
            if (!output_grad.empty())
              for (int64_t k : inside) r.input_grad[k] += output_grad[out_index] / divisor;
          }
        }
  return r;
}

// `shape`'s elements as distinct values in [-2, 2] in a shuffled order: window maxima are then
// unique and far apart, so finite differences do not move them.
inline Tensor distinct_values(const Shape& shape, uint64_t seed) {
  const int64_t n = shape_numel(shape);
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = -2.0 + 4.0 * static_cast<double>(i) / static_cast<double>(std::max<int64_t>(n - 1, 1));
  uint64_t s = seed * 6364136223846793005ULL + 1442695040888963407ULL;
  for (int64_t i = n - 1; i > 0; --i) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    std::swap(v[static_cast<size_t>(i)], v[static_cast<size_t>((s >> 33) % static_cast<uint64_t>(i + 1))]);
  }
  return Tensor::from(v, shape);
}

}  // namespace kiln::test

#pragma once
// The convolution written as its definition, for tests that check conv2d against it.
#include <array>
#include <vector>

#include "kiln/tensor.hpp"

namespace kiln::test {

// The convolution as six nested loops over explicit top/left padding, in f64.
inline std::vector<double> direct_conv(const Tensor& x, const Tensor& w, std::array<int64_t, 2> stride, std::array<int64_t, 2> dilation,
                                int64_t groups, int64_t pad_top, int64_t pad_left, int64_t out_h, int64_t out_w) {
  const auto xv = x.to_vector<double>(), wv = w.to_vector<double>();
  const int64_t N = x.shape()[0], C = x.shape()[1], H = x.shape()[2], W = x.shape()[3];
  const int64_t O = w.shape()[0], Cg = w.shape()[1], KH = w.shape()[2], KW = w.shape()[3], Og = O / groups;
  std::vector<double> y(static_cast<size_t>(N * O * out_h * out_w), 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t oy = 0; oy < out_h; ++oy)
        for (int64_t ox = 0; ox < out_w; ++ox) {
          double s = 0;
          const int64_t g = o / Og;
          for (int64_t c = 0; c < Cg; ++c)
            for (int64_t i = 0; i < KH; ++i)
              for (int64_t j = 0; j < KW; ++j) {
                const int64_t iy = oy * stride[0] + i * dilation[0] - pad_top, ix = ox * stride[1] + j * dilation[1] - pad_left;
                if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
                s += xv[((n * C + g * Cg + c) * H + iy) * W + ix] * wv[((o * Cg + c) * KH + i) * KW + j];
              }
          y[((n * O + o) * out_h + oy) * out_w + ox] = s;
        }
  return y;
}

}  // namespace kiln::test

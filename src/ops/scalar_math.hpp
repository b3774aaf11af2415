#pragma once
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

namespace kiln::fastmath {

// Branch-free single-precision exp (Cephes range reduction + polynomial, ~1 ulp) that the
// compiler can vectorize; libm's expf is a scalar call. The power of two is applied as two
// factors so that exp reaches FLT_MAX (2^128 alone is not a float); results below FLT_MIN flush
// to zero.
inline float exp_f32(float x) {
  constexpr float kLogMax = 88.72283905f;   // log(FLT_MAX)
  constexpr float kLogMin = -87.33654475f;  // log(FLT_MIN)
  const float clamped = std::min(std::max(x, kLogMin), kLogMax);
  // Round to nearest by adding and removing 1.5 * 2^23 (|v| < 2^22 here): std::floor would keep
  // GCC from vectorizing the loop under the default trapping-math rules.
  const float n = (clamped * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = clamped - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int32_t power = static_cast<int32_t>(n);  // in [-126, 128]
  const int32_t half = power >> 1;
  const float scale_low = std::bit_cast<float>((half + 127) << 23);
  const float scale_high = std::bit_cast<float>((power - half + 127) << 23);
  float y = (p * scale_low) * scale_high;
  y = x > kLogMax ? std::numeric_limits<float>::infinity() : y;
  y = x < kLogMin ? 0.0f : y;
  return x != x ? x : y;
}

inline float tanh_f32(float x) {
  const float ax = std::fabs(x);
  const float z = x * x;
  const float small = ((((-5.70498872745e-3f * z + 2.06390887954e-2f) * z - 5.37397155531e-2f) * z +
                        1.33314422036e-1f) * z - 3.33332819422e-1f) * z * x + x;
  const float e = exp_f32(2.0f * std::min(ax, 20.0f));
  const float magnitude = 1.0f - 2.0f / (e + 1.0f);
  const float big = x < 0.0f ? -magnitude : magnitude;
  return ax < 0.625f ? small : big;
}

inline float sigmoid_f32(float x) { return 1.0f / (1.0f + exp_f32(-x)); }

template <class T> T exp(T x) {
  if constexpr (std::is_same_v<T, float>) return exp_f32(x); else return std::exp(x);
}
template <class T> T tanh(T x) {
  if constexpr (std::is_same_v<T, float>) return tanh_f32(x); else return std::tanh(x);
}
template <class T> T sigmoid(T x) {
  if constexpr (std::is_same_v<T, float>) return sigmoid_f32(x); else return T(1) / (T(1) + std::exp(-x));
}
// log(1 + exp(x)) without overflow and without losing small values.
template <class T> T softplus(T x) { return std::max(x, T(0)) + std::log1p(std::exp(-std::fabs(x))); }

}  // namespace kiln::fastmath

#pragma once
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

namespace kiln::fastmath {

// exp of v in [log(FLT_MIN), log(FLT_MAX)], not NaN: Cephes range reduction and polynomial (~1
// ulp), with fused multiply-adds, which the AVX2 and AVX-512 copies of a loop run as single
// instructions (ops/composite_jit emits the same operations, so both give the same bits). Branch
// free, so the compiler vectorizes it; libm's expf is a scalar call. The power of two is applied
// as two factors so that exp reaches FLT_MAX (2^128 alone is not a float).
inline float exp_f32_in_range(float v) {
  // Round to nearest by adding and removing 1.5 * 2^23 (|v log2 e| < 2^22 here): std::floor would
  // keep GCC from vectorizing the loop under the default trapping-math rules.
  const float n = std::fma(v, 1.44269504088896341f, 12582912.0f) - 12582912.0f;
  float r = std::fma(n, -0.693359375f, v);  // n * 0.693359375 is exact: as v - n * 0.693359375
  r = std::fma(n, 2.12194440e-4f, r);
  float p = 1.9875691500e-4f;
  p = std::fma(p, r, 1.3981999507e-3f);
  p = std::fma(p, r, 8.3334519073e-3f);
  p = std::fma(p, r, 4.1665795894e-2f);
  p = std::fma(p, r, 1.6666665459e-1f);
  p = std::fma(p, r, 5.0000001201e-1f);
  p = std::fma(p * r, r, r) + 1.0f;
  const int32_t power = static_cast<int32_t>(n);  // in [-126, 128]
  const int32_t half = power >> 1;
  const float scale_low = std::bit_cast<float>((half + 127) << 23);
  const float scale_high = std::bit_cast<float>((power - half + 127) << 23);
  return (p * scale_low) * scale_high;
}

// Single-precision exp for every x; results below FLT_MIN flush to zero.
inline float exp_f32(float x) {
  constexpr float kLogMax = 88.72283905f;   // log(FLT_MAX)
  constexpr float kLogMin = -87.33654475f;  // log(FLT_MIN)
  const float above_min = x > kLogMin ? x : kLogMin;  // x86's max and min: NaN gives kLogMin
  float y = exp_f32_in_range(above_min < kLogMax ? above_min : kLogMax);
  y = x > kLogMax ? std::numeric_limits<float>::infinity() : y;
  y = x < kLogMin ? 0.0f : y;
  return x != x ? x : y;
}

// tanh: an odd polynomial below |x| = 0.625, 1 - 2 / (exp(2|x|) + 1) with x's sign above (|x|
// held at 20, where tanh is 1 in single precision, so exp stays in range).
inline float tanh_f32(float x) {
  const float ax = std::fabs(x);
  const float z = x * x;
  float s = std::fma(-5.70498872745e-3f, z, 2.06390887954e-2f);
  s = std::fma(s, z, -5.37397155531e-2f);
  s = std::fma(s, z, 1.33314422036e-1f);
  s = std::fma(s, z, -3.33332819422e-1f);
  const float small = std::fma(s * z, x, x);
  const float held = ax < 20.0f ? ax : 20.0f;  // NaN: 20 (x86's min), NaN is returned below
  const float e = exp_f32_in_range(2.0f * held);
  const float magnitude = 1.0f - 2.0f / (e + 1.0f);
  const float big = x < 0.0f ? -magnitude : magnitude;
  const float y = ax < 0.625f ? small : big;
  return !(ax > 0.0f) ? x : y;  // NaN, and -0 (the polynomial gives +0 there)
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

#pragma once
// Note [8-bit moments]'s arithmetic, defined once for the CPU kernel (adamw_q8.cpp) and its CUDA
// twin (adamw_q8.cu). Both are built without FMA contraction and IEEE division and square root,
// so they compute the same bits from the same state. Everything here is branch-free, so that
// the CPU loops around it vectorise.
#include <cstdint>
#include <cstring>

#include "kernels/adamw.h"
#include "kernels/adamw_q8.h"

#if defined(__CUDACC__)
#define GB_Q8_INLINE __host__ __device__ __forceinline__
#else
#define GB_Q8_INLINE inline
#endif

namespace gradbox::kernels::q8 {

GB_Q8_INLINE uint32_t bits_of(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
#endif
}

GB_Q8_INLINE float float_of(uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(b);
#else
  float x;
  std::memcpy(&x, &b, sizeof x);
  return x;
#endif
}

GB_Q8_INLINE int levels(Q8Sign sign) { return sign == Q8Sign::signed_values ? 127 : 255; }

// A magnitude's bits count toward a block's range when non-zero and finite.
GB_Q8_INLINE bool counted(uint32_t magnitude_bits) { return magnitude_bits > 0 && magnitude_bits < 0x7f800000u; }

// log2 of a positive finite float (subnormals included): the exponent, and the mantissa folded
// into [sqrt(1/2), sqrt(2)) by the series of atanh, t = (m - 1) / (m + 1), |t| < 0.172, whose
// fifth term leaves ~1e-9.
GB_Q8_INLINE float fast_log2(float x) {
  const bool subnormal = x < 1.17549435e-38f;
  const uint32_t b = bits_of(subnormal ? x * 16777216.f : x);  // 2^24
  int exponent = static_cast<int>(b >> 23) - 127 - (subnormal ? 24 : 0);
  float m = float_of((b & 0x007fffffu) | 0x3f800000u);  // [1, 2)
  const bool high = m > 1.41421356f;
  m = high ? 0.5f * m : m;
  exponent += high ? 1 : 0;
  const float t = (m - 1.f) / (m + 1.f), t2 = t * t;
  const float series = t * (2.f + t2 * (2.f / 3 + t2 * (2.f / 5 + t2 * (2.f / 7 + t2 * (2.f / 9)))));
  return static_cast<float>(exponent) + series * 1.44269504f;  // ln -> log2
}

// 2^x for x in [-252, 254]: 2^round(x) as two exact powers of two (either may be below the normal
// range alone) times 2^f, |f| <= 1/2, by its Taylor series to f^7 (~5e-9).
GB_Q8_INLINE float fast_exp2(float x) {
  const int i = static_cast<int>(x + 256.5f) - 256;  // round(x): truncation of a positive value
  const float f = (x - static_cast<float>(i)) * 0.693147181f;  // 2^f = e^(f ln 2)
  const float p =
      1.f + f * (1.f + f * (1.f / 2 + f * (1.f / 6 + f * (1.f / 24 + f * (1.f / 120 + f * (1.f / 720 + f / 5040))))));
  const int half = i / 2;
  const float first = float_of(static_cast<uint32_t>(half + 127) << 23);
  const float second = float_of(static_cast<uint32_t>(i - half + 127) << 23);
  return p * first * second;
}

// A block's code: its range and what encoding needs from it.
struct Range {
  float lo = 0.f, hi = 0.f;   // log2 of the smallest and largest magnitude kept
  float per_octave = 0.f;     // levels per octave
  float floor_value = 0.f;    // below this a value is 0
};

// From the block's largest and smallest counted magnitudes (largest > 0), the cap applied.
GB_Q8_INLINE Range range_of(float largest, float smallest, Q8Sign sign) {
  Range r;
  r.hi = fast_log2(largest);
  const float smallest_log2 = fast_log2(smallest), capped = r.hi - q8_octaves(sign);
  r.lo = smallest_log2 > capped ? smallest_log2 : capped;
  r.per_octave = r.hi > r.lo ? static_cast<float>(levels(sign) - 1) / (r.hi - r.lo) : 0.f;
  r.floor_value = fast_exp2(r.lo - kQ8FloorSlack);
  return r;
}

// Inside the range: the nearest level; below it, 0 (the Note says why not the floor).
GB_Q8_INLINE uint8_t encode(float x, const Range& r, Q8Sign sign) {
  const uint32_t b = bits_of(x);
  const uint32_t a_bits = b & 0x7fffffffu;
  const float a = float_of(a_bits);
  const bool kept = counted(a_bits);
  const float position = (fast_log2(kept ? a : 1.f) - r.lo) * r.per_octave;
  int level = 1 + static_cast<int>((position > 0.f ? position : 0.f) + 0.5f);
  level = level < levels(sign) ? level : levels(sign);
  level = a < r.floor_value ? 0 : level;
  level = kept ? level : 0;
  const bool negative = sign == Q8Sign::signed_values && (b >> 31) && level > 0;
  return static_cast<uint8_t>(level | (negative ? 0x80 : 0));
}

// Levels' spacing in octaves for a block's stored range.
GB_Q8_INLINE float level_step(float lo, float hi, Q8Sign sign) {
  return (hi - lo) / static_cast<float>(levels(sign) - 1);
}

GB_Q8_INLINE float decode(uint32_t code, float lo, float step, Q8Sign sign) {
  const uint32_t level = code & (sign == Q8Sign::signed_values ? 0x7fu : 0xffu);
  const float a = fast_exp2(lo + static_cast<float>(static_cast<int>(level) - 1) * step);
  const uint32_t sign_bit = sign == Q8Sign::signed_values ? (code & 0x80u) << 24 : 0u;
  return float_of((level == 0 ? 0u : bits_of(a)) | sign_bit);
}

// One step's scalars, computed on the host once (in double, as adamw_cpu does).
struct StepConstants {
  float step_size, inv_sqrt_bc2, decay, beta1, beta2, eps, grad_scale;
};

StepConstants constants_of(const AdamWStep& s);

// One parameter's AdamW update from its decoded moments; m and v become the new moments.
GB_Q8_INLINE float update(float param, float grad, float& m, float& v, bool decayed, const StepConstants& c) {
  const float g = grad * c.grad_scale;
  const float m_kept = v > 0.f ? m : 0.f;  // a pair is only as old as its v (see the Note)
  m = c.beta1 * m_kept + (1.f - c.beta1) * g;
  v = c.beta2 * v + (1.f - c.beta2) * g * g;
  // Correctly rounded square root and division on both (nvcc's defaults, made explicit).
#if defined(__CUDA_ARCH__)
  const float denom = __fsqrt_rn(v) * c.inv_sqrt_bc2 + c.eps;
  const float moved = __fdiv_rn(c.step_size * m, denom);
#else
  const float denom = __builtin_sqrtf(v) * c.inv_sqrt_bc2 + c.eps;
  const float moved = c.step_size * m / denom;
#endif
  return param * (decayed ? c.decay : 1.f) - moved;
}

}  // namespace gradbox::kernels::q8

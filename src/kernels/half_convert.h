#pragma once
// fp32 <-> fp16 (IEEE binary16) and fp32 <-> bf16, round to nearest even, in bulk.
//
// The scalar functions below are the reference: integer bit manipulation plus one exact float
// add for fp16 subnormals, so the result does not depend on the FPU rounding mode beyond the
// default round-to-nearest, nor on FTZ/DAZ (an fp32 subnormal always rounds to a zero half).
// The bulk loops are the same code, auto-vectorised; tests compare them over every pattern.
//
// Semantics (both formats):
//  - finite values round to nearest, ties to even; fp16 magnitudes >= 65520 become inf (IEEE
//    overflow, no clamping: the caller detects non-finite values); bf16 likewise past
//    0x1.fefp+127;
//  - inf stays inf, the sign of zero is kept, subnormals are exact where representable;
//  - NaN stays NaN with the sign and the top mantissa bits kept; if those bits are all zero
//    the quiet bit is set (so a NaN never turns into inf). half -> fp32 -> half is the identity
//    on all 65536 patterns, signalling NaNs included.
//
// Planar variants write/read the low bytes of all elements, then the high bytes (a byte
// shuffle fused into the conversion): the high bytes hold sign and exponent and compress well.
#include <bit>
#include <cstddef>
#include <cstdint>

#include "common/bit_cast.h"

namespace gradbox::kernels {

inline uint16_t fp32_to_fp16_bits(float value) {
  const uint32_t w = gradbox::bit_cast<uint32_t>(value);
  const uint32_t sign = (w >> 16) & 0x8000u;
  const uint32_t a = w & 0x7fffffffu;
  // Normal range and overflow: drop 13 mantissa bits with a round-to-nearest-even bias; a carry
  // moves into the exponent, which is exactly right (up to inf at 65520).
  uint32_t normal = (a - 0x38000000u + 0x0fffu + ((a >> 13) & 1u)) >> 13;
  normal = normal < 0x7c00u ? normal : 0x7c00u;
  // Below 2^-14: adding 0.5 puts the value's bits at the scale of the half's subnormal unit
  // (2^-24 is the ulp of 0.5); the FPU rounds to nearest even. Exact, normal result.
  const uint32_t sub = gradbox::bit_cast<uint32_t>(gradbox::bit_cast<float>(a) + 0.5f) - 0x3f000000u;
  uint32_t nan = 0x7c00u | ((a >> 13) & 0x3ffu);
  nan |= (nan & 0x3ffu) == 0 ? 0x200u : 0u;
  const uint32_t h = a > 0x7f800000u ? nan : (a >= 0x38800000u ? normal : sub);
  return static_cast<uint16_t>(sign | h);
}

inline float fp16_bits_to_fp32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t a = h & 0x7fffu;
  const uint32_t exp = a & 0x7c00u;
  // Normal: rebias the exponent (+112 << 23). Inf/NaN: rebias to 255. Subnormal: m * 2^-24,
  // computed exactly as (0.5 + m * 2^-24) - 0.5.
  const uint32_t normal = (a << 13) + 0x38000000u;
  const uint32_t special = (a << 13) + 0x70000000u;
  const uint32_t sub = gradbox::bit_cast<uint32_t>(gradbox::bit_cast<float>(0x3f000000u | a) - 0.5f);
  const uint32_t bits = exp == 0x7c00u ? special : (exp == 0 ? sub : normal);
  return gradbox::bit_cast<float>(sign | bits);
}

inline uint16_t fp32_to_bf16_bits(float value) {
  const uint32_t w = gradbox::bit_cast<uint32_t>(value);
  const uint32_t rounded = (w + 0x7fffu + ((w >> 16) & 1u)) >> 16;
  uint32_t nan = w >> 16;
  nan |= (nan & 0x7fu) == 0 ? 0x40u : 0u;
  return static_cast<uint16_t>((w & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

inline float bf16_bits_to_fp32(uint16_t b) {
  return gradbox::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}

enum class HalfKind : uint8_t { fp16, bf16 };

void float_to_half(HalfKind kind, const float* src, size_t n, uint16_t* dst);
void half_to_float(HalfKind kind, const uint16_t* src, size_t n, float* dst);
// lo[i] / hi[i]: the low / high byte of element i's half bits.
void float_to_half_planes(HalfKind kind, const float* src, size_t n, uint8_t* lo, uint8_t* hi);
void half_planes_to_float(HalfKind kind, const uint8_t* lo, const uint8_t* hi, size_t n,
                          float* dst);

}  // namespace gradbox::kernels

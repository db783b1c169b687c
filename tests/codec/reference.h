#pragma once
// Independent references for the codec tests: fp16/bf16 rounding by nearest-value search over
// all representable values in double (no bit tricks shared with the kernels); blockwise absmax
// quantisation element by element with std::nearbyint, and int4 packing nibble by nibble.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "common/bit_cast.h"

namespace gradbox::codec::testing {

// The value of a half pattern from the definition: (-1)^s * 2^(e-15) * 1.m, or 2^-14 * 0.m.
inline double fp16_definition(uint16_t h) {
  const int e = (h >> 10) & 0x1f;
  const int m = h & 0x3ff;
  const double sign = (h & 0x8000) ? -1.0 : 1.0;
  if (e == 0x1f) return m ? std::nan("") : sign * INFINITY;
  if (e == 0) return sign * std::ldexp(m, -24);
  return sign * std::ldexp(1024 + m, e - 25);
}

inline double bf16_definition(uint16_t b) {
  const int e = (b >> 7) & 0xff;
  const int m = b & 0x7f;
  const double sign = (b & 0x8000) ? -1.0 : 1.0;
  if (e == 0xff) return m ? std::nan("") : sign * INFINITY;
  if (e == 0) return sign * std::ldexp(m, -133);
  return sign * std::ldexp(128 + m, e - 134);
}

// Round |x| to the nearest of the sorted non-negative finite values (index = bit pattern),
// ties to the even pattern; past the largest, `beyond` is the next (virtual) value -> inf.
inline uint16_t nearest(double a, const std::vector<double>& values, double beyond,
                        uint16_t inf_bits) {
  if (a >= beyond) return inf_bits;
  const auto it = std::upper_bound(values.begin(), values.end(), a);
  const size_t lo = static_cast<size_t>(it - values.begin()) - 1;  // values[lo] <= a
  const double vlo = values[lo];
  const double vhi = lo + 1 < values.size() ? values[lo + 1] : beyond;
  const double dlo = a - vlo, dhi = vhi - a;
  size_t pick = dlo < dhi ? lo : dhi < dlo ? lo + 1 : (lo % 2 == 0 ? lo : lo + 1);
  return static_cast<uint16_t>(pick);  // lo + 1 == inf_bits when it is past the largest value
}

inline const std::vector<double>& fp16_positive_values() {
  static const std::vector<double> v = [] {
    std::vector<double> out;
    for (uint32_t h = 0; h < 0x7c00; ++h) out.push_back(fp16_definition(static_cast<uint16_t>(h)));
    return out;
  }();
  return v;
}

inline const std::vector<double>& bf16_positive_values() {
  static const std::vector<double> v = [] {
    std::vector<double> out;
    for (uint32_t b = 0; b < 0x7f80; ++b) out.push_back(bf16_definition(static_cast<uint16_t>(b)));
    return out;
  }();
  return v;
}

// NaN: sign and top mantissa bits kept, quiet bit set when they are all zero.
inline uint16_t ref_fp16(float x) {
  const uint32_t w = gradbox::bit_cast<uint32_t>(x);
  const uint16_t sign = static_cast<uint16_t>((w >> 16) & 0x8000);
  if (std::isnan(x)) {
    uint16_t m = static_cast<uint16_t>((w >> 13) & 0x3ff);
    return static_cast<uint16_t>(sign | 0x7c00 | (m ? m : 0x200));
  }
  return static_cast<uint16_t>(
      sign | nearest(std::fabs(static_cast<double>(x)), fp16_positive_values(), 65536.0, 0x7c00));
}

inline uint16_t ref_bf16(float x) {
  const uint32_t w = gradbox::bit_cast<uint32_t>(x);
  const uint16_t sign = static_cast<uint16_t>((w >> 16) & 0x8000);
  if (std::isnan(x)) {
    uint16_t m = static_cast<uint16_t>((w >> 16) & 0x7f);
    return static_cast<uint16_t>(sign | 0x7f80 | (m ? m : 0x40));
  }
  return static_cast<uint16_t>(sign | nearest(std::fabs(static_cast<double>(x)),
                                              bf16_positive_values(), std::ldexp(1.0, 128),
                                              0x7f80));
}

// Float with the value of a half/bf16 pattern (NaN payloads placed as the converters do).
inline float fp16_to_float_ref(uint16_t h) {
  const double v = fp16_definition(h);
  if (!std::isnan(v)) return static_cast<float>(v);
  return gradbox::bit_cast<float>((static_cast<uint32_t>(h & 0x8000) << 16) | 0x7f800000u |
                              (static_cast<uint32_t>(h & 0x3ff) << 13));
}

// Rounding test inputs: both sides of and exactly on every midpoint between consecutive
// positive finite values, the values themselves, overflow edges, fp32 subnormals, specials.
inline std::vector<float> rounding_cases(const std::vector<double>& values, double beyond) {
  std::vector<float> out;
  for (size_t i = 0; i < values.size(); ++i) {
    const double next = i + 1 < values.size() ? values[i + 1] : beyond;
    const float mid = static_cast<float>((values[i] + next) / 2);
    for (float v : {static_cast<float>(values[i]), mid, std::nextafter(mid, 0.f),
                    std::nextafter(mid, INFINITY)}) {
      out.push_back(v);
      out.push_back(-v);
    }
  }
  for (float v : {0.f, -0.f, INFINITY, -INFINITY, std::numeric_limits<float>::max(),
                  std::numeric_limits<float>::min(), std::numeric_limits<float>::denorm_min(),
                  1e-30f, 65504.f, 65519.99f, 65520.f, 70000.f, 3.4e38f}) {
    out.push_back(v);
    out.push_back(-v);
  }
  for (uint32_t bits : {0x00000001u, 0x007fffffu, 0x00400000u, 0x33000000u, 0x33000001u,
                        0x32ffffffu, 0x387fffffu, 0x38800000u, 0x7f800001u, 0x7fc00000u,
                        0xffc00001u, 0x7f802000u, 0x7fbfffffu}) {
    out.push_back(gradbox::bit_cast<float>(bits));
  }
  return out;
}

// Blockwise absmax quantisation from its definition (src/kernels/quantize.h) with `levels` =
// 127 (int8) or 7 (int4): plain loops, std::nearbyint (ties to even in the default rounding
// mode) instead of the kernels' 1.5 * 2^23 trick, std::fabs instead of integer compares.
struct RefQuantized {
  std::vector<float> scales;  // one per block
  std::vector<int> q;         // one level per element, in [-levels, levels]
};

inline RefQuantized ref_quantize(const float* x, size_t n, uint32_t block, int levels) {
  RefQuantized out;
  out.q.assign(n, 0);
  for (size_t begin = 0; begin < n; begin += block) {
    const size_t end = std::min<size_t>(n, begin + block);
    bool finite = true;
    float amax = 0.f;
    for (size_t i = begin; i < end; ++i) {
      finite = finite && std::isfinite(x[i]);
      amax = std::max(amax, std::fabs(x[i]));
    }
    if (!finite) {
      out.scales.push_back(std::numeric_limits<float>::quiet_NaN());
    } else if (amax < 0x1p-100f) {
      out.scales.push_back(0.f);
    } else {
      out.scales.push_back(amax / static_cast<float>(levels));
      const float inv = static_cast<float>(levels) / amax;
      for (size_t i = begin; i < end; ++i) {
        const float v = std::nearbyint(x[i] * inv);
        out.q[i] = static_cast<int>(std::clamp(v, -static_cast<float>(levels),
                                                static_cast<float>(levels)));
      }
    }
  }
  return out;
}

// int4 packing as Note [Codec payload format] states it: element i in byte i / 2, the low
// nibble for even i, 4-bit two's complement, an unused last high nibble 0.
inline std::vector<uint8_t> ref_pack_int4(const std::vector<int>& q) {
  std::vector<uint8_t> out((q.size() + 1) / 2, 0);
  for (size_t i = 0; i < q.size(); ++i) {
    const unsigned nibble = static_cast<unsigned>(q[i] < 0 ? q[i] + 16 : q[i]);
    out[i / 2] = static_cast<uint8_t>(out[i / 2] | (nibble << (i % 2 == 0 ? 0 : 4)));
  }
  return out;
}

inline int ref_int4_level(const uint8_t* packed, size_t i) {
  const int nibble = (packed[i / 2] >> (i % 2 == 0 ? 0 : 4)) & 0xf;
  return nibble >= 8 ? nibble - 16 : nibble;
}

}  // namespace gradbox::codec::testing

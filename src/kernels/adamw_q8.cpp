#include "kernels/adamw_q8.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define GB_KERNEL_CLONES __attribute__((target_clones("default", "arch=x86-64-v3")))
#else
#define GB_KERNEL_CLONES
#endif

namespace gradbox::kernels {
namespace {

int levels(Q8Sign sign) { return sign == Q8Sign::signed_values ? 127 : 255; }

uint32_t bits_of(float x) {
  uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

float float_of(uint32_t b) {
  float x;
  std::memcpy(&x, &b, sizeof x);
  return x;
}

// log2 of a positive finite float (subnormals included): the exponent, and the mantissa folded
// into [sqrt(1/2), sqrt(2)) by the series of atanh, t = (m - 1) / (m + 1), |t| < 0.172, whose
// fifth term leaves ~1e-9. Branch-free, so that the loops around it vectorize.
inline float fast_log2(float x) {
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
inline float fast_exp2(float x) {
  const int i = static_cast<int>(x + 256.5f) - 256;  // round(x): truncation of a positive value
  const float f = (x - static_cast<float>(i)) * 0.693147181f;  // 2^f = e^(f ln 2)
  const float p =
      1.f + f * (1.f + f * (1.f / 2 + f * (1.f / 6 + f * (1.f / 24 + f * (1.f / 120 + f * (1.f / 720 + f / 5040))))));
  const int half = i / 2;
  const float first = float_of(static_cast<uint32_t>(half + 127) << 23);
  const float second = float_of(static_cast<uint32_t>(i - half + 127) << 23);
  return p * first * second;
}

// The block code's bodies, inlined into each target clone of the step.
[[gnu::always_inline]] inline void encode_block(const float* values, int64_t n, Q8Sign sign, uint8_t* codes,
                                                float* lo, float* hi) {
  // The range, in lanes that vectorize (a float max over a whole array does not, for NaN's sake).
  constexpr int kLanes = 8;
  float largest_in[kLanes] = {}, smallest_in[kLanes];
  std::fill(smallest_in, smallest_in + kLanes, INFINITY);
  auto count = [&](int k, float x) {
    const float a = std::fabs(x);
    const bool counted = a > 0.f && a < INFINITY;  // NaN compares false
    largest_in[k] = counted && a > largest_in[k] ? a : largest_in[k];
    smallest_in[k] = counted && a < smallest_in[k] ? a : smallest_in[k];
  };
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int k = 0; k < kLanes; ++k) count(k, values[i + k]);
  for (int k = 0; i < n; ++i, ++k) count(k, values[i]);
  const float largest = *std::max_element(largest_in, largest_in + kLanes);
  const float smallest = *std::min_element(smallest_in, smallest_in + kLanes);
  if (largest == 0.f) {
    std::fill(codes, codes + n, uint8_t{0});
    *lo = *hi = 0.f;
    return;
  }
  const float h = fast_log2(largest);
  const float l = std::max(fast_log2(smallest), h - q8_octaves(sign));
  *lo = l;
  *hi = h;
  const int top = levels(sign);
  const float per_octave = h > l ? static_cast<float>(top - 1) / (h - l) : 0.f;
  const float floor_value = fast_exp2(l - kQ8FloorSlack);
  const bool keep_sign = sign == Q8Sign::signed_values;
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t b = bits_of(values[i]);
    const uint32_t a_bits = b & 0x7fffffffu;
    const float a = float_of(a_bits);
    const bool counted = a_bits > 0 && a_bits < 0x7f800000u;
    // Inside the range: the nearest level; below it, 0 (see the Note on why not the floor).
    const float position = (fast_log2(counted ? a : 1.f) - l) * per_octave;
    int level = 1 + static_cast<int>(std::max(position, 0.f) + 0.5f);
    level = std::min(level, top);
    level = a < floor_value ? 0 : level;
    level = counted ? level : 0;
    const bool negative = keep_sign && (b >> 31) && level > 0;
    codes[i] = static_cast<uint8_t>(level | (negative ? 0x80 : 0));
  }
}

[[gnu::always_inline]] inline void decode_block(const uint8_t* codes, int64_t n, Q8Sign sign, float lo, float hi,
                                                float* values) {
  const int top = levels(sign);
  const float step = (hi - lo) / static_cast<float>(top - 1);
  const uint32_t mask = sign == Q8Sign::signed_values ? 0x7f : 0xff;
  const bool keep_sign = sign == Q8Sign::signed_values;
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t code = codes[i];
    const uint32_t level = code & mask;
    const float a = fast_exp2(lo + static_cast<float>(static_cast<int>(level) - 1) * step);
    const uint32_t sign_bit = keep_sign ? (code & 0x80u) << 24 : 0u;
    values[i] = float_of((level == 0 ? 0u : bits_of(a)) | sign_bit);
  }
}

}  // namespace

void q8_encode_block(const float* values, int64_t n, Q8Sign sign, uint8_t* codes, float* lo, float* hi) {
  encode_block(values, n, sign, codes, lo, hi);
}

void q8_decode_block(const uint8_t* codes, int64_t n, Q8Sign sign, float lo, float hi, float* values) {
  decode_block(codes, n, sign, lo, hi, values);
}

// Each clone computes the same bits: element-wise arithmetic without FMA contraction (the
// build's -ffp-contract=off), and only max and min reduce across elements.
GB_KERNEL_CLONES
void adamw_q8_cpu(float* param, const float* grad, Q8Moment m, Q8Moment v, int64_t n, int64_t decay_end,
                  const AdamWStep& s) {
  const double bias_correction1 = 1.0 - std::pow(static_cast<double>(s.beta1), static_cast<double>(s.step));
  const double bias_correction2 = 1.0 - std::pow(static_cast<double>(s.beta2), static_cast<double>(s.step));
  const float step_size = static_cast<float>(s.lr / bias_correction1);
  const float inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bias_correction2));
  const float decay = 1.f - s.lr * s.weight_decay;
  const float beta1 = s.beta1, beta2 = s.beta2, eps = s.eps, grad_scale = s.grad_scale;
  float mb[kQ8Block], vb[kQ8Block];
  for (int64_t begin = 0, block = 0; begin < n; begin += kQ8Block, ++block) {
    const int64_t len = std::min(kQ8Block, n - begin);
    decode_block(m.codes + begin, len, Q8Sign::signed_values, m.lo[block], m.hi[block], mb);
    decode_block(v.codes + begin, len, Q8Sign::non_negative, v.lo[block], v.hi[block], vb);
    float* __restrict__ p = param + begin;
    const float* __restrict__ g_in = grad + begin;
    const int decayed = static_cast<int>(std::clamp<int64_t>(decay_end - begin, 0, len));
    for (int i = 0; i < static_cast<int>(len); ++i) {
      const float g = g_in[i] * grad_scale;
      const float m_kept = vb[i] > 0.f ? mb[i] : 0.f;  // a pair is only as old as its v (see the Note)
      const float mi = beta1 * m_kept + (1.f - beta1) * g;
      const float vi = beta2 * vb[i] + (1.f - beta2) * g * g;
      mb[i] = mi;
      vb[i] = vi;
      const float denom = std::sqrt(vi) * inv_sqrt_bc2 + eps;
      p[i] = p[i] * (i < decayed ? decay : 1.f) - step_size * mi / denom;
    }
    encode_block(mb, len, Q8Sign::signed_values, m.codes + begin, m.lo + block, m.hi + block);
    encode_block(vb, len, Q8Sign::non_negative, v.codes + begin, v.lo + block, v.hi + block);
  }
}

}  // namespace gradbox::kernels

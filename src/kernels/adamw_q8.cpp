#include "kernels/adamw_q8.h"

#include <algorithm>
#include <cmath>

#include "kernels/adamw_q8_math.h"

#include "kernels/target_clones.h"

namespace gradbox::kernels {

q8::StepConstants q8::constants_of(const AdamWStep& s) {
  const double bias_correction1 = 1.0 - std::pow(static_cast<double>(s.beta1), static_cast<double>(s.step));
  const double bias_correction2 = 1.0 - std::pow(static_cast<double>(s.beta2), static_cast<double>(s.step));
  return {static_cast<float>(s.lr / bias_correction1), static_cast<float>(1.0 / std::sqrt(bias_correction2)),
          1.f - s.lr * s.weight_decay, s.beta1, s.beta2, s.eps, s.grad_scale};
}

namespace {

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
  const q8::Range range = q8::range_of(largest, smallest, sign);
  *lo = range.lo;
  *hi = range.hi;
  for (int64_t j = 0; j < n; ++j) codes[j] = q8::encode(values[j], range, sign);
}

[[gnu::always_inline]] inline void decode_block(const uint8_t* codes, int64_t n, Q8Sign sign, float lo, float hi,
                                                float* values) {
  const float step = q8::level_step(lo, hi, sign);
  for (int64_t i = 0; i < n; ++i) values[i] = q8::decode(codes[i], lo, step, sign);
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
  const q8::StepConstants c = q8::constants_of(s);
  float mb[kQ8Block], vb[kQ8Block];
  for (int64_t begin = 0, block = 0; begin < n; begin += kQ8Block, ++block) {
    const int64_t len = std::min(kQ8Block, n - begin);
    decode_block(m.codes + begin, len, Q8Sign::signed_values, m.lo[block], m.hi[block], mb);
    decode_block(v.codes + begin, len, Q8Sign::non_negative, v.lo[block], v.hi[block], vb);
    float* __restrict__ p = param + begin;
    const float* __restrict__ g = grad + begin;
    const int decayed = static_cast<int>(std::clamp<int64_t>(decay_end - begin, 0, len));
    for (int i = 0; i < static_cast<int>(len); ++i) p[i] = q8::update(p[i], g[i], mb[i], vb[i], i < decayed, c);
    encode_block(mb, len, Q8Sign::signed_values, m.codes + begin, m.lo + block, m.hi + block);
    encode_block(vb, len, Q8Sign::non_negative, v.codes + begin, v.lo + block, v.hi + block);
  }
}

}  // namespace gradbox::kernels

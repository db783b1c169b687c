#include "kernels/quantize.h"

#include <algorithm>
#include <bit>
#include <limits>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define GB_KERNEL_CLONES __attribute__((target_clones("default", "arch=x86-64-v3")))
#else
#define GB_KERNEL_CLONES
#endif

namespace gradbox::kernels {
namespace {

// Largest |x| as bits: for non-negative floats the integer order is the float order, and
// inf/NaN compare above every finite value, so one integer max finds both.
inline uint32_t absmax_bits(const float* __restrict__ x, size_t n) {
  uint32_t m = 0;
  for (size_t i = 0; i < n; ++i) m = std::max(m, std::bit_cast<uint32_t>(x[i]) & 0x7fffffffu);
  return m;
}

inline void quantize_block(const float* __restrict__ x, size_t n, float inv,
                           int8_t* __restrict__ q) {
  constexpr float kRound = 12582912.f;  // 1.5 * 2^23: (v + kRound) - kRound rounds v to even
  for (size_t i = 0; i < n; ++i) {
    float v = x[i] * inv;
    v = std::min(std::max(v, -127.f), 127.f);
    v = (v + kRound) - kRound;
    q[i] = static_cast<int8_t>(static_cast<int32_t>(v));
  }
}

}  // namespace

GB_KERNEL_CLONES
void quantize_int8(const float* src, size_t n, uint32_t block, float* scales, int8_t* q) {
  const size_t blocks = int8_block_count(n, block);
  for (size_t b = 0; b < blocks; ++b) {
    const size_t begin = b * block;
    const size_t len = std::min<size_t>(block, n - begin);
    const uint32_t m = absmax_bits(src + begin, len);
    const float amax = std::bit_cast<float>(m);
    if (m >= 0x7f800000u) {
      scales[b] = std::numeric_limits<float>::quiet_NaN();
      std::fill(q + begin, q + begin + len, int8_t{0});
    } else if (amax < kInt8FlushBelow) {
      scales[b] = 0.f;
      std::fill(q + begin, q + begin + len, int8_t{0});
    } else {
      scales[b] = amax / 127.f;
      quantize_block(src + begin, len, 127.f / amax, q + begin);
    }
  }
}

GB_KERNEL_CLONES
void dequantize_int8(const float* scales, const int8_t* q, size_t n, uint32_t block,
                     float* dst) {
  const size_t blocks = int8_block_count(n, block);
  for (size_t b = 0; b < blocks; ++b) {
    const size_t begin = b * block;
    const size_t len = std::min<size_t>(block, n - begin);
    const float s = scales[b];
    const int8_t* __restrict__ qb = q + begin;
    float* __restrict__ d = dst + begin;
    for (size_t i = 0; i < len; ++i) d[i] = static_cast<float>(qb[i]) * s;
  }
}

}  // namespace gradbox::kernels

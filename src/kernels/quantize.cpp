#include "kernels/quantize.h"

#include <algorithm>
#include <bit>
#include <limits>

#include "common/bit_cast.h"
#include "kernels/target_clones.h"

namespace gradbox::kernels {
namespace {

// int4 works through a stack tile of int8 levels: quantise into it block by block, then pack
// it two per byte (and the reverse), so that both loops stay simple enough to vectorise. Even,
// so every tile starts on a byte.
constexpr size_t kInt4Tile = 4096;
static_assert(kInt4Tile % 2 == 0);

// Largest |x| as bits: for non-negative floats the integer order is the float order, and
// inf/NaN compare above every finite value, so one integer max finds both.
inline uint32_t absmax_bits(const float* __restrict__ x, size_t n) {
  uint32_t m = 0;
  for (size_t i = 0; i < n; ++i) m = std::max(m, gradbox::bit_cast<uint32_t>(x[i]) & 0x7fffffffu);
  return m;
}

// q[i] = round-to-nearest-even(x[i] * inv) clamped to [-kLevels, kLevels].
template <int kLevels>
inline void quantize_block(const float* __restrict__ x, size_t n, float inv,
                           int8_t* __restrict__ q) {
  constexpr float kRound = 12582912.f;  // 1.5 * 2^23: (v + kRound) - kRound rounds v to even
  constexpr float kMax = static_cast<float>(kLevels);
  for (size_t i = 0; i < n; ++i) {
    float v = x[i] * inv;
    v = std::min(std::max(v, -kMax), kMax);
    v = (v + kRound) - kRound;
    q[i] = static_cast<int8_t>(static_cast<int32_t>(v));
  }
}

// The scale of one block (the rules in quantize.h); inv = kLevels / amax, or 0 when the block
// is all q = 0 (non-finite or flushed).
template <int kLevels>
inline float block_scale(const float* __restrict__ x, size_t n, float& inv) {
  const uint32_t m = absmax_bits(x, n);
  const float amax = gradbox::bit_cast<float>(m);
  inv = 0.f;
  if (m >= 0x7f800000u) return std::numeric_limits<float>::quiet_NaN();
  if (amax < kQuantFlushBelow) return 0.f;
  inv = static_cast<float>(kLevels) / amax;
  return amax / static_cast<float>(kLevels);
}

// Two levels in [-7, 7] per byte, even index in the low nibble (4-bit two's complement); an
// odd n leaves the high nibble of the last byte 0.
inline void pack_nibbles(const int8_t* __restrict__ q, size_t n, uint8_t* __restrict__ out) {
  const size_t pairs = n / 2;
  for (size_t k = 0; k < pairs; ++k) {
    out[k] = static_cast<uint8_t>((q[2 * k] & 0x0f) | (q[2 * k + 1] << 4));
  }
  if (n % 2) out[pairs] = static_cast<uint8_t>(q[n - 1] & 0x0f);
}

// The reverse, sign-extending each nibble.
inline void unpack_nibbles(const uint8_t* __restrict__ p, size_t n, int8_t* __restrict__ q) {
  const size_t pairs = n / 2;
  for (size_t k = 0; k < pairs; ++k) {
    q[2 * k] = static_cast<int8_t>(static_cast<int8_t>(p[k] << 4) >> 4);
    q[2 * k + 1] = static_cast<int8_t>(static_cast<int8_t>(p[k]) >> 4);
  }
  if (n % 2) q[n - 1] = static_cast<int8_t>(static_cast<int8_t>(p[pairs] << 4) >> 4);
}

}  // namespace

GB_KERNEL_CLONES
void quantize_int8(const float* src, size_t n, uint32_t block, float* scales, int8_t* q) {
  const size_t blocks = int8_block_count(n, block);
  for (size_t b = 0; b < blocks; ++b) {
    const size_t begin = b * block;
    const size_t len = std::min<size_t>(block, n - begin);
    float inv;
    scales[b] = block_scale<127>(src + begin, len, inv);
    if (inv == 0.f) {
      std::fill(q + begin, q + begin + len, int8_t{0});
    } else {
      quantize_block<127>(src + begin, len, inv, q + begin);
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

GB_KERNEL_CLONES
void quantize_int4(const float* src, size_t n, uint32_t block, float* scales, uint8_t* packed) {
  int8_t q[kInt4Tile];
  size_t filled = 0;  // q holds the levels of elements [done, done + filled)
  size_t done = 0;
  const size_t blocks = int8_block_count(n, block);
  for (size_t b = 0; b < blocks; ++b) {
    const size_t begin = b * block;
    const size_t len = std::min<size_t>(block, n - begin);
    float inv;
    scales[b] = block_scale<7>(src + begin, len, inv);
    for (size_t i = 0; i < len;) {
      const size_t take = std::min(len - i, kInt4Tile - filled);
      if (inv == 0.f) {
        std::fill(q + filled, q + filled + take, int8_t{0});
      } else {
        quantize_block<7>(src + begin + i, take, inv, q + filled);
      }
      filled += take;
      i += take;
      if (filled == kInt4Tile) {
        pack_nibbles(q, filled, packed + done / 2);
        done += filled;
        filled = 0;
      }
    }
  }
  pack_nibbles(q, filled, packed + done / 2);
}

GB_KERNEL_CLONES
void dequantize_int4(const float* scales, const uint8_t* packed, size_t n, uint32_t block,
                     float* dst) {
  int8_t q[kInt4Tile];
  for (size_t tile = 0; tile < n; tile += kInt4Tile) {
    const size_t tile_end = std::min(n, tile + kInt4Tile);
    unpack_nibbles(packed + tile / 2, tile_end - tile, q);
    // The blocks overlapping this tile, each with its own scale.
    for (size_t i = tile; i < tile_end;) {
      const size_t b = i / block;
      const size_t end = std::min<size_t>(tile_end, (b + 1) * static_cast<size_t>(block));
      const float s = scales[b];
      const int8_t* __restrict__ qb = q + (i - tile);
      float* __restrict__ d = dst + i;
      for (size_t j = 0; j < end - i; ++j) d[j] = static_cast<float>(qb[j]) * s;
      i = end;
    }
  }
}

}  // namespace gradbox::kernels

#pragma once
// Blockwise absmax quantisation, int8 and int4 (one fp32 scale per `block` consecutive
// elements; the last block may be short). With L = 127 for int8 and L = 7 for int4, for each
// block:
//   amax = max |x|
//   - any inf or NaN in the block: scale = NaN and q = 0, so every element of the block decodes
//     to NaN and the caller's non-finite check sees the overflow;
//   - amax < kQuantFlushBelow (2^-100, all zeros included): scale = 0 and q = 0 (the block
//     decodes to zeros; L/amax would overflow and such gradients carry nothing);
//   - otherwise scale = amax / L, q = round-to-nearest-even(x * (L / amax)) in [-L, L].
//   Dequantised: x' = q * scale, so |x - x'| <= scale / 2 (plus a few ulps of amax).
// The rounding uses the 1.5 * 2^23 trick (exact for |v| <= 2^22), which vectorises without
// SSE4.1 and gives the same bits in every clone.
//
// int4 packing: element i of the range goes to byte i / 2, the low nibble for even i and the
// high nibble for odd i, as 4-bit two's complement (-7..7; the pattern 0x8 = -8 is never
// written). The nibbles run on across block boundaries, so an odd block shares a byte with the
// next block; the range takes int4_packed_bytes(n) = ceil(n / 2) bytes, and when n is odd the
// last byte's high nibble is 0 (ignored when read).
#include <cstddef>
#include <cstdint>

namespace gradbox::kernels {

inline constexpr float kQuantFlushBelow = 0x1p-100f;
inline constexpr float kInt8FlushBelow = kQuantFlushBelow;

// Blocks of a range of n elements (int8 and int4 alike).
inline size_t int8_block_count(size_t n, uint32_t block) { return (n + block - 1) / block; }
inline size_t int4_packed_bytes(size_t n) { return (n + 1) / 2; }

// scales: int8_block_count(n, block) floats; q: n bytes. block >= 1.
void quantize_int8(const float* src, size_t n, uint32_t block, float* scales, int8_t* q);
void dequantize_int8(const float* scales, const int8_t* q, size_t n, uint32_t block, float* dst);

// scales: int8_block_count(n, block) floats; packed: int4_packed_bytes(n) bytes. block >= 1.
// To dequantise part of a quantised range, start at an element that is a multiple of both the
// block and 2, passing scales + begin / block and packed + begin / 2.
void quantize_int4(const float* src, size_t n, uint32_t block, float* scales, uint8_t* packed);
void dequantize_int4(const float* scales, const uint8_t* packed, size_t n, uint32_t block,
                     float* dst);

}  // namespace gradbox::kernels

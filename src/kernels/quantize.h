#pragma once
// Blockwise absmax int8 quantisation (one fp32 scale per `block` consecutive elements; the
// last block may be short). For each block:
//   amax = max |x|
//   - any inf or NaN in the block: scale = NaN and q = 0, so every element of the block decodes
//     to NaN and the caller's non-finite check sees the overflow;
//   - amax < kInt8FlushBelow (2^-100, all zeros included): scale = 0 and q = 0 (the block
//     decodes to zeros; 127/amax would overflow and such gradients carry nothing);
//   - otherwise scale = amax / 127, q = round-to-nearest-even(x * (127 / amax)) in [-127, 127].
//   Dequantised: x' = q * scale, so |x - x'| <= scale / 2 (plus a few ulps of amax).
// The rounding uses the 1.5 * 2^23 trick (exact for |v| <= 2^22), which vectorises without
// SSE4.1 and gives the same bits in every clone.
#include <cstddef>
#include <cstdint>

namespace gradbox::kernels {

inline constexpr float kInt8FlushBelow = 0x1p-100f;

inline size_t int8_block_count(size_t n, uint32_t block) { return (n + block - 1) / block; }

// scales: int8_block_count(n, block) floats; q: n bytes. block >= 1.
void quantize_int8(const float* src, size_t n, uint32_t block, float* scales, int8_t* q);
void dequantize_int8(const float* scales, const int8_t* q, size_t n, uint32_t block, float* dst);

}  // namespace gradbox::kernels

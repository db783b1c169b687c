#include "common/bit_cast.h"
#include "kernels/half_convert.h"

// Every loop is cloned for x86-64-v3 (AVX2): GCC vectorises the integer selects 8 wide there,
// 4 wide with plain SSE2. Both clones compute the same bits (integer ops and exact float adds).
#include "kernels/target_clones.h"

namespace gradbox::kernels {
namespace {

GB_KERNEL_CLONES
void to_fp16(const float* __restrict__ src, size_t n, uint16_t* __restrict__ dst) {
  for (size_t i = 0; i < n; ++i) dst[i] = fp32_to_fp16_bits(src[i]);
}
GB_KERNEL_CLONES
void to_bf16(const float* __restrict__ src, size_t n, uint16_t* __restrict__ dst) {
  for (size_t i = 0; i < n; ++i) dst[i] = fp32_to_bf16_bits(src[i]);
}
GB_KERNEL_CLONES
void from_fp16(const uint16_t* __restrict__ src, size_t n, float* __restrict__ dst) {
  for (size_t i = 0; i < n; ++i) dst[i] = fp16_bits_to_fp32(src[i]);
}
GB_KERNEL_CLONES
void from_bf16(const uint16_t* __restrict__ src, size_t n, float* __restrict__ dst) {
  for (size_t i = 0; i < n; ++i) dst[i] = bf16_bits_to_fp32(src[i]);
}
GB_KERNEL_CLONES
void to_fp16_planes(const float* __restrict__ src, size_t n, uint8_t* __restrict__ lo,
                    uint8_t* __restrict__ hi) {
  for (size_t i = 0; i < n; ++i) {
    const uint16_t h = fp32_to_fp16_bits(src[i]);
    lo[i] = static_cast<uint8_t>(h);
    hi[i] = static_cast<uint8_t>(h >> 8);
  }
}
GB_KERNEL_CLONES
void to_bf16_planes(const float* __restrict__ src, size_t n, uint8_t* __restrict__ lo,
                    uint8_t* __restrict__ hi) {
  for (size_t i = 0; i < n; ++i) {
    const uint16_t h = fp32_to_bf16_bits(src[i]);
    lo[i] = static_cast<uint8_t>(h);
    hi[i] = static_cast<uint8_t>(h >> 8);
  }
}
GB_KERNEL_CLONES
void from_fp16_planes(const uint8_t* __restrict__ lo, const uint8_t* __restrict__ hi, size_t n,
                      float* __restrict__ dst) {
  for (size_t i = 0; i < n; ++i) {
    dst[i] = fp16_bits_to_fp32(static_cast<uint16_t>(lo[i] | (hi[i] << 8)));
  }
}
GB_KERNEL_CLONES
void from_bf16_planes(const uint8_t* __restrict__ lo, const uint8_t* __restrict__ hi, size_t n,
                      float* __restrict__ dst) {
  for (size_t i = 0; i < n; ++i) {
    dst[i] = gradbox::bit_cast<float>((static_cast<uint32_t>(hi[i]) << 24) |
                                  (static_cast<uint32_t>(lo[i]) << 16));
  }
}

}  // namespace

void float_to_half(HalfKind kind, const float* src, size_t n, uint16_t* dst) {
  kind == HalfKind::fp16 ? to_fp16(src, n, dst) : to_bf16(src, n, dst);
}
void half_to_float(HalfKind kind, const uint16_t* src, size_t n, float* dst) {
  kind == HalfKind::fp16 ? from_fp16(src, n, dst) : from_bf16(src, n, dst);
}
void float_to_half_planes(HalfKind kind, const float* src, size_t n, uint8_t* lo, uint8_t* hi) {
  kind == HalfKind::fp16 ? to_fp16_planes(src, n, lo, hi) : to_bf16_planes(src, n, lo, hi);
}
void half_planes_to_float(HalfKind kind, const uint8_t* lo, const uint8_t* hi, size_t n,
                          float* dst) {
  kind == HalfKind::fp16 ? from_fp16_planes(lo, hi, n, dst) : from_bf16_planes(lo, hi, n, dst);
}

}  // namespace gradbox::kernels

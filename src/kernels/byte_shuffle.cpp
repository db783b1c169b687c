#include "kernels/byte_shuffle.h"

#include <cstring>

#include "kernels/target_clones.h"

namespace gradbox::kernels {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "byte planes assume little-endian");

GB_KERNEL_CLONES
void shuffle4(const uint32_t* __restrict__ src, size_t n, uint8_t* __restrict__ p0,
              uint8_t* __restrict__ p1, uint8_t* __restrict__ p2, uint8_t* __restrict__ p3) {
  for (size_t i = 0; i < n; ++i) {
    const uint32_t w = src[i];
    p0[i] = static_cast<uint8_t>(w);
    p1[i] = static_cast<uint8_t>(w >> 8);
    p2[i] = static_cast<uint8_t>(w >> 16);
    p3[i] = static_cast<uint8_t>(w >> 24);
  }
}

GB_KERNEL_CLONES
void unshuffle4(const uint8_t* __restrict__ p0, const uint8_t* __restrict__ p1,
                const uint8_t* __restrict__ p2, const uint8_t* __restrict__ p3, size_t n,
                uint32_t* __restrict__ dst) {
  for (size_t i = 0; i < n; ++i) {
    dst[i] = static_cast<uint32_t>(p0[i]) | (static_cast<uint32_t>(p1[i]) << 8) |
             (static_cast<uint32_t>(p2[i]) << 16) | (static_cast<uint32_t>(p3[i]) << 24);
  }
}

GB_KERNEL_CLONES
void shuffle2(const uint16_t* __restrict__ src, size_t n, uint8_t* __restrict__ p0,
              uint8_t* __restrict__ p1) {
  for (size_t i = 0; i < n; ++i) {
    p0[i] = static_cast<uint8_t>(src[i]);
    p1[i] = static_cast<uint8_t>(src[i] >> 8);
  }
}

GB_KERNEL_CLONES
void unshuffle2(const uint8_t* __restrict__ p0, const uint8_t* __restrict__ p1, size_t n,
                uint16_t* __restrict__ dst) {
  for (size_t i = 0; i < n; ++i) dst[i] = static_cast<uint16_t>(p0[i] | (p1[i] << 8));
}

}  // namespace

// The typed paths need aligned element pointers; callers pass float/uint16 buffers, but a
// byte buffer at an odd offset falls back to the generic loop.
void byte_shuffle(const void* src, size_t n, size_t width, uint8_t* dst, size_t stride) {
  const auto addr = reinterpret_cast<uintptr_t>(src);
  if (width == 4 && addr % 4 == 0) {
    shuffle4(static_cast<const uint32_t*>(src), n, dst, dst + stride, dst + 2 * stride,
             dst + 3 * stride);
  } else if (width == 2 && addr % 2 == 0) {
    shuffle2(static_cast<const uint16_t*>(src), n, dst, dst + stride);
  } else if (width == 1) {
    if (n) std::memcpy(dst, src, n);
  } else {
    const auto* s = static_cast<const uint8_t*>(src);
    for (size_t i = 0; i < n; ++i)
      for (size_t b = 0; b < width; ++b) dst[b * stride + i] = s[i * width + b];
  }
}

void byte_unshuffle(const uint8_t* src, size_t n, size_t width, size_t stride, void* dst) {
  const auto addr = reinterpret_cast<uintptr_t>(dst);
  if (width == 4 && addr % 4 == 0) {
    unshuffle4(src, src + stride, src + 2 * stride, src + 3 * stride, n,
               static_cast<uint32_t*>(dst));
  } else if (width == 2 && addr % 2 == 0) {
    unshuffle2(src, src + stride, n, static_cast<uint16_t*>(dst));
  } else if (width == 1) {
    if (n) std::memcpy(dst, src, n);
  } else {
    auto* d = static_cast<uint8_t*>(dst);
    for (size_t i = 0; i < n; ++i)
      for (size_t b = 0; b < width; ++b) d[i * width + b] = src[b * stride + i];
  }
}

}  // namespace gradbox::kernels

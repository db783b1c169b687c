#pragma once
// Byte-plane shuffle: n elements of `width` bytes each become `width` planes of n bytes
// (plane b holds byte b of every element, little-endian order), so that the bytes with the
// same role (exponents, high mantissa bits) sit next to each other for the compressor.
#include <cstddef>
#include <cstdint>

namespace gradbox::kernels {

// dst[b * stride + i] = src_bytes[i * width + b], stride >= n (plane b starts at b * stride;
// stride n packs the planes). src and dst must not overlap.
void byte_shuffle(const void* src, size_t n, size_t width, uint8_t* dst, size_t stride);
// The inverse: dst_bytes[i * width + b] = src[b * stride + i]. Passing src + k with the
// full-length stride unshuffles elements k..k+n of a larger shuffled buffer.
void byte_unshuffle(const uint8_t* src, size_t n, size_t width, size_t stride, void* dst);

}  // namespace gradbox::kernels

// The codec kernels against independent references: every fp16/bf16 pattern, every rounding
// midpoint, the F16C instruction where the CPU has it, odd lengths with guard elements, int8
// and int4 blocks bit for bit against the element-by-element reference.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/byte_shuffle.h"
#include "kernels/half_convert.h"
#include "kernels/quantize.h"
#include "reference.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>

#include "common/bit_cast.h"
#endif

namespace {

using namespace gradbox::kernels;
using namespace gradbox::codec::testing;

uint32_t bits(float f) { return gradbox::bit_cast<uint32_t>(f); }

std::vector<float> random_bit_patterns(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> out(n);
  for (auto& v : out) v = gradbox::bit_cast<float>(static_cast<uint32_t>(rng()));
  return out;
}

TEST(HalfConvert, Fp16EveryPatternDecodesToItsDefinition) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float got = fp16_bits_to_fp32(static_cast<uint16_t>(h));
    ASSERT_EQ(bits(got), bits(fp16_to_float_ref(static_cast<uint16_t>(h)))) << std::hex << h;
    ASSERT_EQ(fp32_to_fp16_bits(got), h) << "round trip of 0x" << std::hex << h;
  }
}

TEST(HalfConvert, Bf16EveryPatternRoundTrips) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const float got = bf16_bits_to_fp32(static_cast<uint16_t>(b));
    const double def = bf16_definition(static_cast<uint16_t>(b));
    if (!std::isnan(def)) {
      ASSERT_EQ(static_cast<double>(got), def) << std::hex << b;
    }
    ASSERT_EQ(fp32_to_bf16_bits(got), b) << "round trip of 0x" << std::hex << b;
  }
}

TEST(HalfConvert, Fp16RoundsToNearestEven) {
  std::vector<float> cases = rounding_cases(fp16_positive_values(), 65536.0);
  const auto random = random_bit_patterns(1 << 20, 1);
  cases.insert(cases.end(), random.begin(), random.end());
  for (float x : cases) {
    ASSERT_EQ(fp32_to_fp16_bits(x), ref_fp16(x)) << std::hexfloat << x;
  }
  // The bulk loop (vectorised, possibly another clone) agrees with the scalar one.
  std::vector<uint16_t> bulk(cases.size());
  float_to_half(HalfKind::fp16, cases.data(), cases.size(), bulk.data());
  for (size_t i = 0; i < cases.size(); ++i) ASSERT_EQ(bulk[i], ref_fp16(cases[i])) << i;
}

TEST(HalfConvert, Bf16RoundsToNearestEven) {
  std::vector<float> cases = rounding_cases(bf16_positive_values(), std::ldexp(1.0, 128));
  const auto random = random_bit_patterns(1 << 20, 2);
  cases.insert(cases.end(), random.begin(), random.end());
  std::vector<uint16_t> bulk(cases.size());
  float_to_half(HalfKind::bf16, cases.data(), cases.size(), bulk.data());
  for (size_t i = 0; i < cases.size(); ++i) {
    ASSERT_EQ(bulk[i], ref_bf16(cases[i])) << std::hexfloat << cases[i];
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("f16c"))) uint16_t hardware_fp16(float x) {
  return static_cast<uint16_t>(_cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT));
}
__attribute__((target("f16c"))) float hardware_fp32(uint16_t h) { return _cvtsh_ss(h); }
// CPUID leaf 1, ECX bit 29 (GCC 10's __builtin_cpu_supports does not know "f16c").
bool cpu_has_f16c() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29)) != 0;
}

TEST(HalfConvert, Fp16MatchesF16cInstruction) {
  if (!cpu_has_f16c()) GTEST_SKIP() << "no F16C on this CPU";
  std::vector<float> cases = rounding_cases(fp16_positive_values(), 65536.0);
  const auto random = random_bit_patterns(1 << 20, 3);
  cases.insert(cases.end(), random.begin(), random.end());
  for (float x : cases) {
    if (std::isnan(x)) continue;  // F16C quiets signalling NaNs; we keep them (see the header)
    ASSERT_EQ(fp32_to_fp16_bits(x), hardware_fp16(x)) << std::hexfloat << x;
  }
  for (uint32_t h = 0; h < 65536; ++h) {
    if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) continue;
    ASSERT_EQ(bits(fp16_bits_to_fp32(static_cast<uint16_t>(h))),
              bits(hardware_fp32(static_cast<uint16_t>(h))));
  }
}
#endif

// Planar and interleaved, to and from, at lengths around the vector widths, with guards.
TEST(HalfConvert, BulkLoopsMatchScalarAtOddLengths) {
  const auto src = random_bit_patterns(1000, 4);
  for (HalfKind kind : {HalfKind::fp16, HalfKind::bf16}) {
    auto scalar_to = [&](float x) {
      return kind == HalfKind::fp16 ? fp32_to_fp16_bits(x) : fp32_to_bf16_bits(x);
    };
    auto scalar_from = [&](uint16_t h) {
      return kind == HalfKind::fp16 ? fp16_bits_to_fp32(h) : bf16_bits_to_fp32(h);
    };
    for (size_t n : {0, 1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 33, 63, 65, 999}) {
      std::vector<uint16_t> h(n + 8, 0xabcd);
      float_to_half(kind, src.data(), n, h.data());
      std::vector<uint8_t> planes(2 * n + 8, 0x5a);
      float_to_half_planes(kind, src.data(), n, planes.data(), planes.data() + n);
      for (size_t i = 0; i < n; ++i) {
        ASSERT_EQ(h[i], scalar_to(src[i]));
        ASSERT_EQ(planes[i], h[i] & 0xff);
        ASSERT_EQ(planes[n + i], h[i] >> 8);
      }
      for (size_t i = n; i < n + 8; ++i) ASSERT_EQ(h[i], 0xabcd) << "overrun at n=" << n;
      for (size_t i = 2 * n; i < 2 * n + 8; ++i) ASSERT_EQ(planes[i], 0x5a) << "overrun";
      std::vector<float> back(n + 8, 42.f), back_planes(n + 8, 42.f);
      half_to_float(kind, h.data(), n, back.data());
      half_planes_to_float(kind, planes.data(), planes.data() + n, n, back_planes.data());
      for (size_t i = 0; i < n; ++i) {
        ASSERT_EQ(bits(back[i]), bits(scalar_from(h[i])));
        ASSERT_EQ(bits(back_planes[i]), bits(back[i]));
      }
      for (size_t i = n; i < n + 8; ++i) ASSERT_EQ(back[i], 42.f);
      for (size_t i = n; i < n + 8; ++i) ASSERT_EQ(back_planes[i], 42.f);
    }
  }
}

TEST(ByteShuffle, RoundTripsEveryWidthAndStride) {
  std::mt19937 rng(5);
  for (size_t width : {1, 2, 3, 4, 8}) {
    for (size_t n : {0, 1, 5, 16, 33, 257}) {
      // Offset 1: the unaligned fallback path; offset 0: the typed one.
      for (size_t offset : {0, 1}) {
        std::vector<uint8_t> src(n * width + offset + 8);
        for (auto& b : src) b = static_cast<uint8_t>(rng());
        const size_t stride = n + 3;
        std::vector<uint8_t> planes(width * stride, 0x77);
        byte_shuffle(src.data() + offset, n, width, planes.data(), stride);
        for (size_t i = 0; i < n; ++i)
          for (size_t b = 0; b < width; ++b)
            ASSERT_EQ(planes[b * stride + i], src[offset + i * width + b]);
        for (size_t b = 0; b < width; ++b)
          for (size_t i = n; i < stride; ++i) ASSERT_EQ(planes[b * stride + i], 0x77);
        std::vector<uint8_t> back(n * width + offset + 8, 0x11);
        byte_unshuffle(planes.data(), n, width, stride, back.data() + offset);
        ASSERT_EQ(0, std::memcmp(back.data() + offset, src.data() + offset, n * width));
        for (size_t i = offset + n * width; i < back.size(); ++i) ASSERT_EQ(back[i], 0x11);
      }
    }
  }
}

TEST(Quantize, Int8ErrorWithinHalfAStep) {
  std::mt19937 rng(6);
  std::normal_distribution<float> normal(0.f, 1.f);
  for (uint32_t block : {1u, 3u, 64u, 256u, 1000u}) {
    for (size_t n : {0, 1, 255, 256, 257, 2049}) {
      std::vector<float> x(n);
      for (auto& v : x) v = normal(rng) * 1e-3f;
      const size_t blocks = int8_block_count(n, block);
      std::vector<float> scales(blocks + 1, 123.f);
      std::vector<int8_t> q(n + 1, 99);
      quantize_int8(x.data(), n, block, scales.data(), q.data());
      ASSERT_EQ(scales[blocks], 123.f);
      ASSERT_EQ(q[n], 99);
      std::vector<float> y(n);
      dequantize_int8(scales.data(), q.data(), n, block, y.data());
      for (size_t b = 0; b < blocks; ++b) {
        float amax = 0;
        const size_t end = std::min<size_t>(n, (b + 1) * block);
        for (size_t i = b * block; i < end; ++i) amax = std::max(amax, std::fabs(x[i]));
        ASSERT_EQ(scales[b], amax / 127.f);
        for (size_t i = b * block; i < end; ++i) {
          ASSERT_LE(std::abs(q[i]), 127);
          ASSERT_LE(std::fabs(x[i] - y[i]), scales[b] * 0.5f + amax * 1e-6f)
              << "block " << block << " i " << i;
          // Nearest-even: the chosen q is the closest integer to x * 127 / amax.
          const double exact = static_cast<double>(x[i]) * 127.0 / amax;
          ASSERT_LE(std::fabs(exact - q[i]), 0.5 + 1e-5);
        }
      }
    }
  }
}

TEST(Quantize, Int8SpecialBlocks) {
  const uint32_t block = 4;
  std::vector<float> x = {1.f,  -2.f, NAN,   0.5f,    // NaN -> whole block NaN
                          0.f,  -0.f, 0.f,   0.f,     // zeros
                          1e-35f, -1e-33f, 0.f, 0.f,  // below 2^-100: flushed
                          3.f,  INFINITY, 1.f, 2.f,   // inf -> NaN block
                          -127.f, 63.5f, 64.5f, 0.f,  // ties to even
                          5.f};                       // short last block
  std::vector<float> scales(6);
  std::vector<int8_t> q(x.size());
  quantize_int8(x.data(), x.size(), block, scales.data(), q.data());
  std::vector<float> y(x.size());
  dequantize_int8(scales.data(), q.data(), x.size(), block, y.data());
  for (size_t i = 0; i < 4; ++i) EXPECT_TRUE(std::isnan(y[i])) << i;
  for (size_t i = 4; i < 12; ++i) EXPECT_EQ(y[i], 0.f) << i;
  for (size_t i = 12; i < 16; ++i) EXPECT_TRUE(std::isnan(y[i])) << i;
  EXPECT_EQ(q[16], -127);
  EXPECT_EQ(q[17], 64);  // 63.5 -> 64 (even)
  EXPECT_EQ(q[18], 64);  // 64.5 -> 64 (even)
  EXPECT_EQ(q[20], 127);
  EXPECT_EQ(y[20], 5.f);
}

// Gaussians at block-varying magnitudes, with exact ties (x * L / amax = k + 1/2) mixed in.
std::vector<float> quantize_inputs(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = normal(rng) * std::ldexp(1e-3f, static_cast<int>(i / 700 % 7) - 3);
  for (size_t i = 0; i + 7 < n; i += 97) {
    x[i] = 7.f;  // with amax 7 and L = 7, inv = 1: the next entries are ties for int4
    x[i + 1] = 2.5f;
    x[i + 2] = -0.5f;
    x[i + 3] = 3.5f;
  }
  return x;
}

// Shapes for the blockwise kernels: empty, one, odd and even, around the kernels' 4096-element
// int4 tile, blocks of 1, odd, even, and larger than a tile.
const uint32_t kQuantBlocks[] = {1u, 2u, 3u, 7u, 64u, 255u, 256u, 1000u, 4097u, 5000u};
const size_t kQuantSizes[] = {0, 1, 2, 3, 255, 256, 257, 2049, 4095, 4096, 4097, 12345};

TEST(Quantize, Int8MatchesTheReferenceBitForBit) {
  for (uint32_t block : kQuantBlocks) {
    for (size_t n : kQuantSizes) {
      const auto x = quantize_inputs(n, static_cast<uint32_t>(n * 31 + block));
      const RefQuantized ref = ref_quantize(x.data(), n, block, 127);
      std::vector<float> scales(ref.scales.size() + 1, 123.f);
      std::vector<int8_t> q(n + 1, 99);
      quantize_int8(x.data(), n, block, scales.data(), q.data());
      ASSERT_EQ(scales.back(), 123.f);
      ASSERT_EQ(q.back(), 99);
      for (size_t b = 0; b < ref.scales.size(); ++b) ASSERT_EQ(bits(scales[b]), bits(ref.scales[b]));
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(q[i], ref.q[i]) << "block " << block << " i " << i;
    }
  }
}

TEST(Quantize, Int4MatchesTheReferenceBitForBit) {
  for (uint32_t block : kQuantBlocks) {
    for (size_t n : kQuantSizes) {
      const auto x = quantize_inputs(n, static_cast<uint32_t>(n * 37 + block));
      const RefQuantized ref = ref_quantize(x.data(), n, block, 7);
      const std::vector<uint8_t> want = ref_pack_int4(ref.q);
      ASSERT_EQ(int4_packed_bytes(n), want.size());
      ASSERT_EQ(int8_block_count(n, block), ref.scales.size());
      // Guards after both outputs catch an overrun by a byte or a scale.
      std::vector<float> scales(ref.scales.size() + 1, 123.f);
      std::vector<uint8_t> packed(want.size() + 2, 0xa5);
      quantize_int4(x.data(), n, block, scales.data(), packed.data());
      ASSERT_EQ(scales[ref.scales.size()], 123.f) << "block " << block << " n " << n;
      ASSERT_EQ(packed[want.size()], 0xa5) << "block " << block << " n " << n;
      ASSERT_EQ(packed[want.size() + 1], 0xa5);
      for (size_t b = 0; b < ref.scales.size(); ++b) {
        ASSERT_EQ(bits(scales[b]), bits(ref.scales[b])) << "block " << block << " n " << n;
      }
      for (size_t k = 0; k < want.size(); ++k) {
        ASSERT_EQ(packed[k], want[k]) << "block " << block << " n " << n << " byte " << k;
      }
      // Decodes to q * scale exactly, within half a step of the input, and never writes past n.
      std::vector<float> y(n + 3, 42.f);
      dequantize_int4(scales.data(), packed.data(), n, block, y.data());
      for (size_t i = n; i < n + 3; ++i) ASSERT_EQ(y[i], 42.f) << "overrun at n=" << n;
      for (size_t i = 0; i < n; ++i) {
        const float s = ref.scales[i / block];
        ASSERT_EQ(bits(y[i]), bits(static_cast<float>(ref.q[i]) * s)) << i;
        ASSERT_LE(std::fabs(x[i] - y[i]), s * (0.5f + 1e-5f))
            << "block " << block << " n " << n << " i " << i;
      }
    }
  }
}

// The codec dequantises decode_accumulate's sub-blocks on their own: from any element that is
// a multiple of the block and of 2, a partial decode equals the same slice of the full one.
TEST(Quantize, Int4PartialDequantiseMatchesTheFullOne) {
  const size_t n = 9001;
  for (uint32_t block : {1u, 3u, 128u, 255u, 4097u}) {
    const auto x = quantize_inputs(n, block);
    std::vector<float> scales(int8_block_count(n, block));
    std::vector<uint8_t> packed(int4_packed_bytes(n));
    quantize_int4(x.data(), n, block, scales.data(), packed.data());
    std::vector<float> full(n);
    dequantize_int4(scales.data(), packed.data(), n, block, full.data());
    const size_t unit = block % 2 ? 2 * size_t{block} : block;
    for (size_t k : {0, 1, 2, 5, 17, 40, 1000, 2999, 4500}) {
      const size_t begin = k * unit;
      if (begin >= n) continue;
      for (size_t len : {size_t{1}, unit, size_t{5000}, n}) {
        len = std::min(len, n - begin);
        std::vector<float> part(len);
        dequantize_int4(scales.data() + begin / block, packed.data() + begin / 2, len, block,
                        part.data());
        for (size_t i = 0; i < len; ++i) {
          ASSERT_EQ(bits(part[i]), bits(full[begin + i])) << "block " << block << " at " << begin;
        }
      }
    }
  }
}

// Bytes worked out by hand from the format: odd n, odd block, a block sharing a byte.
TEST(Quantize, Int4PacksOddLengthsAndBlocksExactly) {
  // Block 3: {7, -7, 1} (amax 7: levels 7, -7, 1), {3.5, 0, 0} (amax 3.5: 7, 0, 0), {-2}.
  const std::vector<float> x = {7.f, -7.f, 1.f, 3.5f, 0.f, 0.f, -2.f};
  std::vector<float> scales(4, 9.f);
  std::vector<uint8_t> packed(5, 0xee);
  quantize_int4(x.data(), x.size(), 3, scales.data(), packed.data());
  EXPECT_EQ(scales[0], 1.f);
  EXPECT_EQ(scales[1], 0.5f);
  EXPECT_EQ(scales[2], 2.f / 7.f);
  EXPECT_EQ(scales[3], 9.f);
  // levels 7 -7 | 1 7 | 0 0 | -7 (pad 0): nibbles 0x7 0x9 | 0x1 0x7 | 0x0 0x0 | 0x9 0x0
  EXPECT_EQ(packed[0], 0x97);
  EXPECT_EQ(packed[1], 0x71);
  EXPECT_EQ(packed[2], 0x00);
  EXPECT_EQ(packed[3], 0x09);
  EXPECT_EQ(packed[4], 0xee);
  std::vector<float> y(x.size());
  dequantize_int4(scales.data(), packed.data(), x.size(), 3, y.data());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(y[i], x[i]) << i;  // all exactly representable
  // A nibble pattern the encoder never writes (-8) still decodes without surprises.
  const uint8_t odd[1] = {0x8f};  // levels -1, -8
  const float one = 1.f;
  float z[2];
  dequantize_int4(&one, odd, 2, 2, z);
  EXPECT_EQ(z[0], -1.f);
  EXPECT_EQ(z[1], -8.f);
}

TEST(Quantize, Int4SpecialBlocks) {
  const uint32_t block = 4;
  std::vector<float> x = {1.f,  -2.f, NAN,   0.5f,      // NaN -> whole block NaN
                          0.f,  -0.f, 0.f,   0.f,       // zeros
                          1e-35f, -1e-33f, 0.f, 0.f,    // below 2^-100: flushed
                          3.f,  -INFINITY, 1.f, 2.f,    // inf -> NaN block
                          -7.f, 2.5f, 3.5f, 0.5f,       // ties to even: 2, 4, 0
                          0x1p-99f, -0x1p-99f, 0.f, 0x1p-100f,  // just above the flush
                          5.f};                         // short last block
  const size_t blocks = int8_block_count(x.size(), block);
  std::vector<float> scales(blocks);
  std::vector<uint8_t> packed(int4_packed_bytes(x.size()), 0xff);
  quantize_int4(x.data(), x.size(), block, scales.data(), packed.data());
  std::vector<float> y(x.size());
  dequantize_int4(scales.data(), packed.data(), x.size(), block, y.data());
  EXPECT_TRUE(std::isnan(scales[0]));
  EXPECT_TRUE(std::isnan(scales[3]));
  for (size_t i = 0; i < 4; ++i) EXPECT_TRUE(std::isnan(y[i])) << i;
  for (size_t i = 4; i < 12; ++i) EXPECT_EQ(bits(y[i]), 0u) << i;  // +0, not -0 or garbage
  for (size_t i = 12; i < 16; ++i) EXPECT_TRUE(std::isnan(y[i])) << i;
  EXPECT_EQ(ref_int4_level(packed.data(), 16), -7);
  EXPECT_EQ(ref_int4_level(packed.data(), 17), 2);  // 2.5 -> 2 (even)
  EXPECT_EQ(ref_int4_level(packed.data(), 18), 4);  // 3.5 -> 4 (even)
  EXPECT_EQ(ref_int4_level(packed.data(), 19), 0);  // 0.5 -> 0 (even)
  EXPECT_EQ(y[20], 0x1p-99f);
  EXPECT_EQ(y[21], -0x1p-99f);
  EXPECT_EQ(ref_int4_level(packed.data(), 23), 4);  // 2^-100 * 7 / 2^-99 = 3.5 -> 4
  EXPECT_EQ(ref_int4_level(packed.data(), 24), 7);
  EXPECT_EQ(packed.back() >> 4, 0);  // odd count: the unused high nibble is 0
  EXPECT_EQ(y[24], 5.f);
}

}  // namespace

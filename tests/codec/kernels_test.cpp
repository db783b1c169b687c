// The codec kernels against independent references: every fp16/bf16 pattern, every rounding
// midpoint, the F16C instruction where the CPU has it, odd lengths with guard elements.
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
#include <immintrin.h>
#endif

namespace {

using namespace gradbox::kernels;
using namespace gradbox::codec::testing;

uint32_t bits(float f) { return std::bit_cast<uint32_t>(f); }

std::vector<float> random_bit_patterns(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> out(n);
  for (auto& v : out) v = std::bit_cast<float>(static_cast<uint32_t>(rng()));
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

TEST(HalfConvert, Fp16MatchesF16cInstruction) {
  if (!__builtin_cpu_supports("f16c")) GTEST_SKIP() << "no F16C on this CPU";
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

}  // namespace

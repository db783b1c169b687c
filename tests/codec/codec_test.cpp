// The codec API: round trips per codec against references, error feedback, threads,
// decode_accumulate (rejection of malformed payloads: codec_rejects_test.cpp).
#include "codec/codec.h"

#include <gtest/gtest.h>
#include <zstd.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "codec_test_util.h"
#include "common/bit_cast.h"
#include "common/error.h"
#include "kernels/half_convert.h"
#include "reference.h"

namespace {

using namespace gradbox::codec;
using namespace gradbox::codec::testing;  // the references, and what the codec tests share

TEST(CodecNames, ParseAndName) {
  for (Codec c : kAll) EXPECT_EQ(parse_codec(codec_name(c)), c);
  try {
    parse_codec("fp8");
    FAIL() << "no error";
  } catch (const gradbox::InputError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("'fp8'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("fp32, fp16, bf16, int8, int4)"), std::string::npos) << msg;
  }
}

TEST(CodecOptions, InvalidOptionsAreInputErrors) {
  const float x = 1.f;
  CodecOptions o;
  o.threads = 0;
  EXPECT_THROW(encode(&x, 1, o), gradbox::InputError);
  o = CodecOptions{};
  o.int8_block = 0;
  o.codec = Codec::int8;
  EXPECT_THROW(encode(&x, 1, o), gradbox::InputError);
  o.codec = Codec::int4;
  EXPECT_THROW(encode(&x, 1, o), gradbox::InputError);
  o.int8_block = kChunkElems + 1;
  EXPECT_THROW(encode(&x, 1, o), gradbox::InputError);
  o = CodecOptions{};
  o.zstd_level = 1000;
  EXPECT_THROW(encode(&x, 1, o), gradbox::InputError);
  o = CodecOptions{};
  o.codec = static_cast<Codec>(5);
  EXPECT_THROW(encode(&x, 1, o), gradbox::InputError);
  const uint8_t none[1] = {0};
  float y;
  EXPECT_THROW(decode(none, 1, o, &y, 1), gradbox::InputError);
}

TEST(Codec, EmptyInput) {
  for (Codec c : kAll) {
    const auto o = options(c);
    const auto p = encode(nullptr, 0, o);
    EXPECT_EQ(p.size(), 32u);
    decode(p.data(), p.size(), o, nullptr, 0);
    decode_accumulate(p.data(), p.size(), o, 2.f, nullptr, 0);
  }
}

TEST(Codec, Fp32IsBitExact) {
  for (bool shuffle : {false, true}) {
    for (size_t n : kSizes) {
      std::mt19937 rng(static_cast<uint32_t>(n));
      std::vector<float> x(n);
      for (auto& v : x) v = gradbox::bit_cast<float>(static_cast<uint32_t>(rng()));  // NaNs included
      const uint32_t special[] = {0x80000000u, 0x00000001u, 0x807fffffu, 0x7f800000u,
                                  0xff800000u, 0x7fc00000u, 0x7f800001u, 0xffbadbadu};
      for (size_t i = 0; i < std::min<size_t>(n, 8); ++i) x[i] = gradbox::bit_cast<float>(special[i]);
      const auto y = round_trip(x, options(Codec::fp32, shuffle));
      ASSERT_TRUE(same_bytes(x.data(), y.data(), 4 * n)) << "n=" << n << " shuffle=" << shuffle;
    }
  }
}

// fp16/bf16: every half pattern survives exactly; arbitrary floats round as the reference says.
TEST(Codec, HalfCodecsRoundLikeTheReference) {
  for (Codec c : {Codec::fp16, Codec::bf16}) {
    std::vector<float> x;
    for (uint32_t h = 0; h < 65536; ++h) {
      x.push_back(c == Codec::fp16 ? gradbox::kernels::fp16_bits_to_fp32(static_cast<uint16_t>(h))
                                   : gradbox::kernels::bf16_bits_to_fp32(static_cast<uint16_t>(h)));
    }
    const size_t exact = x.size();
    std::mt19937 rng(9);
    for (int i = 0; i < 200000; ++i) {
      x.push_back(gradbox::bit_cast<float>(static_cast<uint32_t>(rng())));
    }
    for (bool shuffle : {false, true}) {
      const auto y = round_trip(x, options(c, shuffle));
      for (size_t i = 0; i < x.size(); ++i) {
        if (i < exact) {
          ASSERT_EQ(bits(y[i]), bits(x[i])) << codec_name(c) << " pattern " << i;
        }
        const uint16_t want = c == Codec::fp16 ? ref_fp16(x[i]) : ref_bf16(x[i]);
        const uint16_t got = c == Codec::fp16 ? gradbox::kernels::fp32_to_fp16_bits(y[i])
                                              : gradbox::kernels::fp32_to_bf16_bits(y[i]);
        ASSERT_EQ(got, want) << codec_name(c) << " " << std::hexfloat << x[i];
      }
    }
  }
}

TEST(Codec, HalfCodecsRelativeErrorOnGaussians) {
  const auto x = gaussian(100000, 10, 1.f);
  for (auto [c, bound] : {std::pair{Codec::fp16, std::ldexp(1.0, -11)},
                          std::pair{Codec::bf16, std::ldexp(1.0, -8)}}) {
    const auto y = round_trip(x, options(c));
    for (size_t i = 0; i < x.size(); ++i) {
      if (std::fabs(x[i]) < 0x1p-14f) continue;  // fp16 subnormal range: absolute error instead
      ASSERT_LE(std::fabs(static_cast<double>(y[i]) - x[i]) / std::fabs(x[i]), bound)
          << codec_name(c) << " " << x[i];
    }
  }
}

TEST(Codec, NonFiniteInputDecodesNonFinite) {
  std::vector<float> x = gaussian(1000, 11);
  x[10] = NAN;
  x[500] = INFINITY;
  x[900] = 1e6f;  // beyond fp16
  for (Codec c : kAll) {
    const auto y = round_trip(x, options(c));
    EXPECT_TRUE(std::isnan(y[10])) << codec_name(c);
    EXPECT_FALSE(std::isfinite(y[500])) << codec_name(c);
    if (c == Codec::fp16) {
      EXPECT_TRUE(std::isinf(y[900]));
    }
    if (c == Codec::int8 || c == Codec::int4) {
      for (size_t i = 0; i < 512; ++i) EXPECT_TRUE(std::isnan(y[i])) << i;  // whole blocks
      for (size_t i = 512; i < 768; ++i) EXPECT_TRUE(std::isfinite(y[i])) << i;
    }
  }
}

TEST(Codec, QuantisedErrorWithinHalfAScalePerBlock) {
  for (auto [codec, levels] : kQuantised) {
    for (uint32_t block : {1u, 3u, 100u, 255u, 256u, 4096u}) {
      for (size_t n : kSizes) {
        std::vector<float> x = gaussian(n, static_cast<uint32_t>(n + block));
        // Mixed magnitudes so that blocks differ.
        for (size_t i = 0; i < n; ++i) x[i] *= static_cast<float>(1 + (i / 777) % 5);
        if (n > 600) std::fill(x.begin() + 300, x.begin() + 600, 0.f);
        CodecOptions o = options(codec);
        o.int8_block = block;
        const auto y = round_trip(x, o);
        // Blocks restart at each chunk.
        for (size_t begin = 0; begin < n;) {
          const size_t chunk_end = (begin / kChunkElems + 1) * size_t{kChunkElems};
          const size_t end = std::min({n, begin + block, chunk_end});
          float amax = 0;
          for (size_t i = begin; i < end; ++i) amax = std::max(amax, std::fabs(x[i]));
          const float scale = amax / static_cast<float>(levels);
          for (size_t i = begin; i < end; ++i) {
            // Plus the rounding of q * scale: a few ulps of amax.
            ASSERT_LE(std::fabs(x[i] - y[i]), scale * 0.5f + amax * 1e-6f + 1e-12f)
                << codec_name(codec) << " block " << block << " n " << n << " i " << i;
            if (amax == 0) {
              ASSERT_EQ(bits(y[i]), 0u) << "zeros decode to +0: " << codec_name(codec) << " " << i;
            }
          }
          begin = end;
        }
      }
    }
  }
}

// The chunk bytes of an int4 payload, unpacked by hand from Note [Codec payload format]: per
// chunk the reference scales, then the reference nibbles, ceil(elems / 2) bytes.
TEST(Codec, Int4PayloadIsTheDocumentedLayout) {
  for (uint32_t block : {1u, 3u, 255u, 256u}) {
    for (size_t n : {size_t{1}, size_t{2}, size_t{7}, size_t{1001}, 2 * size_t{kChunkElems} + 3}) {
      std::vector<float> x = gaussian(n, static_cast<uint32_t>(3 * n + block));
      CodecOptions o = options(Codec::int4);
      o.int8_block = block;
      const auto p = encode(x.data(), n, o);
      ASSERT_GE(p.size(), 32u);
      EXPECT_EQ(p[5], 4) << "codec id";
      EXPECT_EQ(p[6], 0) << "int4 never sets the shuffle flag";
      uint32_t preamble_block, chunks;
      std::memcpy(&preamble_block, p.data() + 20, 4);
      std::memcpy(&chunks, p.data() + 24, 4);
      EXPECT_EQ(preamble_block, block);
      ASSERT_EQ(chunks, (n + kChunkElems - 1) / kChunkElems);
      size_t offset = 32 + 4 * size_t{chunks};
      for (size_t c = 0; c < chunks; ++c) {
        const size_t begin = c * kChunkElems;
        const size_t elems = std::min<size_t>(kChunkElems, n - begin);
        const RefQuantized ref = ref_quantize(x.data() + begin, elems, block, 7);
        std::vector<uint8_t> want(4 * ref.scales.size());
        std::memcpy(want.data(), ref.scales.data(), want.size());
        const auto nibbles = ref_pack_int4(ref.q);
        ASSERT_EQ(nibbles.size(), (elems + 1) / 2);
        want.insert(want.end(), nibbles.begin(), nibbles.end());
        uint32_t entry;
        std::memcpy(&entry, p.data() + 32 + 4 * c, 4);
        const size_t stored = entry & 0x7fffffffu;
        ASSERT_LE(offset + stored, p.size());
        std::vector<uint8_t> plain;
        if (entry & 0x80000000u) {
          plain.assign(p.begin() + static_cast<long>(offset),
                       p.begin() + static_cast<long>(offset + stored));
        } else {
          plain.resize(want.size() + 16);
          const size_t got = ZSTD_decompress(plain.data(), plain.size(), p.data() + offset, stored);
          ASSERT_FALSE(ZSTD_isError(got)) << ZSTD_getErrorName(got);
          plain.resize(got);
        }
        ASSERT_EQ(plain.size(), want.size()) << "block " << block << " n " << n << " chunk " << c;
        ASSERT_TRUE(plain == want) << "block " << block << " n " << n << " chunk " << c;
        offset += stored;
      }
      EXPECT_EQ(offset, p.size());
    }
  }
}

TEST(Codec, ZerosEncodeSmallAndDecodeToPositiveZero) {
  const size_t n = 100001;
  std::vector<float> x(n, 0.f);
  for (size_t i = 0; i < n; i += 3) x[i] = -0.f;
  for (Codec c : {Codec::fp16, Codec::bf16, Codec::int8, Codec::int4}) {
    const auto p = encode(x.data(), n, options(c));
    EXPECT_LT(p.size(), n / 100) << codec_name(c);
    const auto y = round_trip(x, options(c));
    for (size_t i = 0; i < n; ++i) {
      // The half codecs keep the sign of zero; the blockwise ones decode 0 * scale = +0.
      const uint32_t want = (c == Codec::int8 || c == Codec::int4) ? 0u : bits(x[i]);
      ASSERT_EQ(bits(y[i]), want) << codec_name(c) << " " << i;
    }
  }
}

TEST(Codec, EncodingIsDeterministic) {
  const auto x = gaussian(kChunkElems + 12345, 30);
  for (Codec c : kAll) {
    const auto o = options(c);
    EXPECT_EQ(encode(x.data(), x.size(), o), encode(x.data(), x.size(), o)) << codec_name(c);
  }
}

// encode_into a buffer kept from an earlier file of about the payload's size (the exchange's
// buffer pool holds such) writes in place: no reallocation, though zstd's bound is twice that
// size (a fresh 50 MB buffer's page faults cost more than encoding it); the bytes are a fresh
// encode's. A payload that does not fit grows the buffer.
TEST(Codec, EncodeIntoAKeptBufferOfThePayloadsSizeWritesInPlace) {
  const auto x = gaussian(3 * kChunkElems + 777, 31);
  for (Codec c : kAll) {
    const auto o = options(c);
    const std::vector<uint8_t> fresh = encode(x.data(), x.size(), o);
    std::string kept(fresh.size() + 64, 'k');  // a file of about that size
    kept.shrink_to_fit();
    const char* at = kept.data();
    encode_into(x.data(), x.size(), o, kept);
    EXPECT_EQ(static_cast<const void*>(kept.data()), static_cast<const void*>(at)) << codec_name(c);
    EXPECT_EQ(kept, std::string(fresh.begin(), fresh.end())) << codec_name(c);
    std::string small(16, 'x');
    encode_into(x.data(), x.size(), o, small);
    EXPECT_EQ(small, std::string(fresh.begin(), fresh.end())) << codec_name(c);
  }
}

// Error feedback: sum_t decoded_t = sum_t g_t - residual_T, so the running sums stay within
// one quantisation error of each other, where without feedback a sub-step signal is lost.
struct FeedbackRun {
  double half_scale = 0;   // half a quantisation step of the small elements' blocks
  double worst_track = 0;  // max over steps and elements of |sum g - sum decoded|, with feedback
  double worst_plain = 0;  // the same without feedback, after the last step
  double mean_ef = 0, mean_plain = 0;  // mean over elements of that error after the last step
};

FeedbackRun run_feedback(Codec codec, int levels, int steps) {
  const size_t n = 4096;
  CodecOptions o = options(codec);
  ErrorFeedbackEncoder ef(o);
  std::vector<double> sum_in(n, 0), sum_ef(n, 0), sum_plain(n, 0);
  std::mt19937 rng(12);
  std::normal_distribution<float> noise(0.f, 1e-4f);
  std::vector<float> dec(n);
  FeedbackRun run;
  // One large element per block sets the scale (1 / levels per step); the rest carry a
  // consistent 1e-3 signal, below half a step, plus noise.
  run.half_scale = 0.5 / levels;
  for (int t = 0; t < steps; ++t) {
    std::vector<float> g(n);
    for (size_t i = 0; i < n; ++i) {
      g[i] = (i % 256 == 0) ? 1.f : 1e-3f + noise(rng);
      sum_in[i] += g[i];
    }
    const auto p = ef.encode(g.data(), n);
    decode(p.data(), p.size(), o, dec.data(), n);
    for (size_t i = 0; i < n; ++i) {
      sum_ef[i] += dec[i];
      run.worst_track = std::max(run.worst_track, std::fabs(sum_in[i] - sum_ef[i]));
    }
    const auto q = encode(g.data(), n, o);
    decode(q.data(), q.size(), o, dec.data(), n);
    for (size_t i = 0; i < n; ++i) sum_plain[i] += dec[i];
  }
  for (size_t i = 0; i < n; ++i) {
    const double e_ef = sum_in[i] - sum_ef[i], e_plain = sum_in[i] - sum_plain[i];
    // Exactly the residual, up to float rounding of the per-step sums.
    EXPECT_NEAR(e_ef, ef.residual()[i], 1e-4) << codec_name(codec) << " " << i;
    run.worst_plain = std::max(run.worst_plain, std::fabs(e_plain));
    run.mean_ef += e_ef / n;
    run.mean_plain += e_plain / n;
  }
  return run;
}

TEST(ErrorFeedback, RunningSumTracksTheInputs) {
  const int steps = 300;
  const FeedbackRun r = run_feedback(Codec::int8, 127, steps);
  // The residual never exceeds half a step (the block absmax stays ~1 + 1e-3 + noise).
  EXPECT_LE(r.worst_track, r.half_scale * 1.01);
  // Without feedback the 1e-3 signal is lost every step: 300 * 1e-3 = 0.3 per element.
  EXPECT_GE(r.worst_plain, 0.25);
  EXPECT_GE(std::fabs(r.mean_plain) / (std::fabs(r.mean_ef) + 1e-12), 50.0);
  // Per-step mean error of the feedback path decays like 1/T.
  EXPECT_LE(std::fabs(r.mean_ef) / steps, 1e-5);
}

// int4's step is 18x coarser (1/7 of the block absmax): 1e-3 is 1/143 of a step, and only the
// residual carries it from step to step.
TEST(ErrorFeedback, Int4RunningSumTracksTheInputs) {
  const int steps = 300;
  const FeedbackRun r = run_feedback(Codec::int4, 7, steps);
  EXPECT_LE(r.worst_track, r.half_scale * 1.01);
  EXPECT_GE(r.worst_plain, 0.25);
  // After 300 steps the feedback path has sent 2 steps of 1/7 for the 0.3 of signal: it is
  // 0.3 - 2/7 = 0.014 behind, the plain path 0.3.
  EXPECT_GE(std::fabs(r.mean_plain) / (std::fabs(r.mean_ef) + 1e-12), 10.0);
  EXPECT_LE(std::fabs(r.mean_ef), r.half_scale);
}

TEST(ErrorFeedback, ResidualRestoreAndNonFinite) {
  for (Codec codec : {Codec::int8, Codec::int4}) {
    CodecOptions o = options(codec);
    ErrorFeedbackEncoder a(o), b(o);
    const auto g1 = gaussian(1000, 13), g2 = gaussian(1000, 14);
    a.encode(g1.data(), g1.size());
    b.set_residual(a.residual());
    EXPECT_EQ(a.encode(g2.data(), g2.size()), b.encode(g2.data(), g2.size())) << codec_name(codec);
    EXPECT_THROW(b.encode(g2.data(), 999), gradbox::InputError);
  }
  const auto g1 = gaussian(1000, 13);
  std::vector<float> bad = g1;
  bad[3] = INFINITY;
  for (Codec codec : {Codec::fp16, Codec::int4}) {
    ErrorFeedbackEncoder c(options(codec));
    const auto p = c.encode(bad.data(), bad.size());
    for (float r : c.residual()) ASSERT_TRUE(std::isfinite(r)) << codec_name(codec);
    // The payload itself still carries the overflow.
    std::vector<float> y(bad.size());
    decode(p.data(), p.size(), options(codec), y.data(), y.size());
    EXPECT_FALSE(std::isfinite(y[3])) << codec_name(codec);
  }
}

// The one-pass error feedback (residual from each chunk's plain bytes) is the definition,
// bit for bit: payload = encode(g + r), r' = (g + r) - decode(payload), non-finite -> 0. Over
// several chunks (a short last one), one and three threads, every codec; and encode_into into a
// reused buffer writes encode()'s bytes.
TEST(ErrorFeedback, OnePassEqualsEncodeThenDecode) {
  const size_t n = 2 * kChunkElems + 4097;
  std::vector<float> g = gaussian(n, 21), r0 = gaussian(n, 22);
  for (size_t i = 0; i < n; ++i) r0[i] *= 1e-3f;
  g[5] = INFINITY;
  g[kChunkElems + 7] = NAN;
  std::string reused;
  for (Codec codec : kAll) {
    for (int threads : {1, 3}) {
      const CodecOptions o = options(codec, true, threads);
      std::vector<float> s(n);
      for (size_t i = 0; i < n; ++i) s[i] = g[i] + r0[i];
      const std::vector<uint8_t> expected = encode(s.data(), n, o);
      std::vector<float> decoded(n);
      decode(expected.data(), expected.size(), o, decoded.data(), n);
      std::vector<float> residual = r0;
      encode_with_feedback(g.data(), residual.data(), n, o, reused);
      ASSERT_EQ(reused.size(), expected.size()) << codec_name(codec) << " threads " << threads;
      EXPECT_TRUE(same_bytes(reused.data(), expected.data(), expected.size())) << codec_name(codec) << " threads " << threads;
      size_t differ = 0;
      for (size_t i = 0; i < n; ++i) {
        const float e = s[i] - decoded[i];
        differ += bits(residual[i]) != bits(std::isfinite(e) ? e : 0.f);
      }
      EXPECT_EQ(differ, 0u) << codec_name(codec) << " threads " << threads;
      encode_into(s.data(), n, o, reused);
      ASSERT_EQ(reused.size(), expected.size());
      EXPECT_TRUE(same_bytes(reused.data(), expected.data(), expected.size())) << codec_name(codec) << " threads " << threads;
    }
  }
}

TEST(Codec, DecodeAccumulateEqualsDecodeThenAxpy) {
  for (Codec c : kAll) {
    for (bool shuffle : {false, true}) {
      for (size_t n : kSizes) {
        const auto o = options(c, shuffle);
        const auto x = gaussian(n, 15);
        const auto p = encode(x.data(), n, o);
        const auto y = decoded(p, o, n);
        const float w = 0.37f;
        std::vector<float> acc = gaussian(n, 16), want = acc;
        for (size_t i = 0; i < n; ++i) want[i] += w * y[i];
        decode_accumulate(p.data(), p.size(), o, w, acc.data(), n);
        ASSERT_TRUE(same_bytes(acc.data(), want.data(), 4 * n))
            << codec_name(c) << " shuffle " << shuffle << " n " << n;
      }
    }
  }
}

// The measured variant sums exactly as decode_accumulate does (bit for bit, on 1 and 3 threads)
// and returns the decoded values' sum of squares; a NaN among them makes it NaN, not a norm.
TEST(Codec, DecodeAccumulateMeasuredSumsAlikeAndMeasuresTheDecodedValues) {
  for (Codec c : kAll) {
    for (int threads : {1, 3}) {
      for (size_t n : kSizes) {
        auto o = options(c, true);
        o.threads = threads;
        const auto x = gaussian(n, 17);
        const auto p = encode(x.data(), n, o);
        const auto y = decoded(p, o, n);
        std::vector<float> plain = gaussian(n, 18), measured = plain;
        decode_accumulate(p.data(), p.size(), o, 0.61f, plain.data(), n);
        const double squares = decode_accumulate_measured(p.data(), p.size(), o, 0.61f, measured.data(), n);
        const std::string what = gradbox::str(codec_name(c), " threads ", threads, " n ", n);
        ASSERT_TRUE(same_bytes(plain.data(), measured.data(), 4 * n)) << what;
        double want = 0;
        for (float v : y) want += static_cast<double>(v) * v;
        EXPECT_NEAR(squares, want, 1e-12 * want + 1e-300) << what;
        EXPECT_NEAR(squares, sum_of_squares(y.data(), n), 1e-12 * want + 1e-300) << what;
      }
    }
  }
  std::vector<float> x = gaussian(5000, 19);
  x[4321] = std::numeric_limits<float>::quiet_NaN();
  const auto o = options(Codec::fp16, true);
  const auto p = encode(x.data(), x.size(), o);
  std::vector<float> sum(x.size(), 0.0f);
  EXPECT_FALSE(std::isfinite(decode_accumulate_measured(p.data(), p.size(), o, 0.5f, sum.data(), sum.size())));
}

// decode_accumulate works through sub-blocks of whole blocks; for int4 with an odd block they
// must also start on a byte. Odd and even blocks, sub-blocks of several blocks, blocks longer
// than a sub-block, and a chunk boundary.
TEST(Codec, DecodeAccumulateWithOddQuantisedBlocks) {
  for (auto [codec, levels] : kQuantised) {
    for (uint32_t block : {1u, 3u, 255u, 257u, 16383u, 20001u}) {
      for (size_t n : {size_t{1001}, size_t{70001}, size_t{kChunkElems} + 40001}) {
        CodecOptions o = options(codec);
        o.int8_block = block;
        const auto x = gaussian(n, 40 + block);
        const auto p = encode(x.data(), n, o);
        const auto y = decoded(p, o, n);
        const float w = -1.25f;
        std::vector<float> acc = gaussian(n, 41), want = acc;
        for (size_t i = 0; i < n; ++i) want[i] += w * y[i];
        decode_accumulate(p.data(), p.size(), o, w, acc.data(), n);
        ASSERT_TRUE(same_bytes(acc.data(), want.data(), 4 * n))
            << codec_name(codec) << " block " << block << " n " << n;
      }
    }
  }
}

TEST(Codec, ThreadsDoNotChangeTheBytes) {
  const size_t n = 3 * static_cast<size_t>(kChunkElems) + 12345;
  const auto x = gaussian(n, 17);
  for (Codec c : kAll) {
    const auto p1 = encode(x.data(), n, options(c, true, 1));
    const auto p4 = encode(x.data(), n, options(c, true, 4));
    ASSERT_EQ(p1, p4) << codec_name(c);
    const auto y1 = decoded(p1, options(c, true, 1), n);
    const auto y4 = decoded(p1, options(c, true, 4), n);
    ASSERT_TRUE(same_bytes(y1.data(), y4.data(), 4 * n)) << codec_name(c);
  }
}

}  // namespace

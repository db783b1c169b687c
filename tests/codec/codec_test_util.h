#pragma once
// What the codec tests share (codec_test.cpp, codec_rejects_test.cpp): option sets, inputs,
// checked decodes, and the size and codec classes every test walks.
#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "codec/codec.h"
#include "common/bit_cast.h"

namespace gradbox::codec::testing {

inline uint32_t bits(float f) { return gradbox::bit_cast<uint32_t>(f); }

// memcmp that accepts the null data() of empty vectors.
inline bool same_bytes(const void* a, const void* b, size_t size) {
  return size == 0 || std::memcmp(a, b, size) == 0;
}

inline CodecOptions options(Codec codec, bool shuffle = true, int threads = 1) {
  CodecOptions o;
  o.codec = codec;
  o.shuffle = shuffle;
  o.threads = threads;
  return o;
}

inline std::vector<float> gaussian(size_t n, uint32_t seed, float sigma = 1e-3f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.f, sigma);
  std::vector<float> out(n);
  for (auto& v : out) v = normal(rng);
  return out;
}

inline std::vector<float> decoded(const std::vector<uint8_t>& p, const CodecOptions& o, size_t n) {
  std::vector<float> out(n + 4, 777.f);
  decode(p.data(), p.size(), o, out.data(), n);
  for (size_t i = n; i < n + 4; ++i) EXPECT_EQ(out[i], 777.f) << "decode wrote past n";
  out.resize(n);
  return out;
}

inline std::vector<float> round_trip(const std::vector<float>& x, const CodecOptions& o) {
  return decoded(encode(x.data(), x.size(), o), o, x.size());
}

// Every size class: empty, tiny, odd, one chunk plus a tail.
inline const size_t kSizes[] = {0, 1, 7, 1000, kChunkElems + 3};

inline const Codec kAll[] = {Codec::fp32, Codec::fp16, Codec::bf16, Codec::int8, Codec::int4};

// The blockwise codecs and their largest level.
inline const std::pair<Codec, int> kQuantised[] = {{Codec::int8, 127}, {Codec::int4, 7}};

}  // namespace gradbox::codec::testing

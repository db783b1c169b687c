// The codec refuses every malformed payload we can think of: truncations, corrupt bytes, a
// caller's wrong expectations, decompression bombs, garbage. Never a crash, always a CodecError.
#include <gtest/gtest.h>
#include <zstd.h>

#include <cstring>
#include <string>
#include <vector>

#include "codec/codec.h"
#include "codec_test_util.h"
#include "common/error.h"

namespace {

using namespace gradbox::codec;
using namespace gradbox::codec::testing;

// Decoding must either succeed or throw CodecError; anything else fails the test.
bool decodes(const std::vector<uint8_t>& p, const CodecOptions& o, size_t n,
             std::string* why = nullptr) {
  std::vector<float> out(n);
  try {
    decode(p.data(), p.size(), o, out.data(), n);
    std::vector<float> acc(n, 1.f);
    decode_accumulate(p.data(), p.size(), o, 1.f, acc.data(), n);
    return true;
  } catch (const CodecError& e) {
    if (why) *why = e.what();
    return false;
  }
}

TEST(CodecRejects, EveryTruncation) {
  for (Codec c : kAll) {
    const auto o = options(c);
    const auto x = gaussian(1000, 18);
    const auto p = encode(x.data(), x.size(), o);
    ASSERT_TRUE(decodes(p, o, x.size()));
    for (size_t len = 0; len < p.size(); ++len) {
      const std::vector<uint8_t> cut(p.begin(), p.begin() + static_cast<long>(len));
      ASSERT_FALSE(decodes(cut, o, x.size())) << codec_name(c) << " prefix " << len;
    }
  }
  const size_t n = 2 * static_cast<size_t>(kChunkElems) + 5;
  const auto x = gaussian(n, 19);
  const auto o = options(Codec::fp16);
  const auto p = encode(x.data(), n, o);
  for (size_t len : {size_t{0}, size_t{31}, size_t{33}, size_t{44}, p.size() / 3, p.size() / 2,
                     p.size() - 100, p.size() - 1}) {
    const std::vector<uint8_t> cut(p.begin(), p.begin() + static_cast<long>(len));
    ASSERT_FALSE(decodes(cut, o, n)) << "prefix " << len;
  }
}

TEST(CodecRejects, CorruptBytesNeverCrash) {
  for (Codec c : kAll) {
    const auto o = options(c);
    const auto x = gaussian(1500, 20);
    const auto p = encode(x.data(), x.size(), o);
    for (size_t pos = 0; pos < p.size(); ++pos) {
      for (uint8_t flip : {0x01, 0x80, 0xff}) {
        if (pos >= 64 && flip != 0x80) continue;  // inside the data: one flip per byte
        auto bad = p;
        bad[pos] ^= flip;
        const bool ok = decodes(bad, o, x.size());
        // Every preamble and table byte is checked; inside zstd data a flip may still decode
        // (the file layer's checksum catches those).
        if (pos < 36) {
          EXPECT_FALSE(ok) << codec_name(c) << " byte " << pos << " ^ " << int{flip};
        }
      }
    }
  }
}

TEST(CodecRejects, MismatchedCallerExpectations) {
  const auto x = gaussian(1000, 21);
  const auto p = encode(x.data(), x.size(), options(Codec::fp16));
  std::string why;
  EXPECT_FALSE(decodes(p, options(Codec::fp16), 999, &why));
  EXPECT_NE(why.find("holds 1000 elements, expected 999"), std::string::npos) << why;
  EXPECT_FALSE(decodes(p, options(Codec::fp16), 1001));
  EXPECT_FALSE(decodes(p, options(Codec::bf16), 1000, &why));
  EXPECT_NE(why.find("codec fp16, expected bf16"), std::string::npos) << why;
  EXPECT_FALSE(decodes(p, options(Codec::fp16, false), 1000, &why));
  EXPECT_NE(why.find("shuffle"), std::string::npos) << why;
  const auto q = encode(x.data(), x.size(), options(Codec::int8));
  CodecOptions other = options(Codec::int8);
  other.int8_block = 128;
  EXPECT_FALSE(decodes(q, other, 1000, &why));
  EXPECT_NE(why.find("int8 block 256, expected 128"), std::string::npos) << why;
  const auto q4 = encode(x.data(), x.size(), options(Codec::int4));
  CodecOptions other4 = options(Codec::int4);
  other4.int8_block = 255;
  EXPECT_FALSE(decodes(q4, other4, 1000, &why));
  EXPECT_NE(why.find("int4 block 256, expected 255"), std::string::npos) << why;
  EXPECT_FALSE(decodes(q, options(Codec::int4), 1000, &why));
  EXPECT_NE(why.find("codec int8, expected int4"), std::string::npos) << why;
  EXPECT_FALSE(decodes(q4, options(Codec::int8), 1000, &why));
  EXPECT_NE(why.find("codec int4, expected int8"), std::string::npos) << why;
  EXPECT_FALSE(decodes(q4, options(Codec::int4), 999, &why));
  EXPECT_NE(why.find("holds 1000 elements, expected 999"), std::string::npos) << why;
  // The shuffle option does not reach an int4 payload: written and read either way alike.
  EXPECT_EQ(q4, encode(x.data(), x.size(), options(Codec::int4, false)));
  EXPECT_TRUE(decodes(q4, options(Codec::int4, false), 1000));
  // A codec id past the last one.
  auto future = q4;
  future[5] = 5;
  EXPECT_FALSE(decodes(future, options(Codec::int4), 1000, &why));
  EXPECT_NE(why.find("unknown codec id 5"), std::string::npos) << why;
  auto trailing = p;
  trailing.push_back(0);
  EXPECT_FALSE(decodes(trailing, options(Codec::fp16), 1000, &why));
  EXPECT_NE(why.find("1 trailing bytes"), std::string::npos) << why;
}

// A chunk replaced by a valid zstd frame of 256 MiB of zeros (a few KiB compressed): rejected
// from its declared content size, before anything is decompressed or allocated.
TEST(CodecRejects, DecompressionBomb) {
  const size_t n = 100000;
  const auto x = gaussian(n, 22);
  const auto o = options(Codec::fp16);
  const auto p = encode(x.data(), n, o);
  const size_t bomb_bytes = size_t{256} << 20;
  std::vector<uint8_t> frame(ZSTD_compressBound(1 << 20));
  // Streamed from a 1 MiB buffer of zeros so the test never holds 256 MiB.
  ZSTD_CCtx* cctx = ZSTD_createCCtx();
  ZSTD_CCtx_setPledgedSrcSize(cctx, bomb_bytes);
  std::vector<uint8_t> zeros(1 << 20, 0);
  ZSTD_outBuffer out{frame.data(), frame.size(), 0};
  for (size_t done = 0; done < bomb_bytes; done += zeros.size()) {
    ZSTD_inBuffer in{zeros.data(), zeros.size(), 0};
    const bool last = done + zeros.size() == bomb_bytes;
    size_t r;
    do {
      r = ZSTD_compressStream2(cctx, &out, &in, last ? ZSTD_e_end : ZSTD_e_continue);
      ASSERT_FALSE(ZSTD_isError(r));
    } while (last ? r != 0 : in.pos < in.size);
  }
  ZSTD_freeCCtx(cctx);
  frame.resize(out.pos);
  ASSERT_LT(frame.size(), 2 * n);  // below the chunk's plain size: passes the table check
  ASSERT_EQ(ZSTD_getFrameContentSize(frame.data(), frame.size()), bomb_bytes);
  std::vector<uint8_t> forged(p.begin(), p.begin() + 36);
  const uint32_t stored = static_cast<uint32_t>(frame.size());
  std::memcpy(forged.data() + 32, &stored, 4);
  forged.insert(forged.end(), frame.begin(), frame.end());
  std::string why;
  EXPECT_FALSE(decodes(forged, o, n, &why));
  EXPECT_NE(why.find("declares 268435456 bytes, expected 200000"), std::string::npos) << why;

  // A preamble claiming a huge element count with tiny chunks: refused from the table size.
  auto huge = encode(nullptr, 0, o);
  const uint64_t big_n = uint64_t{1} << 40;
  std::memcpy(huge.data() + 8, &big_n, 8);
  std::vector<float> one(1);
  EXPECT_THROW(decode(huge.data(), huge.size(), o, one.data(), 1), CodecError);
}

// int4 plain sizes follow the element count to the byte: a chunk of 1000 elements (4 scales
// + 500 bytes) in the place of one of 1001 (4 scales + 501 bytes) is refused from its frame.
TEST(CodecRejects, Int4FrameOneByteShort) {
  std::vector<float> x(1001);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 4) - 1.5f;  // compresses
  const auto o = options(Codec::int4);
  const auto shorter = encode(x.data(), 1000, o);
  const auto p = encode(x.data(), 1001, o);
  uint32_t entry;
  std::memcpy(&entry, shorter.data() + 32, 4);
  ASSERT_EQ(entry & 0x80000000u, 0u) << "the test needs a zstd frame";
  std::vector<uint8_t> forged(p.begin(), p.begin() + 36);
  std::memcpy(forged.data() + 32, &entry, 4);
  forged.insert(forged.end(), shorter.begin() + 36, shorter.end());
  std::string why;
  EXPECT_FALSE(decodes(forged, o, 1001, &why));
  EXPECT_NE(why.find("declares 516 bytes, expected 517"), std::string::npos) << why;
}

TEST(CodecRejects, GarbageAndWrongMagic) {
  const auto o = options(Codec::fp32);
  std::vector<uint8_t> junk(100, 0x42);
  std::string why;
  EXPECT_FALSE(decodes(junk, o, 10, &why));
  EXPECT_NE(why.find("magic"), std::string::npos) << why;
}

}  // namespace

#include "codec/payload_format.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "common/error.h"
#include "kernels/quantize.h"

namespace gradbox::codec {
namespace {

static_assert(std::endian::native == std::endian::little, "the payload is little-endian");

constexpr uint8_t kMagic[4] = {'G', 'B', 'C', 'Z'};
constexpr uint8_t kVersion = 1;
constexpr uint8_t kFlagShuffle = 1;

template <class T>
void put(uint8_t* p, T v) {
  std::memcpy(p, &v, sizeof v);
}
template <class T>
T get(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

[[noreturn]] void fail(const std::string& why) {
  throw CodecError("codec payload: " + why);
}

}  // namespace

size_t PayloadLayout::chunk_size(size_t c) const {
  return std::min<size_t>(chunk_elems, n - chunk_begin(c));
}

size_t PayloadLayout::plain_bytes(size_t elems) const {
  switch (codec) {
    case Codec::fp32: return 4 * elems;
    case Codec::fp16:
    case Codec::bf16: return 2 * elems;
    case Codec::int8: return 4 * kernels::int8_block_count(elems, block) + elems;
    case Codec::int4:
      return 4 * kernels::int8_block_count(elems, block) + kernels::int4_packed_bytes(elems);
  }
  GB_CHECK(false, "codec ", static_cast<int>(codec));
}

PayloadLayout make_layout(const CodecOptions& opt, size_t n) {
  PayloadLayout l;
  l.codec = opt.codec;
  l.shuffle = opt.shuffle && !is_quantised(opt.codec);
  l.block = is_quantised(opt.codec) ? opt.int8_block : 0;
  l.n = n;
  l.chunk_elems = kChunkElems;
  l.chunks = (n + kChunkElems - 1) / kChunkElems;
  return l;
}

std::vector<uint8_t> write_preamble(const PayloadLayout& l,
                                    const std::vector<uint32_t>& stored_sizes) {
  GB_CHECK(stored_sizes.size() == l.chunks, stored_sizes.size(), " vs ", l.chunks);
  std::vector<uint8_t> out(kPreambleBytes + 4 * stored_sizes.size(), 0);
  uint8_t* p = out.data();
  std::memcpy(p, kMagic, 4);
  p[4] = kVersion;
  p[5] = static_cast<uint8_t>(l.codec);
  p[6] = l.shuffle ? kFlagShuffle : 0;
  put<uint64_t>(p + 8, l.n);
  put<uint32_t>(p + 16, l.chunk_elems);
  put<uint32_t>(p + 20, l.block);
  put<uint32_t>(p + 24, static_cast<uint32_t>(l.chunks));
  for (size_t c = 0; c < stored_sizes.size(); ++c) {
    put<uint32_t>(p + kPreambleBytes + 4 * c, stored_sizes[c]);
  }
  return out;
}

std::vector<ChunkRef> read_preamble(const uint8_t* payload, size_t size,
                                    const PayloadLayout& expected, PayloadLayout& l) {
  if (size < kPreambleBytes) {
    fail(str("truncated: ", size, " bytes, the preamble alone is ", kPreambleBytes));
  }
  const uint8_t* p = payload;
  if (std::memcmp(p, kMagic, 4) != 0) fail("bad magic (not a gradbox codec payload)");
  if (p[4] != kVersion) {
    fail(str("format version ", int{p[4]}, ", this build reads ", int{kVersion}));
  }
  if (p[5] > static_cast<uint8_t>(Codec::int4)) fail(str("unknown codec id ", int{p[5]}));
  l.codec = static_cast<Codec>(p[5]);
  if (p[6] & ~kFlagShuffle) fail(str("unknown flags 0x", std::hex, int{p[6]}));
  l.shuffle = (p[6] & kFlagShuffle) != 0;
  if (p[7] != 0 || get<uint32_t>(p + 28) != 0) fail("reserved preamble bytes are not zero");
  l.n = get<uint64_t>(p + 8);
  l.chunk_elems = get<uint32_t>(p + 16);
  l.block = get<uint32_t>(p + 20);
  l.chunks = get<uint32_t>(p + 24);

  if (l.codec != expected.codec) {
    fail(str("written with codec ", codec_name(l.codec), ", expected ",
             codec_name(expected.codec)));
  }
  if (l.shuffle != expected.shuffle) {
    fail(str("written ", l.shuffle ? "with" : "without", " byte shuffle, expected ",
             expected.shuffle ? "with" : "without"));
  }
  if (l.block != expected.block) {
    fail(str(codec_name(l.codec), " block ", l.block, ", expected ", expected.block));
  }
  if (l.n != expected.n) fail(str("holds ", l.n, " elements, expected ", expected.n));
  if (!std::has_single_bit(l.chunk_elems) || l.chunk_elems > kMaxChunkElems) {
    fail(str("chunk size ", l.chunk_elems, " elements: not a power of two up to ", kMaxChunkElems));
  }
  const uint64_t want_chunks = (l.n + l.chunk_elems - 1) / l.chunk_elems;
  if (l.chunks != want_chunks) {
    fail(str(l.chunks, " chunks for ", l.n, " elements of ", l.chunk_elems,
             " per chunk; expected ", want_chunks));
  }
  const size_t body = size - kPreambleBytes;
  if (l.chunks > body / 4) {
    fail(str("truncated: the chunk table needs ", 4 * l.chunks, " bytes, ", body, " left"));
  }
  std::vector<ChunkRef> refs(l.chunks);
  size_t offset = kPreambleBytes + 4 * l.chunks;
  for (size_t c = 0; c < l.chunks; ++c) {
    const uint32_t entry = get<uint32_t>(p + kPreambleBytes + 4 * c);
    ChunkRef& r = refs[c];
    r.raw = (entry & kStoredRaw) != 0;
    r.stored = entry & ~kStoredRaw;
    r.offset = offset;
    const size_t plain = l.plain_bytes(l.chunk_size(c));
    // encode() stores a chunk raw unless zstd makes it smaller.
    if (r.raw ? r.stored != plain : (r.stored == 0 || r.stored >= plain)) {
      fail(str("chunk ", c, ": stored size ", r.stored, (r.raw ? " raw" : " compressed"),
               " for ", plain, " plain bytes"));
    }
    if (r.stored > size - offset) {
      fail(str("truncated: chunk ", c, " needs bytes [", offset, ", ", offset + r.stored,
               "), the payload has ", size));
    }
    offset += r.stored;
  }
  if (offset != size) fail(str(size - offset, " trailing bytes after the last chunk"));
  return refs;
}

}  // namespace gradbox::codec

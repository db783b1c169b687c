#pragma once
// The preamble and chunk table of a codec payload (Note [Codec payload format] in codec.h):
// writing them, and reading them back with every size checked before anything is allocated.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "codec/codec.h"

namespace gradbox::codec {

inline constexpr size_t kPreambleBytes = 32;
inline constexpr uint32_t kStoredRaw = 0x80000000u;

// What the preamble says; fixed by (n, options) on both sides.
struct PayloadLayout {
  Codec codec = Codec::fp32;
  bool shuffle = false;     // effective: never for int8 and int4
  uint32_t block = 0;       // int8/int4 block, 0 for the other codecs
  uint64_t n = 0;
  uint32_t chunk_elems = kChunkElems;
  uint64_t chunks = 0;

  size_t chunk_begin(size_t c) const { return c * static_cast<size_t>(chunk_elems); }
  size_t chunk_size(size_t c) const;     // elements in chunk c
  size_t plain_bytes(size_t elems) const;  // bytes of a chunk of `elems` elements before zstd
};

// int8 and int4: blockwise absmax, no byte planes, a block size in the preamble.
inline bool is_quantised(Codec c) { return c == Codec::int8 || c == Codec::int4; }

PayloadLayout make_layout(const CodecOptions& opt, size_t n);

// One chunk as stored: where it starts in the payload, its stored size, raw or zstd.
struct ChunkRef {
  size_t offset = 0;
  size_t stored = 0;
  bool raw = false;
};

// Preamble + table for `layout`, with the stored chunk sizes (kStoredRaw or-ed in).
std::vector<uint8_t> write_preamble(const PayloadLayout& layout,
                                    const std::vector<uint32_t>& stored_sizes);

// Checks the preamble against `expected` (built from the caller's n and options) and the table
// against `size`: the chunks must tile the rest of the payload exactly. CodecError otherwise.
std::vector<ChunkRef> read_preamble(const uint8_t* payload, size_t size,
                                    const PayloadLayout& expected, PayloadLayout& actual);

}  // namespace gradbox::codec

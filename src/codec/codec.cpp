#include "codec/codec.h"

#include <zstd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <numeric>
#include <thread>

#include "codec/payload_format.h"
#include "common/error.h"
#include "kernels/byte_shuffle.h"
#include "kernels/half_convert.h"
#include "kernels/quantize.h"

namespace gradbox::codec {
namespace {

using kernels::HalfKind;

constexpr size_t kSubBlockElems = 16384;  // decode_accumulate converts this many at a time

HalfKind half_kind(Codec c) { return c == Codec::fp16 ? HalfKind::fp16 : HalfKind::bf16; }

void validate(const CodecOptions& opt) {
  GB_REQUIRE(static_cast<uint8_t>(opt.codec) <= static_cast<uint8_t>(Codec::int4),
             "codec options: unknown codec id ", static_cast<int>(opt.codec));
  GB_REQUIRE(opt.zstd_level >= ZSTD_minCLevel() && opt.zstd_level <= ZSTD_maxCLevel(),
             "codec options: zstd level ", opt.zstd_level, " outside [", ZSTD_minCLevel(), ", ",
             ZSTD_maxCLevel(), "]");
  GB_REQUIRE(opt.int8_block >= 1 && opt.int8_block <= kChunkElems,
             "codec options: int8_block (the int8/int4 block) ", opt.int8_block, " outside [1, ",
             kChunkElems, "]");
  GB_REQUIRE(opt.threads >= 1, "codec options: threads ", opt.threads, " < 1");
}

struct CCtxDeleter {
  void operator()(ZSTD_CCtx* c) const { ZSTD_freeCCtx(c); }
};
struct DCtxDeleter {
  void operator()(ZSTD_DCtx* c) const { ZSTD_freeDCtx(c); }
};

// Runs fn(chunk, worker) for every chunk on min(threads, chunks) threads, each worker with
// its own state. The first error by chunk index is rethrown, so which error the caller sees
// does not depend on scheduling.
template <class Worker, class Fn>
void for_each_chunk(size_t chunks, int threads, std::vector<Worker>& workers, Fn fn) {
  const size_t nthreads = std::max<size_t>(1, std::min<size_t>(threads, chunks));
  workers.resize(nthreads);
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex mu;
  size_t error_chunk = SIZE_MAX;
  std::exception_ptr error;
  auto run = [&](size_t w) {
    for (size_t c; !failed.load(std::memory_order_relaxed) && (c = next.fetch_add(1)) < chunks;) {
      try {
        fn(c, workers[w]);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (c < error_chunk) {
          error_chunk = c;
          error = std::current_exception();
        }
        failed = true;
      }
    }
  };
  if (nthreads == 1) {
    run(0);
  } else {
    std::vector<std::thread> pool;
    pool.reserve(nthreads - 1);
    for (size_t w = 1; w < nthreads; ++w) pool.emplace_back(run, w);
    run(0);
    for (auto& t : pool) t.join();
  }
  if (error) std::rethrow_exception(error);
}

// ---- encode ----

struct EncodeWorker {
  std::unique_ptr<ZSTD_CCtx, CCtxDeleter> cctx;
  std::vector<uint8_t> plain;
  std::vector<float> values;   // error feedback: g + r of the chunk
  std::vector<float> decoded;  // error feedback: a sub-block of what the chunk decodes to
  // zstd's output bound, reused across chunks: a fresh zero-filled vector per chunk cost more
  // than the conversion (memset plus page faults).
  std::unique_ptr<uint8_t[]> bound;
  size_t bound_size = 0;
  void reserve_bound(size_t bytes) {
    if (bound_size >= bytes) return;
    bound.reset(new uint8_t[bytes]);
    bound_size = bytes;
  }
};

// The chunk's plain bytes (Note [Codec payload format]); may point into src for fp32.
const uint8_t* to_plain(const PayloadLayout& l, const float* src, size_t elems,
                        std::vector<uint8_t>& buf) {
  const size_t bytes = l.plain_bytes(elems);
  if (l.codec == Codec::fp32 && !l.shuffle) return reinterpret_cast<const uint8_t*>(src);
  buf.resize(bytes);
  uint8_t* p = buf.data();
  switch (l.codec) {
    case Codec::fp32:
      kernels::byte_shuffle(src, elems, 4, p, elems);
      break;
    case Codec::fp16:
    case Codec::bf16:
      if (l.shuffle) {
        kernels::float_to_half_planes(half_kind(l.codec), src, elems, p, p + elems);
      } else {
        kernels::float_to_half(half_kind(l.codec), src, elems, reinterpret_cast<uint16_t*>(p));
      }
      break;
    case Codec::int8: {
      const size_t blocks = kernels::int8_block_count(elems, l.block);
      kernels::quantize_int8(src, elems, l.block, reinterpret_cast<float*>(p),
                             reinterpret_cast<int8_t*>(p + 4 * blocks));
      break;
    }
    case Codec::int4: {
      const size_t blocks = kernels::int8_block_count(elems, l.block);
      kernels::quantize_int4(src, elems, l.block, reinterpret_cast<float*>(p), p + 4 * blocks);
      break;
    }
  }
  return p;
}

// ---- decode ----

struct DecodeWorker {
  std::unique_ptr<ZSTD_DCtx, DCtxDeleter> dctx;
  std::vector<uint8_t> plain;
  std::vector<float> scratch;
};

[[noreturn]] void chunk_fail(size_t c, const std::string& why) {
  throw CodecError(str("codec payload: chunk ", c, ": ", why));
}

// Decompresses chunk c into exactly `plain` bytes at dst, after checking that the frame says so.
void decompress_chunk(const uint8_t* src, const ChunkRef& r, size_t c, size_t plain, uint8_t* dst,
                      DecodeWorker& w) {
  if (r.raw) {
    std::memcpy(dst, src + r.offset, plain);
    return;
  }
  const uint8_t* frame = src + r.offset;
  const unsigned long long content = ZSTD_getFrameContentSize(frame, r.stored);
  if (content == ZSTD_CONTENTSIZE_ERROR) chunk_fail(c, "not a zstd frame");
  if (content == ZSTD_CONTENTSIZE_UNKNOWN) chunk_fail(c, "zstd frame without a content size");
  if (content != plain) {
    chunk_fail(c, str("zstd frame declares ", content, " bytes, expected ", plain));
  }
  const size_t frame_size = ZSTD_findFrameCompressedSize(frame, r.stored);
  if (ZSTD_isError(frame_size)) {
    chunk_fail(c, str("corrupt zstd frame: ", ZSTD_getErrorName(frame_size)));
  }
  if (frame_size != r.stored) {
    chunk_fail(c, str("zstd frame is ", frame_size, " bytes, the table says ", r.stored));
  }
  if (!w.dctx) {
    w.dctx.reset(ZSTD_createDCtx());
    GB_CHECK(w.dctx, "ZSTD_createDCtx failed");
  }
  const size_t got = ZSTD_decompressDCtx(w.dctx.get(), dst, plain, frame, r.stored);
  if (ZSTD_isError(got)) chunk_fail(c, str("corrupt zstd data: ", ZSTD_getErrorName(got)));
  if (got != plain) chunk_fail(c, str("zstd produced ", got, " bytes, expected ", plain));
}

// Elements [begin, begin + len) of a chunk of `elems` elements, from its plain bytes, to fp32.
// For int8, begin is a multiple of the block; for int4, of the block and of 2 (a whole byte).
void plain_to_float(const PayloadLayout& l, const uint8_t* plain, size_t elems, size_t begin,
                    size_t len, float* out) {
  switch (l.codec) {
    case Codec::fp32:
      if (l.shuffle) {
        kernels::byte_unshuffle(plain + begin, len, 4, elems, out);
      } else {
        std::memcpy(out, plain + 4 * begin, 4 * len);
      }
      break;
    case Codec::fp16:
    case Codec::bf16:
      if (l.shuffle) {
        kernels::half_planes_to_float(half_kind(l.codec), plain + begin, plain + elems + begin,
                                      len, out);
      } else {
        kernels::half_to_float(half_kind(l.codec),
                               reinterpret_cast<const uint16_t*>(plain) + begin, len, out);
      }
      break;
    case Codec::int8: {
      const size_t blocks = kernels::int8_block_count(elems, l.block);
      kernels::dequantize_int8(reinterpret_cast<const float*>(plain) + begin / l.block,
                               reinterpret_cast<const int8_t*>(plain + 4 * blocks) + begin, len,
                               l.block, out);
      break;
    }
    case Codec::int4: {
      const size_t blocks = kernels::int8_block_count(elems, l.block);
      kernels::dequantize_int4(reinterpret_cast<const float*>(plain) + begin / l.block,
                               plain + 4 * blocks + begin / 2, len, l.block, out);
      break;
    }
  }
}

// decode_accumulate's sub-block: about kSubBlockElems, and for int8/int4 a whole number of
// blocks (for int4 an even number of elements too, so each sub-block starts on a byte).
size_t sub_block_elems(const PayloadLayout& l) {
  if (!is_quantised(l.codec)) return kSubBlockElems;
  const size_t unit =
      l.codec == Codec::int4 && l.block % 2 ? 2 * static_cast<size_t>(l.block) : l.block;
  return std::max<size_t>(unit, kSubBlockElems / unit * unit);
}


// accumulate == false: dst = decoded; true: dst += weight * decoded, and where squares is not
// null, *squares = the sum of the decoded values' squares (summed per chunk, then in chunk order,
// so that it does not depend on the thread count's scheduling).
void decode_impl(const uint8_t* payload, size_t size, const CodecOptions& opt, bool accumulate,
                 float weight, float* dst, size_t n, double* squares = nullptr) {
  validate(opt);
  GB_CHECK(payload != nullptr || size == 0, "null payload with size ", size);
  GB_CHECK(dst != nullptr || n == 0, "null destination for ", n, " elements");
  const PayloadLayout expected = make_layout(opt, n);
  PayloadLayout l;
  const std::vector<ChunkRef> refs = read_preamble(payload, size, expected, l);
  thread_local std::vector<DecodeWorker> workers;  // as encode's
  std::vector<double> chunk_squares(squares ? refs.size() : 0, 0.0);
  for_each_chunk(refs.size(), opt.threads, workers, [&](size_t c, DecodeWorker& w) {
    const size_t elems = l.chunk_size(c);
    const size_t plain_bytes = l.plain_bytes(elems);
    float* out = dst + l.chunk_begin(c);
    if (!accumulate && l.codec == Codec::fp32 && !l.shuffle) {
      decompress_chunk(payload, refs[c], c, plain_bytes, reinterpret_cast<uint8_t*>(out), w);
      return;
    }
    w.plain.resize(plain_bytes);
    decompress_chunk(payload, refs[c], c, plain_bytes, w.plain.data(), w);
    if (!accumulate) {
      plain_to_float(l, w.plain.data(), elems, 0, elems, out);
      return;
    }
    // Sub-blocks that stay in L1/L2.
    const size_t step = sub_block_elems(l);
    w.scratch.resize(std::min(step, elems));
    for (size_t begin = 0; begin < elems; begin += step) {
      const size_t len = std::min(step, elems - begin);
      plain_to_float(l, w.plain.data(), elems, begin, len, w.scratch.data());
      if (squares) chunk_squares[c] += sum_of_squares(w.scratch.data(), len);
      codec::accumulate(weight, w.scratch.data(), len, out + begin);
    }
  });
  if (squares) *squares = std::accumulate(chunk_squares.begin(), chunk_squares.end(), 0.0);
}

}  // namespace

void accumulate(float weight, const float* __restrict__ x, size_t n, float* __restrict__ y) {
  for (size_t i = 0; i < n; ++i) y[i] += weight * x[i];
}

double sum_of_squares(const float* x, size_t n) {
  double sums[4] = {0, 0, 0, 0};
  size_t i = 0;
  for (; i + 4 <= n; i += 4)
    for (size_t j = 0; j < 4; ++j) sums[j] += static_cast<double>(x[i + j]) * x[i + j];
  for (; i < n; ++i) sums[0] += static_cast<double>(x[i]) * x[i];
  return sums[0] + sums[1] + sums[2] + sums[3];
}

const char* codec_name(Codec c) {
  switch (c) {
    case Codec::fp32: return "fp32";
    case Codec::fp16: return "fp16";
    case Codec::bf16: return "bf16";
    case Codec::int8: return "int8";
    case Codec::int4: return "int4";
  }
  return "unknown";
}

Codec parse_codec(const std::string& name) {
  for (Codec c : {Codec::fp32, Codec::fp16, Codec::bf16, Codec::int8, Codec::int4}) {
    if (name == codec_name(c)) return c;
  }
  throw InputError(
      str("codec: unknown value '", name, "' (choices: fp32, fp16, bf16, int8, int4)"));
}

CodecOptions default_options(Codec codec) {
  CodecOptions opt;
  opt.codec = codec;
  opt.shuffle = true;
  opt.zstd_level = 1;
  return opt;
}

namespace {

// zstd (or, where it does not pay, the plain bytes) of one chunk into out[0, bound); returns the
// chunk's table entry. bound >= ZSTD_compressBound(plain_bytes).
uint32_t compress_chunk(const uint8_t* plain, size_t plain_bytes, int level, EncodeWorker& w, uint8_t* out,
                        size_t bound) {
  if (!w.cctx) {
    w.cctx.reset(ZSTD_createCCtx());
    GB_CHECK(w.cctx, "ZSTD_createCCtx failed");
  }
  const size_t z = ZSTD_compressCCtx(w.cctx.get(), out, bound, plain, plain_bytes, level);
  GB_CHECK(!ZSTD_isError(z), "zstd: ", ZSTD_getErrorName(z));
  if (z < plain_bytes) return static_cast<uint32_t>(z);
  std::memcpy(out, plain, plain_bytes);
  return static_cast<uint32_t>(plain_bytes) | kStoredRaw;
}

size_t stored_bytes(uint32_t entry) { return entry & ~kStoredRaw; }

}  // namespace

namespace {

// What encode_impl encodes, chunk by chunk: the caller's values as they are, or (error
// feedback) g + r, after which r becomes (g + r) - decoded, computed from the chunk's plain
// bytes (zstd is lossless, so they decode to what the payload decodes to: no decompression).
struct PlainInput {
  const float* src;
  const float* values(size_t begin, size_t, EncodeWorker&) const { return src + begin; }
  void encoded(const PayloadLayout&, size_t, size_t, const uint8_t*, EncodeWorker&) const {}
};

struct FeedbackInput {
  const float* grad;
  float* residual;
  const float* values(size_t begin, size_t elems, EncodeWorker& w) const {
    w.values.resize(elems);
    const float* __restrict__ g = grad + begin;
    const float* __restrict__ r = residual + begin;
    float* __restrict__ s = w.values.data();
    for (size_t i = 0; i < elems; ++i) s[i] = g[i] + r[i];
    return s;
  }
  void encoded(const PayloadLayout& l, size_t begin, size_t elems, const uint8_t* plain, EncodeWorker& w) const {
    const size_t step = sub_block_elems(l);
    w.decoded.resize(std::min(step, elems));
    for (size_t at = 0; at < elems; at += step) {
      const size_t len = std::min(step, elems - at);
      plain_to_float(l, plain, elems, at, len, w.decoded.data());
      const float* __restrict__ s = w.values.data() + at;
      const float* __restrict__ d = w.decoded.data();
      float* __restrict__ r = residual + begin + at;
      for (size_t i = 0; i < len; ++i) {
        const float e = s[i] - d[i];
        r[i] = std::isfinite(e) ? e : 0.f;  // an overflow must not poison every later step
      }
    }
  }
};

// Encodes n values from `input` into out (its bytes replaced, its capacity reused).
template <class Bytes, class Input>
void encode_impl(size_t n, const CodecOptions& opt, const Input& input, Bytes& out) {
  validate(opt);
  const PayloadLayout l = make_layout(opt, n);
  std::vector<uint32_t> sizes(l.chunks);
  // Kept per calling thread: creating a zstd context (and its workspace) costs more than
  // compressing a small payload, and the exchange encodes one or a few every round.
  thread_local std::vector<EncodeWorker> workers;
  const std::vector<uint8_t> empty_preamble = write_preamble(l, sizes);
  out.clear();
  if (std::min<size_t>(std::max(opt.threads, 1), l.chunks) <= 1) {
    // One thread: each chunk is compressed into the worker's scratch and appended (the table is
    // filled in at the end), so out only ever grows to the payload's size. A buffer kept from an
    // earlier payload of about this size then neither reallocates nor faults in fresh pages; an
    // empty one reserves zstd's bound (address space, not pages).
    workers.resize(1);
    if (out.capacity() == 0) {
      size_t most = empty_preamble.size();
      for (size_t c = 0; c < l.chunks; ++c) most += ZSTD_compressBound(l.plain_bytes(l.chunk_size(c)));
      out.reserve(most);
    }
    out.resize(empty_preamble.size());
    EncodeWorker& w = workers[0];
    for (size_t c = 0; c < l.chunks; ++c) {
      const size_t elems = l.chunk_size(c);
      const size_t plain_bytes = l.plain_bytes(elems);
      const uint8_t* plain = to_plain(l, input.values(l.chunk_begin(c), elems, w), elems, w.plain);
      const size_t bound = ZSTD_compressBound(plain_bytes);
      w.reserve_bound(bound);
      sizes[c] = compress_chunk(plain, plain_bytes, opt.zstd_level, w, w.bound.get(), bound);
      out.insert(out.end(), w.bound.get(), w.bound.get() + stored_bytes(sizes[c]));
      input.encoded(l, l.chunk_begin(c), elems, plain, w);
    }
  } else {
    std::vector<std::vector<uint8_t>> stored(l.chunks);
    for_each_chunk(l.chunks, opt.threads, workers, [&](size_t c, EncodeWorker& w) {
      const size_t elems = l.chunk_size(c);
      const size_t plain_bytes = l.plain_bytes(elems);
      const uint8_t* plain = to_plain(l, input.values(l.chunk_begin(c), elems, w), elems, w.plain);
      const size_t bound = ZSTD_compressBound(plain_bytes);
      w.reserve_bound(bound);
      sizes[c] = compress_chunk(plain, plain_bytes, opt.zstd_level, w, w.bound.get(), bound);
      stored[c].assign(w.bound.get(), w.bound.get() + stored_bytes(sizes[c]));
      input.encoded(l, l.chunk_begin(c), elems, plain, w);
    });
    size_t total = empty_preamble.size();
    for (const auto& s : stored) total += s.size();
    out.reserve(total);
    out.resize(empty_preamble.size());
    for (auto& s : stored) {
      out.insert(out.end(), s.begin(), s.end());
      std::vector<uint8_t>().swap(s);  // peak memory: the payload about once, not twice
    }
  }
  const std::vector<uint8_t> preamble = write_preamble(l, sizes);
  std::memcpy(out.data(), preamble.data(), preamble.size());
}

}  // namespace

std::vector<uint8_t> encode(const float* src, size_t n, const CodecOptions& opt) {
  GB_CHECK(src != nullptr || n == 0, "null source for ", n, " elements");
  std::vector<uint8_t> payload;
  encode_impl(n, opt, PlainInput{src}, payload);
  return payload;
}

void encode_into(const float* src, size_t n, const CodecOptions& opt, std::string& out) {
  GB_CHECK(src != nullptr || n == 0, "null source for ", n, " elements");
  encode_impl(n, opt, PlainInput{src}, out);
}

void encode_with_feedback(const float* grad, float* residual, size_t n, const CodecOptions& opt, std::string& out) {
  GB_CHECK((grad != nullptr && residual != nullptr) || n == 0, "null gradient or residual for ", n, " elements");
  encode_impl(n, opt, FeedbackInput{grad, residual}, out);
}

void decode(const uint8_t* payload, size_t size, const CodecOptions& opt, float* dst, size_t n) {
  decode_impl(payload, size, opt, false, 0.f, dst, n);
}

void decode_accumulate(const uint8_t* payload, size_t size, const CodecOptions& opt,
                       float weight, float* dst, size_t n) {
  decode_impl(payload, size, opt, true, weight, dst, n);
}

double decode_accumulate_measured(const uint8_t* payload, size_t size, const CodecOptions& opt,
                                  float weight, float* dst, size_t n) {
  double squares = 0;
  decode_impl(payload, size, opt, true, weight, dst, n, &squares);
  return squares;
}

}  // namespace gradbox::codec

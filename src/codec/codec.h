#pragma once
// The gradient codec: n fp32 values <-> one self-contained, deterministic byte payload.
// No LibTorch; the syncer and the worker both link it.
//
// Note [Codec payload format]
// Little-endian. A 32-byte preamble, a chunk table, then the chunks back to back:
//   0  "GBCZ"        magic
//   4  u8 version    1
//   5  u8 codec      Codec
//   6  u8 flags      bit 0: byte planes (shuffle) inside each chunk
//   7  u8 0
//   8  u64 n         element count
//   16 u32 chunk     elements per chunk (the last holds the rest), a power of two <= 2^22
//   20 u32 block     int8, int4: elements per absmax block; other codecs: 0
//   24 u32 chunks    ceil(n / chunk)
//   28 u32 0
//   32 u32 size[chunks]  stored bytes of each chunk; bit 31 set: stored raw (zstd did not pay)
// A chunk's plain bytes, before zstd, are fully determined by its element count:
//   fp32: 4 bytes per element (4 byte planes when shuffled);
//   fp16, bf16: 2 bytes per element (all low bytes, then all high bytes, when shuffled);
//   int8: one fp32 scale per block (ceil(elems / block)), then one int8 per element;
//   int4: one fp32 scale per block (ceil(elems / block)), then ceil(elems / 2) bytes of 4-bit
//     two's-complement levels (-7..7), element i of the chunk in byte i / 2, the low nibble
//     for even i. The nibbles run on across blocks (an odd block shares a byte with the next
//     one) and each chunk is packed on its own; for an odd elems the last byte's high nibble is
//     0 on encode and ignored on decode.
// Blocks restart at each chunk (the last block of a chunk may be short). int8 and int4 ignore
// the shuffle option (flag bit 0 is always clear for them).
// Each compressed chunk is exactly one zstd frame that records its content size. The decoder
// knows every size from (n, options) before it reads the payload: it checks the preamble
// against the caller's n and options, the table against the payload size, and each frame's
// declared content size against the expected plain size before decompressing into a buffer of
// exactly that size; anything else is a CodecError. There is no checksum here: the file layer
// checksums the whole payload.
//
// Non-finite input: fp32 keeps every bit (NaN payloads too); fp16/bf16 keep inf and NaN and
// turn values beyond the format's range into inf (IEEE, no clamping); int8 and int4 encode a
// block holding any inf/NaN with a NaN scale, so the whole block decodes to NaN. Either way a
// non-finite input shows up as non-finite output and the caller's overflow check fires.
// int8/int4 blocks whose absmax is below 2^-100 (all-zero blocks included) decode to zeros.
// Rounding and bounds of the quantised codecs: src/kernels/quantize.h.
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace gradbox::codec {

enum class Codec : uint8_t { fp32 = 0, fp16 = 1, bf16 = 2, int8 = 3, int4 = 4 };

const char* codec_name(Codec);               // "fp32","fp16","bf16","int8","int4"
Codec parse_codec(const std::string& name);  // throws InputError naming the value and the choices

struct CodecOptions {
  Codec codec = Codec::fp16;
  int zstd_level = 1;
  bool shuffle = true;          // byte-plane shuffle before zstd (ignored for int8 and int4)
  uint32_t int8_block = 256;    // elements per absmax block of both int8 and int4
  int threads = 1;              // encode/decode chunks in parallel; output does not depend on it
};

// Recommended options for a codec: byte planes on and zstd level 1 for every codec. Measured on
// GPT-2 124M gradients (scripts/bench/codec_bench.sh): the planes pay for fp32 (1.26x vs 1.08x),
// fp16 (3.40x vs 2.74x) and bf16 (3.40x vs 2.59x) and make decoding faster; level 3 gains
// 2-8% for 30% slower encoding; negative levels lose 10-15% of the ratio.
CodecOptions default_options(Codec codec);

// A corrupt, truncated or mismatched payload.
class CodecError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

inline constexpr uint32_t kChunkElems = 1u << 20;     // what encode() writes
inline constexpr uint32_t kMaxChunkElems = 1u << 22;  // what decode() accepts

// Invalid options (unknown codec, zstd level out of range, int8_block 0 or > kChunkElems,
// threads < 1) throw InputError from every function below.
//
// Encodes n floats into a self-contained payload. Deterministic: the bytes depend only on
// the input and (codec, zstd_level, shuffle, int8_block).
std::vector<uint8_t> encode(const float* src, size_t n, const CodecOptions& opt);
// The same bytes into out, replacing its contents: a buffer kept across rounds is reused
// (a fresh one costs its pages' zeroing, more than the fp16 conversion).
void encode_into(const float* src, size_t n, const CodecOptions& opt, std::string& out);
// Error feedback in one pass: out = encode(grad + residual), and residual becomes
// (grad + residual) - decode(out), computed chunk by chunk from the plain bytes before zstd (the
// payload need not be decompressed); non-finite entries of the new residual become 0.
void encode_with_feedback(const float* grad, float* residual, size_t n, const CodecOptions& opt, std::string& out);
// Decodes into exactly n floats. The payload must have been written for n elements and for
// opt's codec, shuffle and int8_block; CodecError otherwise, and for a truncated or corrupt
// payload or trailing bytes. On error dst holds unspecified values.
void decode(const uint8_t* payload, size_t size, const CodecOptions& opt, float* dst, size_t n);
// y[i] += weight * x[i] in fp32: the one loop every weighted sum of gradients uses (decoders
// and the emulated cluster alike), so that they round alike.
void accumulate(float weight, const float* x, size_t n, float* y);
// dst[i] += weight * decoded[i] (accumulate() on each decoded block), with chunk-sized scratch
// only. Same checks as decode(); on error part of dst may already be updated.
void decode_accumulate(const uint8_t* payload, size_t size, const CodecOptions& opt,
                       float weight, float* dst, size_t n);
// decode_accumulate() that also returns the sum of the squares of the decoded values, in double
// (not finite when one of them is NaN or Inf): a contribution is measured for the owner's check
// (Note [Checked contributions]) in the pass that sums it, not in a decode of its own.
double decode_accumulate_measured(const uint8_t* payload, size_t size, const CodecOptions& opt,
                                  float weight, float* dst, size_t n);
// The sum of x[i]^2 in double, in four partial sums (the loop vectorises); not finite when an
// x[i] is NaN or Inf (squares of finite floats cannot overflow a double).
double sum_of_squares(const float* x, size_t n);

// Error feedback for lossy codecs: encode(g + residual), residual = (g + residual) -
// decode(result). Non-finite residual entries (an input overflow) are reset to 0, so one bad
// step does not poison every later one; the payload itself still carries the non-finite values.
class ErrorFeedbackEncoder {
 public:
  explicit ErrorFeedbackEncoder(CodecOptions opt);
  // The first call (or a set_residual()) fixes n; a different n later is an InputError.
  std::vector<uint8_t> encode(const float* grad, size_t n);
  void encode_into(const float* grad, size_t n, std::string& out);  // out replaced, its buffer reused
  const std::vector<float>& residual() const;
  void set_residual(std::vector<float>);   // for checkpoint restore; empty: start from zero

 private:
  CodecOptions opt_;
  std::vector<float> residual_;
};

}  // namespace gradbox::codec

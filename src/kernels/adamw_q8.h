#pragma once
// Note [8-bit moments]
// AdamW with its two moments stored in 8 bits a value (--moments int8): 2 bytes a parameter
// instead of 8, which is 4.3 GiB of GPT-2-Large's 5.8 GiB of moments, the room a 15 GB T4 needs
// for activations. Blocks of kQ8Block values share a range; within it each value is a point on
// a logarithmic scale, because what AdamW needs from a small moment is its order of magnitude
// (a linear code rounds a block's small first moments to zero, and their parameters stop;
// a small second moment read as zero divides by eps):
//   first moment m (signed):  code 0 is 0; else bit 7 the sign, bits 0-6 a level L in 1..127,
//                             |m| = 2^(lo + (L - 1) * (hi - lo) / 126);
//   second moment v (>= 0):   code 0 is 0; else a level L in 1..255, v = 2^(lo + (L - 1) * (hi - lo) / 254);
// lo and hi are the block's smallest and largest log2 of a non-zero magnitude, the range capped
// at q8_octaves below hi: 32 for m, 64 for v, which is a square. Smaller values are 0, not the
// lowest level: a decaying moment rounded up to the floor would stay there for ever, and its
// parameter would go on stepping after its gradient stopped. Each level is at most 32/126 octaves
// from the next, so m and sqrt(v) are kept to 9%; blocks that span fewer octaves, far better.
// Where v decodes to 0, m is taken as 0 too: a stale m over a zeroed v would step by m / eps
// (v's cap being twice m's makes that rare; this makes it impossible). A step decodes a block,
// updates it in fp32 as adamw_cpu does, and encodes it again. Non-finite values are encoded as
// 0 (an overflowed step is skipped before it reaches the optimizer). Torch-free. The kernel's
// twin for CUDA is adamw_q8.cu (adamw_q8_cuda.h), the same arithmetic from adamw_q8_math.h; the
// tensor-op path for other devices is worker/optimizer.cpp's, on the same codes. log2 and exp2
// are polynomials good to ~1e-7 (libm's calls made a step 15x fp32 AdamW's), so the loops
// vectorize.
#include <cstdint>

#include "kernels/adamw.h"

namespace gradbox::kernels {

inline constexpr int64_t kQ8Block = 256;

// One moment's codes and its per-block ranges (log2 of the smallest and largest magnitude).
struct Q8Moment {
  uint8_t* codes = nullptr;
  float* lo = nullptr;
  float* hi = nullptr;
};

enum class Q8Sign { signed_values, non_negative };

// The block's smallest value is its floor: a margin, in octaves, for log2 and exp2's rounding.
inline constexpr float kQ8FloorSlack = 1e-5f;

// How far below a block's largest magnitude its range reaches, in octaves (see the Note).
inline constexpr float q8_octaves(Q8Sign sign) { return sign == Q8Sign::signed_values ? 32.f : 64.f; }

// Bytes of both moments of n parameters: a code each, and a range (lo, hi) per block, for m and v.
inline constexpr int64_t q8_moment_bytes(int64_t n) { return 2 * n + 16 * ((n + kQ8Block - 1) / kQ8Block); }

// values[0, n) -> codes and block ranges; n <= kQ8Block (one block).
void q8_encode_block(const float* values, int64_t n, Q8Sign sign, uint8_t* codes, float* lo, float* hi);
// codes -> values; the inverse up to the level's rounding.
void q8_decode_block(const uint8_t* codes, int64_t n, Q8Sign sign, float lo, float hi, float* values);

// AdamW on [0, n), which starts on a block boundary (codes at element 0, lo/hi at its block);
// elements below decay_end get the weight decay.
void adamw_q8_cpu(float* param, const float* grad, Q8Moment m, Q8Moment v, int64_t n, int64_t decay_end,
                  const AdamWStep& step);

}  // namespace gradbox::kernels

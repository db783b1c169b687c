#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "kernels/adamw_q8_cuda.h"
#include "kernels/adamw_q8_math.h"

namespace gradbox::kernels {
namespace {

constexpr int kThreads = static_cast<int>(kQ8Block);  // one thread a value
constexpr int kWarps = kThreads / 32;

// The block's largest and smallest counted magnitude of one moment, in every thread. Max and
// min are exact, so the order of the reduction does not change them: they are the CPU's.
struct Extremes {
  float largest, smallest;
};

__device__ Extremes block_extremes(float x, bool inside, float* shared_largest, float* shared_smallest) {
  const uint32_t a_bits = q8::bits_of(x) & 0x7fffffffu;
  const bool kept = inside && q8::counted(a_bits);
  const float a = q8::float_of(a_bits);
  float largest = kept ? a : 0.f, smallest = kept ? a : INFINITY;
  for (int offset = 16; offset > 0; offset /= 2) {
    largest = fmaxf(largest, __shfl_xor_sync(0xffffffffu, largest, offset));
    smallest = fminf(smallest, __shfl_xor_sync(0xffffffffu, smallest, offset));
  }
  const int warp = threadIdx.x / 32;
  if (threadIdx.x % 32 == 0) {
    shared_largest[warp] = largest;
    shared_smallest[warp] = smallest;
  }
  __syncthreads();
  Extremes e{shared_largest[0], shared_smallest[0]};
  for (int w = 1; w < kWarps; ++w) {
    e.largest = fmaxf(e.largest, shared_largest[w]);
    e.smallest = fminf(e.smallest, shared_smallest[w]);
  }
  return e;
}

// The new moment's code in this thread, and (thread 0) the block's range.
__device__ uint8_t encode_in_block(float x, bool inside, Extremes e, Q8Sign sign, float* lo, float* hi) {
  if (e.largest == 0.f) {  // nothing counted: all codes 0, an empty range
    if (threadIdx.x == 0) *lo = *hi = 0.f;
    return 0;
  }
  const q8::Range range = q8::range_of(e.largest, e.smallest, sign);
  if (threadIdx.x == 0) {
    *lo = range.lo;
    *hi = range.hi;
  }
  return inside ? q8::encode(x, range, sign) : 0;
}

__global__ void __launch_bounds__(kThreads)
    adamw_q8_kernel(float* param, const float* grad, Q8Moment m, Q8Moment v, int64_t n, int64_t decay_end,
                    q8::StepConstants c) {
  __shared__ float largest[2][kWarps], smallest[2][kWarps];
  const int64_t block = blockIdx.x;
  const int64_t i = block * kQ8Block + threadIdx.x;
  const bool inside = i < n;
  float mi = 0.f, vi = 0.f;
  if (inside) {
    mi = q8::decode(m.codes[i], m.lo[block], q8::level_step(m.lo[block], m.hi[block], Q8Sign::signed_values),
                    Q8Sign::signed_values);
    vi = q8::decode(v.codes[i], v.lo[block], q8::level_step(v.lo[block], v.hi[block], Q8Sign::non_negative),
                    Q8Sign::non_negative);
    param[i] = q8::update(param[i], grad[i], mi, vi, i < decay_end, c);
  }
  // Every thread has read the block's old ranges before the reductions' barrier; thread 0
  // writes the new ones after it.
  const Extremes em = block_extremes(mi, inside, largest[0], smallest[0]);
  const Extremes ev = block_extremes(vi, inside, largest[1], smallest[1]);
  const uint8_t m_code = encode_in_block(mi, inside, em, Q8Sign::signed_values, m.lo + block, m.hi + block);
  const uint8_t v_code = encode_in_block(vi, inside, ev, Q8Sign::non_negative, v.lo + block, v.hi + block);
  if (inside) {
    m.codes[i] = m_code;
    v.codes[i] = v_code;
  }
}

void check(cudaError_t error, const char* what) {
  if (error != cudaSuccess) throw std::runtime_error(std::string("adamw_q8_cuda: ") + what + ": " + cudaGetErrorString(error));
}

}  // namespace

bool adamw_q8_cuda_runs_on(int device) {
  cudaFuncAttributes attributes;
  if (cudaSetDevice(device) != cudaSuccess || cudaFuncGetAttributes(&attributes, adamw_q8_kernel) != cudaSuccess) {
    cudaGetLastError();  // clear it: the answer is no
    return false;
  }
  return true;
}

void adamw_q8_cuda(float* param, const float* grad, Q8Moment m, Q8Moment v, int64_t n, int64_t decay_end,
                   const AdamWStep& step, int device, void* stream) {
  if (n <= 0) return;
  // This runtime is linked statically: it keeps its own current device, which LibTorch's
  // cudaSetDevice does not move.
  check(cudaSetDevice(device), "cudaSetDevice");
  const int64_t blocks = (n + kQ8Block - 1) / kQ8Block;
  if (blocks > 0x7fffffff) throw std::runtime_error("adamw_q8_cuda: more than 2^31 blocks");
  adamw_q8_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      param, grad, m, v, n, decay_end, q8::constants_of(step));
  check(cudaGetLastError(), "launch");
}

}  // namespace gradbox::kernels

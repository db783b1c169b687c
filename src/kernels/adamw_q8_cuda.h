#pragma once
// The CUDA twin of adamw_q8_cpu (Note [8-bit moments]): one thread block of 256 threads for each
// block of 256 values, one value a thread, with the arithmetic of adamw_q8_math.h, so its codes,
// ranges and parameters are the CPU kernel's bits (tests/worker/adamw_q8_cuda_test.cpp, label
// gpu). Built when CMake has a CUDA compiler (GRADBOX_CUDA_KERNELS); torch-free.
#include <cstdint>

#include "kernels/adamw.h"
#include "kernels/adamw_q8.h"

namespace gradbox::kernels {

// As adamw_q8_cpu, on device pointers of `device`, queued on `stream` (a cudaStream_t of that
// device; nullptr: its legacy default stream). Throws std::runtime_error with CUDA's message
// when the launch fails.
void adamw_q8_cuda(float* param, const float* grad, Q8Moment m, Q8Moment v, int64_t n, int64_t decay_end,
                   const AdamWStep& step, int device, void* stream);

// Whether this build holds code for `device`'s architecture (the build's TORCH_CUDA_ARCH_LIST;
// a P100's 6.0 is not in it): where not, callers take the tensor-op path.
bool adamw_q8_cuda_runs_on(int device);

}  // namespace gradbox::kernels

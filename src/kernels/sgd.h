#pragma once
// Plain SGD (the inner optimizer of exactness checks) and the outer Nesterov step of DiLoCo
// rounds (Note [DiLoCo rounds] in worker/outer_optimizer.h), over contiguous fp32 ranges.
// Every replica applies the outer step to the same bytes and must get the same bytes back, on
// any machine: compiled without FMA contraction, one rounding per written operation.
#include <cstdint>

namespace gradbox::kernels {

// param = param * (1 - lr * weight_decay) - lr * (grad * grad_scale)
void sgd_cpu(float* param, const float* grad, int64_t n, float lr, float weight_decay, float grad_scale);

// Outer step on the global parameters from the averaged pseudo-gradient delta:
//   m = momentum * m + delta
//   global -= lr * (delta + momentum * m)   (nesterov)   or   lr * m   (heavy ball)
// then local = global (every replica continues from the new global parameters).
void outer_nesterov_cpu(float* global, float* momentum_buffer, const float* delta, float* local, int64_t n,
                        float lr, float momentum, bool nesterov);

// The same outer step previewed (Note [Eager outer steps] in worker/eager_outer.h): local = the
// global parameters the step would give on `estimate`; global and the momentum are not changed.
void outer_nesterov_preview_cpu(const float* global, const float* momentum_buffer, const float* estimate, float* local,
                                int64_t n, float lr, float momentum, bool nesterov);

// out = a + scale * b (out may be a).
void scaled_add_cpu(const float* a, const float* b, float scale, float* out, int64_t n);

}  // namespace gradbox::kernels

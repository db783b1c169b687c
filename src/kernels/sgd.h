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

// The eager rule's offset step (Note [Eager outer steps] in worker/eager_outer.h), per element:
//   d = share * own;  u = d - sent_share;  sent_share = d
//   m = momentum * m + u;  offset -= lr * (u + momentum * m)  (nesterov)  or  lr * m
//   local = global + offset
void eager_offset_step_cpu(float* offset, float* momentum_buffer, float* sent_share, const float* own, float share,
                           const float* global, float* local, int64_t n, float lr, float momentum, bool nesterov);

// out = a + scale * b (out may be a).
void scaled_add_cpu(const float* a, const float* b, float scale, float* out, int64_t n);

}  // namespace gradbox::kernels

#pragma once
// AdamW over one contiguous range of fp32 parameters, in a single pass over memory.
// PyTorch's CPU AdamW (the for-each-tensor default) walks every parameter tensor with ~8
// elementwise ops; gradbox keeps all parameters in one flat buffer, so one fused loop does the
// whole model. Callers split the range across threads.
#include <cstdint>

namespace gradbox::kernels {

struct AdamWStep {
  float lr = 0.f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.f;  // decoupled: param *= 1 - lr * weight_decay
  float grad_scale = 1.f;    // multiplies every gradient first (unscaling and clipping folded in)
  int64_t step = 1;          // 1-based, after increment: bias corrections use it
};

// Reference semantics (torch.optim.AdamW, amsgrad=False, maximize=False):
//   g = grad * grad_scale
//   param *= 1 - lr * wd
//   m = beta1 * m + (1 - beta1) * g
//   v = beta2 * v + (1 - beta2) * g * g
//   param -= lr / (1 - beta1^step) * m / (sqrt(v) / sqrt(1 - beta2^step) + eps)
void adamw_cpu(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n,
               const AdamWStep& step);

}  // namespace gradbox::kernels

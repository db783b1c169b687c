#include "kernels/sgd.h"

namespace gradbox::kernels {

void sgd_cpu(float* param, const float* grad, int64_t n, float lr, float weight_decay, float grad_scale) {
  const float keep = 1.0f - lr * weight_decay;
  for (int64_t i = 0; i < n; ++i) param[i] = param[i] * keep - lr * (grad[i] * grad_scale);
}

void outer_nesterov_cpu(float* global, float* momentum_buffer, const float* delta, float* local, int64_t n,
                        float lr, float momentum, bool nesterov) {
  for (int64_t i = 0; i < n; ++i) {
    const float m = momentum * momentum_buffer[i] + delta[i];
    momentum_buffer[i] = m;
    const float update = nesterov ? delta[i] + momentum * m : m;
    global[i] = global[i] - lr * update;
    local[i] = global[i];
  }
}

void eager_offset_step_cpu(float* offset, float* momentum_buffer, float* sent_share, const float* own, float share,
                           const float* global, float* local, int64_t n, float lr, float momentum, bool nesterov) {
  for (int64_t i = 0; i < n; ++i) {
    const float d = share * own[i];
    const float u = d - sent_share[i];
    sent_share[i] = d;
    const float m = momentum * momentum_buffer[i] + u;
    momentum_buffer[i] = m;
    const float update = nesterov ? u + momentum * m : m;
    offset[i] = offset[i] - lr * update;
    local[i] = global[i] + offset[i];
  }
}

void scaled_add_cpu(const float* a, const float* b, float scale, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + scale * b[i];
}

}  // namespace gradbox::kernels

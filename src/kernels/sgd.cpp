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

}  // namespace gradbox::kernels

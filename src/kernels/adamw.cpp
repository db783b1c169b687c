#include "kernels/adamw.h"

#include <cmath>

namespace gradbox::kernels {

void adamw_cpu(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n,
               const AdamWStep& s) {
  const double bias_correction1 = 1.0 - std::pow(static_cast<double>(s.beta1), static_cast<double>(s.step));
  const double bias_correction2 = 1.0 - std::pow(static_cast<double>(s.beta2), static_cast<double>(s.step));
  // Every coefficient is a local and the pointers are restrict: otherwise a store to the
  // arrays could alias `s`, and GCC reloads it each iteration instead of vectorising.
  const float step_size = static_cast<float>(s.lr / bias_correction1);
  const float inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bias_correction2));
  const float decay = 1.f - s.lr * s.weight_decay;
  const float beta1 = s.beta1, beta2 = s.beta2, eps = s.eps, grad_scale = s.grad_scale;
  const float one_minus_beta1 = 1.f - beta1;
  const float one_minus_beta2 = 1.f - beta2;
  float* __restrict__ p = param;
  const float* __restrict__ g_in = grad;
  float* __restrict__ m_io = exp_avg;
  float* __restrict__ v_io = exp_avg_sq;
  for (int64_t i = 0; i < n; ++i) {
    const float g = g_in[i] * grad_scale;
    const float m = beta1 * m_io[i] + one_minus_beta1 * g;
    const float v = beta2 * v_io[i] + one_minus_beta2 * g * g;
    m_io[i] = m;
    v_io[i] = v;
    const float denom = std::sqrt(v) * inv_sqrt_bc2 + eps;
    p[i] = p[i] * decay - step_size * m / denom;
  }
}

}  // namespace gradbox::kernels

#include "kernels/adamw.h"

#include <cmath>

namespace gradbox::kernels {

void adamw_cpu(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n,
               const AdamWStep& s) {
  const double bias_correction1 = 1.0 - std::pow(static_cast<double>(s.beta1), static_cast<double>(s.step));
  const double bias_correction2 = 1.0 - std::pow(static_cast<double>(s.beta2), static_cast<double>(s.step));
  const float step_size = static_cast<float>(s.lr / bias_correction1);
  const float inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bias_correction2));
  const float decay = 1.f - s.lr * s.weight_decay;
  const float one_minus_beta1 = 1.f - s.beta1;
  const float one_minus_beta2 = 1.f - s.beta2;
  // Plain indexed loop over restrict-free pointers: GCC vectorises it at -O2/-O3.
  for (int64_t i = 0; i < n; ++i) {
    const float g = grad[i] * s.grad_scale;
    const float m = s.beta1 * exp_avg[i] + one_minus_beta1 * g;
    const float v = s.beta2 * exp_avg_sq[i] + one_minus_beta2 * g * g;
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    const float denom = std::sqrt(v) * inv_sqrt_bc2 + s.eps;
    param[i] = param[i] * decay - step_size * m / denom;
  }
}

}  // namespace gradbox::kernels

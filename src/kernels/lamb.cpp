#include "kernels/lamb.h"

#include <cmath>

namespace gradbox::kernels {

SquaredNorms lamb_moments_cpu(const float* param, const float* grad, float* exp_avg,
                              float* exp_avg_sq, float* update, int64_t n, const LambMoments& s) {
  const double bias_correction1 = 1.0 - std::pow(static_cast<double>(s.beta1), static_cast<double>(s.step));
  const double bias_correction2 = 1.0 - std::pow(static_cast<double>(s.beta2), static_cast<double>(s.step));
  const float inv_bc1 = static_cast<float>(1.0 / bias_correction1);
  const float inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bias_correction2));
  SquaredNorms norms;
  // float partial sums per block keep the loop vectorisable; blocks are summed in double.
  constexpr int64_t kBlock = 4096;
  for (int64_t start = 0; start < n; start += kBlock) {
    const int64_t end = start + kBlock < n ? start + kBlock : n;
    float param_sq = 0.f;
    float update_sq = 0.f;
    for (int64_t i = start; i < end; ++i) {
      const float g = grad[i] * s.grad_scale;
      const float m = s.beta1 * exp_avg[i] + (1.f - s.beta1) * g;
      const float v = s.beta2 * exp_avg_sq[i] + (1.f - s.beta2) * g * g;
      exp_avg[i] = m;
      exp_avg_sq[i] = v;
      const float u = m * inv_bc1 / (std::sqrt(v) * inv_sqrt_bc2 + s.eps) + s.weight_decay * param[i];
      update[i] = u;
      param_sq += param[i] * param[i];
      update_sq += u * u;
    }
    norms.param += param_sq;
    norms.update += update_sq;
  }
  return norms;
}

void lamb_apply_cpu(float* param, const float* update, int64_t n, float lr_times_trust) {
  for (int64_t i = 0; i < n; ++i) param[i] -= lr_times_trust * update[i];
}

float lamb_trust_ratio(const SquaredNorms& norms) {
  if (norms.param <= 0.0 || norms.update <= 0.0) return 1.f;
  return static_cast<float>(std::sqrt(norms.param) / std::sqrt(norms.update));
}

}  // namespace gradbox::kernels

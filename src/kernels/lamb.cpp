#include "kernels/lamb.h"

#include <cmath>

namespace gradbox::kernels {

SquaredNorms lamb_moments_cpu(const float* param, const float* grad, float* exp_avg,
                              float* exp_avg_sq, float* update, int64_t n, const LambMoments& s) {
  const double bias_correction1 = 1.0 - std::pow(static_cast<double>(s.beta1), static_cast<double>(s.step));
  const double bias_correction2 = 1.0 - std::pow(static_cast<double>(s.beta2), static_cast<double>(s.step));
  const float inv_bc1 = static_cast<float>(1.0 / bias_correction1);
  const float inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bias_correction2));
  // Locals and restrict pointers, as in adamw.cpp, so GCC vectorises the loop.
  const float beta1 = s.beta1, beta2 = s.beta2, eps = s.eps, wd = s.weight_decay, grad_scale = s.grad_scale;
  const float* __restrict__ p = param;
  const float* __restrict__ g_in = grad;
  float* __restrict__ m_io = exp_avg;
  float* __restrict__ v_io = exp_avg_sq;
  float* __restrict__ u_out = update;
  SquaredNorms norms;
  // float partial sums per block keep the loop vectorisable; blocks are summed in double.
  constexpr int64_t kBlock = 4096;
  for (int64_t start = 0; start < n; start += kBlock) {
    const int64_t end = start + kBlock < n ? start + kBlock : n;
    float param_sq = 0.f;
    float update_sq = 0.f;
    for (int64_t i = start; i < end; ++i) {
      const float g = g_in[i] * grad_scale;
      const float m = beta1 * m_io[i] + (1.f - beta1) * g;
      const float v = beta2 * v_io[i] + (1.f - beta2) * g * g;
      m_io[i] = m;
      v_io[i] = v;
      const float u = m * inv_bc1 / (std::sqrt(v) * inv_sqrt_bc2 + eps) + wd * p[i];
      u_out[i] = u;
      param_sq += p[i] * p[i];
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

#pragma once
// LAMB (You et al. 2019) over flat fp32 buffers, in two passes so a tensor's trust ratio can use
// the norm of its whole update:
//   1. lamb_moments_cpu: update m and v, write the Adam-style update u = m_hat / (sqrt(v_hat) +
//      eps) + wd * param into `update`, and return sum(param^2) and sum(u^2) of the range.
//   2. lamb_apply_cpu: param -= lr * trust * u, with trust = ||param|| / ||u|| per tensor
//      (1 when either norm is 0).
// YaLM found LAMB diverges much less than Adam at scale; gradbox offers both.
#include <cstdint>

namespace gradbox::kernels {

struct LambMoments {
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-6f;
  float weight_decay = 0.f;
  float grad_scale = 1.f;
  int64_t step = 1;
};

struct SquaredNorms {
  double param = 0.0;
  double update = 0.0;
};

SquaredNorms lamb_moments_cpu(const float* param, const float* grad, float* exp_avg,
                              float* exp_avg_sq, float* update, int64_t n, const LambMoments& s);

void lamb_apply_cpu(float* param, const float* update, int64_t n, float lr_times_trust);

// trust = ||param|| / ||update||, or 1 when either is zero (fresh zero-initialised tensors).
float lamb_trust_ratio(const SquaredNorms& norms);

}  // namespace gradbox::kernels

#include "worker/optimizer.h"

#include <ATen/Parallel.h>

#include <cmath>

#include "common/error.h"
#include "kernels/adamw.h"
#include "kernels/lamb.h"
#include "kernels/sgd.h"

namespace gradbox::worker {
namespace {

// Elements per task: large enough that scheduling is noise, small enough to split 1M params.
constexpr int64_t kGrain = 1 << 15;

}  // namespace

Optimizer::Optimizer(FlatParameters& flat, OptimizerHyper hyper, OptimizerBackend backend)
    : flat_(flat), hyper_(hyper) {
  const bool on_cpu = flat_.params().is_cpu();
  GB_CHECK(on_cpu || backend != OptimizerBackend::fused_cpu, "the fused CPU optimizer needs CPU parameters");
  fused_ = backend == OptimizerBackend::fused_cpu || (backend == OptimizerBackend::automatic && on_cpu);
  exp_avg_ = torch::zeros_like(flat_.params());
  exp_avg_sq_ = torch::zeros_like(flat_.params());
  if (hyper_.kind == OptimizerKind::lamb && fused_) lamb_update_ = torch::empty_like(flat_.params());
}

void Optimizer::step(double lr, double weight_decay, double grad_scale) {
  torch::NoGradGuard no_grad;
  ++step_;
  if (hyper_.kind == OptimizerKind::sgd) {
    sgd(lr, weight_decay, grad_scale);
  } else if (hyper_.kind == OptimizerKind::lamb) {
    fused_ ? lamb_cpu(lr, weight_decay, grad_scale) : lamb_tensor_ops(lr, weight_decay, grad_scale);
  } else if (fused_) {
    adamw_cpu(static_cast<float>(lr), static_cast<float>(weight_decay), static_cast<float>(grad_scale));
  } else {
    adamw_tensor_ops(lr, weight_decay, grad_scale);
  }
}

void Optimizer::sgd(double lr, double weight_decay, double grad_scale) {
  if (!fused_) {
    torch::Tensor params = flat_.params();
    if (flat_.decay_numel() > 0 && weight_decay != 0.0)
      params.narrow(0, 0, flat_.decay_numel()).mul_(1.0 - lr * weight_decay);
    params.add_(flat_.grads(), -lr * grad_scale);
    return;
  }
  float* param = flat_.params().data_ptr<float>();
  const float* grad = flat_.grads().data_ptr<float>();
  const int64_t decay_end = flat_.decay_numel();
  const auto f = [](double x) { return static_cast<float>(x); };
  at::parallel_for(0, flat_.numel(), kGrain, [&](int64_t begin, int64_t end) {
    if (begin < decay_end) {
      const int64_t stop = std::min(end, decay_end);
      kernels::sgd_cpu(param + begin, grad + begin, stop - begin, f(lr), f(weight_decay), f(grad_scale));
      begin = stop;
    }
    if (begin < end) kernels::sgd_cpu(param + begin, grad + begin, end - begin, f(lr), 0.f, f(grad_scale));
  });
}

void Optimizer::adamw_cpu(float lr, float weight_decay, float grad_scale) {
  float* param = flat_.params().data_ptr<float>();
  const float* grad = flat_.grads().data_ptr<float>();
  float* m = exp_avg_.data_ptr<float>();
  float* v = exp_avg_sq_.data_ptr<float>();
  kernels::AdamWStep s;
  s.lr = lr;
  s.beta1 = static_cast<float>(hyper_.beta1);
  s.beta2 = static_cast<float>(hyper_.beta2);
  s.eps = static_cast<float>(hyper_.eps);
  s.grad_scale = grad_scale;
  s.step = step_;
  const int64_t decay_end = flat_.decay_numel();
  at::parallel_for(0, flat_.numel(), kGrain, [&](int64_t begin, int64_t end) {
    // A task may straddle the decay boundary: split it there.
    if (begin < decay_end) {
      kernels::AdamWStep decayed = s;
      decayed.weight_decay = weight_decay;
      const int64_t stop = std::min(end, decay_end);
      kernels::adamw_cpu(param + begin, grad + begin, m + begin, v + begin, stop - begin, decayed);
      begin = stop;
    }
    if (begin < end) kernels::adamw_cpu(param + begin, grad + begin, m + begin, v + begin, end - begin, s);
  });
}

void Optimizer::adamw_tensor_ops(double lr, double weight_decay, double grad_scale) {
  torch::Tensor params = flat_.params();
  torch::Tensor grad = flat_.grads() * grad_scale;
  const double bias_correction1 = 1.0 - std::pow(hyper_.beta1, static_cast<double>(step_));
  const double bias_correction2 = 1.0 - std::pow(hyper_.beta2, static_cast<double>(step_));
  if (flat_.decay_numel() > 0 && weight_decay != 0.0)
    params.narrow(0, 0, flat_.decay_numel()).mul_(1.0 - lr * weight_decay);
  exp_avg_.lerp_(grad, 1.0 - hyper_.beta1);
  exp_avg_sq_.mul_(hyper_.beta2).addcmul_(grad, grad, 1.0 - hyper_.beta2);
  torch::Tensor denom = (exp_avg_sq_.sqrt() / std::sqrt(bias_correction2)).add_(hyper_.eps);
  params.addcdiv_(exp_avg_, denom, -lr / bias_correction1);
}

void Optimizer::lamb_cpu(double lr, double weight_decay, double grad_scale) {
  kernels::LambMoments s;
  s.beta1 = static_cast<float>(hyper_.beta1);
  s.beta2 = static_cast<float>(hyper_.beta2);
  s.eps = static_cast<float>(hyper_.eps);
  s.grad_scale = static_cast<float>(grad_scale);
  s.step = step_;
  // Trust ratios are per tensor, so the work is split by segment, then by range within it.
  for (const ParameterSegment& seg : flat_.segments()) {
    float* param = flat_.params().data_ptr<float>() + seg.offset;
    const float* grad = flat_.grads().data_ptr<float>() + seg.offset;
    float* m = exp_avg_.data_ptr<float>() + seg.offset;
    float* v = exp_avg_sq_.data_ptr<float>() + seg.offset;
    float* update = lamb_update_.data_ptr<float>() + seg.offset;
    kernels::LambMoments seg_step = s;
    seg_step.weight_decay = seg.decay ? static_cast<float>(weight_decay) : 0.f;
    const kernels::SquaredNorms norms = at::parallel_reduce(
        0, seg.numel, kGrain, kernels::SquaredNorms{},
        [&](int64_t begin, int64_t end, kernels::SquaredNorms acc) {
          kernels::SquaredNorms part = kernels::lamb_moments_cpu(param + begin, grad + begin, m + begin, v + begin,
                                                                 update + begin, end - begin, seg_step);
          return kernels::SquaredNorms{acc.param + part.param, acc.update + part.update};
        },
        [](kernels::SquaredNorms a, kernels::SquaredNorms b) {
          return kernels::SquaredNorms{a.param + b.param, a.update + b.update};
        });
    const float scaled = static_cast<float>(lr) * kernels::lamb_trust_ratio(norms);
    at::parallel_for(0, seg.numel, kGrain, [&](int64_t begin, int64_t end) {
      kernels::lamb_apply_cpu(param + begin, update + begin, end - begin, scaled);
    });
  }
}

void Optimizer::lamb_tensor_ops(double lr, double weight_decay, double grad_scale) {
  const double bias_correction1 = 1.0 - std::pow(hyper_.beta1, static_cast<double>(step_));
  const double bias_correction2 = 1.0 - std::pow(hyper_.beta2, static_cast<double>(step_));
  for (const ParameterSegment& seg : flat_.segments()) {
    torch::Tensor param = flat_.params().narrow(0, seg.offset, seg.numel);
    torch::Tensor grad = flat_.grads().narrow(0, seg.offset, seg.numel) * grad_scale;
    torch::Tensor m = exp_avg_.narrow(0, seg.offset, seg.numel);
    torch::Tensor v = exp_avg_sq_.narrow(0, seg.offset, seg.numel);
    m.mul_(hyper_.beta1).add_(grad, 1.0 - hyper_.beta1);
    v.mul_(hyper_.beta2).addcmul_(grad, grad, 1.0 - hyper_.beta2);
    torch::Tensor update = (m / bias_correction1) / ((v / bias_correction2).sqrt() + hyper_.eps);
    if (seg.decay) update.add_(param, weight_decay);
    const double p_norm = param.norm().item<double>();
    const double u_norm = update.norm().item<double>();
    const double trust = (p_norm > 0 && u_norm > 0) ? p_norm / u_norm : 1.0;
    param.add_(update, -lr * trust);
  }
}

double gradient_norm(const FlatParameters& flat) {
  torch::NoGradGuard no_grad;
  return flat.grads().norm().item<double>();
}

}  // namespace gradbox::worker

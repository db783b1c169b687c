#include "worker/outer_optimizer.h"

#include "common/error.h"
#include "kernels/sgd.h"

namespace gradbox::worker {

OuterOptimizer::OuterOptimizer(const torch::Tensor& params, OuterHyper hyper)
    : hyper_(hyper), global_(params.detach().clone()), momentum_(torch::zeros_like(params)) {}

void OuterOptimizer::pseudo_gradient(const torch::Tensor& params, torch::Tensor& delta) const {
  torch::NoGradGuard no_grad;
  if (!delta.defined() || delta.numel() != params.numel()) delta = torch::empty({params.numel()}, torch::kFloat32);
  if (global_.is_cpu()) {
    torch::sub_out(delta, global_, params);  // one rounding per element: the same bytes anywhere
  } else {
    delta.copy_(global_ - params);
  }
}

void OuterOptimizer::step(const torch::Tensor& average_delta, torch::Tensor& params) {
  torch::NoGradGuard no_grad;
  GB_CHECK(average_delta.numel() == global_.numel(), "outer step: ", average_delta.numel(), " values for ",
           global_.numel(), " parameters");
  if (global_.is_cpu()) {
    kernels::outer_nesterov_cpu(global_.data_ptr<float>(), momentum_.data_ptr<float>(), average_delta.data_ptr<float>(),
                                params.data_ptr<float>(), global_.numel(), static_cast<float>(hyper_.lr),
                                static_cast<float>(hyper_.momentum), hyper_.nesterov);
    return;
  }
  const torch::Tensor delta = average_delta.to(global_.device());
  momentum_.mul_(hyper_.momentum).add_(delta);
  global_.sub_(hyper_.nesterov ? delta + hyper_.momentum * momentum_ : momentum_, hyper_.lr);
  params.copy_(global_);
}

void OuterOptimizer::discard_round(torch::Tensor& params) const {
  torch::NoGradGuard no_grad;
  params.copy_(global_);
}

}  // namespace gradbox::worker

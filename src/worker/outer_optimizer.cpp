#include "worker/outer_optimizer.h"

#include "common/error.h"
#include "kernels/sgd.h"

namespace gradbox::worker {
namespace {

Fragment whole(const torch::Tensor& t) { return Fragment{{{0, t.numel()}}, t.numel()}; }

}  // namespace

torch::Tensor gather_fragment(const torch::Tensor& flat, const Fragment& fragment) {
  torch::NoGradGuard no_grad;
  torch::Tensor out = torch::empty({fragment.numel}, torch::kFloat32);
  for_each_range(fragment,
                 [&](int64_t begin, int64_t n, int64_t at) { out.narrow(0, at, n).copy_(flat.narrow(0, begin, n)); });
  return out;
}

OuterOptimizer::OuterOptimizer(const torch::Tensor& params, OuterHyper hyper)
    : hyper_(hyper), global_(params.detach().clone()), momentum_(torch::zeros_like(params)) {}

void OuterOptimizer::pseudo_gradient(const torch::Tensor& params, torch::Tensor& delta) const {
  pseudo_gradient(params, whole(params), delta);
}

void OuterOptimizer::pseudo_gradient(const torch::Tensor& params, const Fragment& fragment, torch::Tensor& delta) const {
  torch::NoGradGuard no_grad;
  if (!delta.defined() || delta.numel() != fragment.numel) delta = torch::empty({fragment.numel}, torch::kFloat32);
  for_each_range(fragment, [&](int64_t begin, int64_t n, int64_t at) {
    torch::Tensor out = delta.narrow(0, at, n);
    if (global_.is_cpu()) {
      torch::sub_out(out, global_.narrow(0, begin, n), params.narrow(0, begin, n));  // one rounding per element
    } else {
      out.copy_(global_.narrow(0, begin, n) - params.narrow(0, begin, n));
    }
  });
}

void OuterOptimizer::step(const torch::Tensor& average_delta, torch::Tensor& params) {
  step(average_delta, whole(params), params);
}

void OuterOptimizer::step(const torch::Tensor& average_delta, const Fragment& fragment, torch::Tensor& params,
                          const torch::Tensor* sent) {
  torch::NoGradGuard no_grad;
  GB_CHECK(average_delta.numel() == fragment.numel, "outer step: ", average_delta.numel(), " values for ",
           fragment.numel, " parameters");
  // The local steps taken since the fragment's Δ went out, kept across the outer step.
  const torch::Tensor since = sent ? torch::empty({fragment.numel}, torch::kFloat32) : torch::Tensor();
  if (sent)
    for_each_range(fragment, [&](int64_t begin, int64_t n, int64_t at) {
      since.narrow(0, at, n).copy_(params.narrow(0, begin, n).to(torch::kCPU) - sent->narrow(0, at, n));
    });
  for_each_range(fragment, [&](int64_t begin, int64_t n, int64_t at) {
    if (global_.is_cpu()) {
      kernels::outer_nesterov_cpu(global_.data_ptr<float>() + begin, momentum_.data_ptr<float>() + begin,
                                  average_delta.data_ptr<float>() + at, params.data_ptr<float>() + begin, n,
                                  static_cast<float>(hyper_.lr), static_cast<float>(hyper_.momentum), hyper_.nesterov);
    } else {
      const torch::Tensor delta = average_delta.narrow(0, at, n).to(global_.device());
      torch::Tensor m = momentum_.narrow(0, begin, n), g = global_.narrow(0, begin, n);
      m.mul_(hyper_.momentum).add_(delta);
      g.sub_(hyper_.nesterov ? delta + hyper_.momentum * m : m, hyper_.lr);
      params.narrow(0, begin, n).copy_(g);
    }
    if (sent) params.narrow(0, begin, n).add_(since.narrow(0, at, n).to(params.device()));
  });
}

void OuterOptimizer::discard_round(torch::Tensor& params) const { discard_round(whole(params), params); }

void OuterOptimizer::discard_round(const Fragment& fragment, torch::Tensor& params, const torch::Tensor* sent) const {
  rebase(fragment, params, sent);
}

void OuterOptimizer::rebase(const Fragment& fragment, torch::Tensor& params, const torch::Tensor* sent) const {
  torch::NoGradGuard no_grad;
  for_each_range(fragment, [&](int64_t begin, int64_t n, int64_t at) {
    torch::Tensor local = params.narrow(0, begin, n);
    if (sent) local.sub_(sent->narrow(0, at, n).to(local.device())).add_(global_.narrow(0, begin, n));
    else local.copy_(global_.narrow(0, begin, n));
  });
}

}  // namespace gradbox::worker

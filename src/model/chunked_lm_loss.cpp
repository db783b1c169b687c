#include "model/chunked_lm_loss.h"

#include <ATen/autocast_mode.h>

#include "common/error.h"

namespace gradbox::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// One block of rows: its summed loss, and (when `grads`) its gradients added in place.
torch::Tensor chunk_loss(const torch::Tensor& h, const torch::Tensor& weight, const torch::Tensor& t, double inv_n,
                         torch::Tensor* grad_h, torch::Tensor* grad_w) {
  torch::Tensor logits = torch::matmul(h, weight.t()).to(torch::kFloat32);  // (K, V), fp32 from here
  const torch::Tensor lse = torch::logsumexp(logits, 1, /*keepdim=*/true);  // (K, 1)
  const torch::Tensor target_logit = logits.gather(1, t.unsqueeze(1));
  torch::Tensor loss = (lse - target_logit).sum();
  if (grad_h) {
    // d(mean loss)/d(logits) = (softmax - onehot) / N, in the logits' own memory.
    logits.sub_(lse).exp_();
    logits.scatter_add_(1, t.unsqueeze(1), torch::full({t.size(0), 1}, -1.0f, logits.options()));
    logits.mul_(inv_n);
    if (at::autocast::is_autocast_enabled(h.device().type())) {
      // 16-bit matmuls, as autocast would run them in backward.
      grad_h->copy_(torch::matmul(logits, weight));
      grad_w->add_(torch::matmul(logits.t(), h));
    } else {
      // In place: no (V x C) temporary per chunk.
      torch::mm_out(*grad_h, logits, weight);
      grad_w->addmm_(logits.t(), h);
    }
  }
  return loss;
}

class ChunkedLmLoss : public torch::autograd::Function<ChunkedLmLoss> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& hidden, const torch::Tensor& weight,
                               const torch::Tensor& targets, int64_t chunk_rows) {
    const int64_t n = hidden.size(0);
    const double inv_n = 1.0 / static_cast<double>(n);
    torch::Tensor grad_h = torch::empty_like(hidden);
    torch::Tensor grad_w = torch::zeros(weight.sizes(), weight.options().dtype(torch::kFloat32));
    torch::Tensor total = torch::zeros({}, hidden.options().dtype(torch::kFloat32));
    for (int64_t begin = 0; begin < n; begin += chunk_rows) {
      const int64_t rows = std::min(chunk_rows, n - begin);
      torch::Tensor gh = grad_h.narrow(0, begin, rows);
      total.add_(chunk_loss(hidden.narrow(0, begin, rows), weight, targets.narrow(0, begin, rows), inv_n, &gh, &grad_w));
    }
    ctx->save_for_backward({grad_h, grad_w.to(weight.scalar_type())});
    return total.mul_(inv_n);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor& g = grad_outputs[0];
    return {saved[0] * g.to(saved[0].scalar_type()), saved[1] * g.to(saved[1].scalar_type()), torch::Tensor(),
            torch::Tensor()};
  }
};

}  // namespace

torch::Tensor chunked_lm_loss(const torch::Tensor& hidden, const torch::Tensor& weight, const torch::Tensor& targets,
                              int64_t chunk_rows) {
  GB_CHECK(chunk_rows > 0, "chunk_rows ", chunk_rows);
  GB_CHECK(weight.dim() == 2 && hidden.size(-1) == weight.size(1), "hidden ", hidden.sizes(), " weight ",
           weight.sizes());
  GB_CHECK(targets.numel() * hidden.size(-1) == hidden.numel(), "hidden ", hidden.sizes(), " targets ",
           targets.sizes());
  const torch::Tensor h = hidden.reshape({-1, hidden.size(-1)});
  const torch::Tensor t = targets.reshape({-1});
  if (torch::GradMode::is_enabled() && (h.requires_grad() || weight.requires_grad()))
    return ChunkedLmLoss::apply(h, weight, t, chunk_rows);
  // Evaluation: the loss alone.
  torch::Tensor total = torch::zeros({}, h.options().dtype(torch::kFloat32));
  for (int64_t begin = 0; begin < h.size(0); begin += chunk_rows) {
    const int64_t rows = std::min(chunk_rows, h.size(0) - begin);
    total.add_(chunk_loss(h.narrow(0, begin, rows), weight, t.narrow(0, begin, rows), 0, nullptr, nullptr));
  }
  return total.div_(static_cast<double>(h.size(0)));
}

}  // namespace gradbox::model

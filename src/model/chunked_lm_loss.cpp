#include "model/chunked_lm_loss.h"

#include <ATen/autocast_mode.h>

#include "common/error.h"

namespace gradbox::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// One block of rows: its summed loss, and (when `grad_h`) its gradients: written into grad_h,
// and into grad_w for the first block or added to it after.
torch::Tensor chunk_loss(const torch::Tensor& h, const torch::Tensor& weight, const torch::Tensor& t, double inv_n,
                         torch::Tensor* grad_h, torch::Tensor* grad_w, bool first) {
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
      torch::Tensor block_grad_w = torch::matmul(logits.t(), h);
      first ? grad_w->copy_(block_grad_w) : grad_w->add_(block_grad_w);
    } else {
      // In place: no (V x C) temporary per chunk.
      torch::mm_out(*grad_h, logits, weight);
      first ? torch::mm_out(*grad_w, logits.t(), h) : grad_w->addmm_(logits.t(), h);
    }
  }
  return loss;
}

class ChunkedLmLoss : public torch::autograd::Function<ChunkedLmLoss> {
 public:
  // `kept_buffer` (may be null): Note [Head gradient into the kept .grad]. A pointer, as
  // autograd takes every tensor argument for an input.
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& hidden, const torch::Tensor& weight,
                               const torch::Tensor& targets, int64_t chunk_rows, const torch::Tensor* kept_buffer) {
    const torch::Tensor kept = kept_buffer ? *kept_buffer : torch::Tensor();
    const int64_t n = hidden.size(0);
    const double inv_n = 1.0 / static_cast<double>(n);
    torch::Tensor grad_h = torch::empty_like(hidden);
    // Not zeroed: the first block writes it.
    torch::Tensor grad_w = kept.defined() ? kept : torch::empty(weight.sizes(), weight.options().dtype(torch::kFloat32));
    if (n == 0) grad_w.zero_();
    torch::Tensor total = torch::zeros({}, hidden.options().dtype(torch::kFloat32));
    for (int64_t begin = 0; begin < n; begin += chunk_rows) {
      const int64_t rows = std::min(chunk_rows, n - begin);
      torch::Tensor gh = grad_h.narrow(0, begin, rows);
      total.add_(chunk_loss(hidden.narrow(0, begin, rows), weight, targets.narrow(0, begin, rows), inv_n, &gh, &grad_w,
                            begin == 0));
    }
    // Plain data rather than saved variables: backward hands each on as its only owner.
    ctx->saved_data["grad_h"] = grad_h;
    if (kept.defined()) {
      ctx->saved_data["kept"] = kept;
      ctx->saved_data["weight"] = weight;
    } else {
      ctx->saved_data["grad_w"] = grad_w.to(weight.scalar_type());
    }
    return total.mul_(inv_n);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const torch::Tensor& g = grad_outputs[0];
    // An incoming 1 (read for free on the host) needs no scaling pass.
    const bool unit = g.device().is_cpu() && g.item<double>() == 1.0;
    torch::Tensor grad_h = take(ctx, "grad_h");
    if (!unit) grad_h.mul_(g.to(grad_h.scalar_type()));
    if (ctx->saved_data.count("kept") == 0) {
      torch::Tensor grad_w = take(ctx, "grad_w");
      if (!unit) grad_w.mul_(g.to(grad_w.scalar_type()));
      return {grad_h, grad_w, torch::Tensor(), torch::Tensor(), torch::Tensor()};
    }
    const torch::Tensor kept = take(ctx, "kept"), weight = take(ctx, "weight");
    torch::Tensor into = weight.grad();
    GB_CHECK(into.defined() && into.sizes() == kept.sizes(), "the head's kept gradient buffer lost its .grad");
    unit ? into.add_(kept) : into.addcmul_(kept, g.to(kept.scalar_type()));
    // Nothing for autograd to add. The weight's post-accumulate hooks still run once (the
    // engine runs AccumulateGrad for an undefined gradient too; the test pins it).
    return {grad_h, torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }

 private:
  static torch::Tensor take(AutogradContext* ctx, const std::string& key) {
    auto it = ctx->saved_data.find(key);
    GB_CHECK(it != ctx->saved_data.end() && it->second.isTensor(),
             "the chunked LM loss was differentiated twice: its gradients are made once, in forward");
    torch::Tensor t = it->second.toTensor();
    ctx->saved_data.erase(it);
    return t;
  }
};

}  // namespace

torch::Tensor chunked_lm_loss(const torch::Tensor& hidden, const torch::Tensor& weight, const torch::Tensor& targets,
                              int64_t chunk_rows, torch::Tensor* kept_grad) {
  GB_CHECK(chunk_rows > 0, "chunk_rows ", chunk_rows);
  GB_CHECK(weight.dim() == 2 && hidden.size(-1) == weight.size(1), "hidden ", hidden.sizes(), " weight ",
           weight.sizes());
  GB_CHECK(targets.numel() * hidden.size(-1) == hidden.numel(), "hidden ", hidden.sizes(), " targets ",
           targets.sizes());
  const torch::Tensor h = hidden.reshape({-1, hidden.size(-1)});
  const torch::Tensor t = targets.reshape({-1});
  if (torch::GradMode::is_enabled() && (h.requires_grad() || weight.requires_grad())) {
    torch::Tensor kept;
    const torch::Tensor& into = weight.grad();
    if (kept_grad && weight.requires_grad() && into.defined() && !into.is_sparse() &&
        into.scalar_type() == torch::kFloat32) {
      if (!kept_grad->defined() || kept_grad->sizes() != weight.sizes() || kept_grad->device() != weight.device())
        *kept_grad = torch::empty(weight.sizes(), into.options());
      kept = *kept_grad;
    }
    return ChunkedLmLoss::apply(h, weight, t, chunk_rows, kept.defined() ? &kept : nullptr);
  }
  // Evaluation: the loss alone.
  torch::Tensor total = torch::zeros({}, h.options().dtype(torch::kFloat32));
  for (int64_t begin = 0; begin < h.size(0); begin += chunk_rows) {
    const int64_t rows = std::min(chunk_rows, h.size(0) - begin);
    total.add_(chunk_loss(h.narrow(0, begin, rows), weight, t.narrow(0, begin, rows), 0, nullptr, nullptr, false));
  }
  return total.div_(static_cast<double>(h.size(0)));
}

}  // namespace gradbox::model

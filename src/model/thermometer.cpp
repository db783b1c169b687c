#include "model/thermometer.h"

#include <cmath>

#include "common/error.h"

namespace gradbox::model {

void Thermometer::reset(int64_t n_layer, torch::Device device) {
  maxima_ = torch::zeros({kSites, n_layer}, torch::TensorOptions().dtype(torch::kFloat32).device(device));
}

void Thermometer::record(Site site, int64_t layer, const torch::Tensor& x) {
  GB_CHECK(maxima_.defined() && layer < maxima_.size(1), "thermometer: layer ", layer, " before reset");
  torch::NoGradGuard no_grad;
  torch::Tensor cell = maxima_.select(0, site).narrow(0, layer, 1);
  cell.copy_(torch::maximum(cell, x.detach().abs().amax().to(torch::kFloat32).reshape({1})));
}

void Thermometer::record_attention_logits(int64_t layer, const torch::Tensor& q, const torch::Tensor& k) {
  torch::NoGradGuard no_grad;
  const int64_t groups = q.size(1) / k.size(1), T = q.size(2);
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(3)));
  // A (heads, kQueryRows, T) block of logits at a time: 10 MB at GPT-2-Large's 20 heads and
  // block 1024, whatever the batch.
  constexpr int64_t kQueryRows = 128;
  for (int64_t b = 0; b < q.size(0); ++b) {
    torch::Tensor kb = k[b].detach().to(torch::kFloat32);
    if (groups > 1) kb = kb.repeat_interleave(groups, 0);
    const torch::Tensor kt = kb.transpose(1, 2);
    for (int64_t row = 0; row < T; row += kQueryRows) {
      const torch::Tensor qb = q[b].detach().narrow(1, row, std::min(kQueryRows, T - row)).to(torch::kFloat32);
      torch::Tensor scores = torch::matmul(qb, kt).mul_(scale);  // (heads, rows, T)
      record(attention_logits, layer, scores.abs_().tril_(row));  // query row + i sees keys <= row + i
    }
  }
}

std::map<std::string, std::vector<double>> Thermometer::read() const {
  const torch::Tensor host = maxima_.to(torch::kCPU, torch::kFloat64).contiguous();
  std::map<std::string, std::vector<double>> out;
  const char* names[kSites] = {"attention_logit_max", "mlp_output_max", "residual_max"};
  for (int s = 0; s < kSites; ++s) {
    const double* row = host[s].data_ptr<double>();
    out[names[s]] = std::vector<double>(row, row + host.size(1));
  }
  return out;
}

}  // namespace gradbox::model

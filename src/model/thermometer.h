#pragma once
// Note [Thermometers]
// YaLM's early warning for fp16 divergence: the largest magnitudes where overflow starts, per
// layer, every few steps. Three sites per layer:
//   - the attention logits q k^T / sqrt(head_dim) over the causal positions (fused attention
//     never materialises them, so a measured step computes them once more, 128 query rows of
//     one sequence at a time: B x heads x T^2 x head_dim extra multiply-adds per layer on that
//     step only, and at most heads x 128 x T fp32 logits alive);
//   - the MLP's output, before it is added to the residual stream;
//   - the residual stream after the layer.
// Maxima stay on the device until read(), one copy to the host per measured step, so a step
// that is not measured pays nothing and a measured one no synchronisation mid-step. Recomputed
// (checkpointed) layers record again; a running maximum makes that harmless.
#include <torch/torch.h>

#include <map>
#include <string>
#include <vector>

namespace gradbox::model {

class Thermometer {
 public:
  enum Site { attention_logits = 0, mlp_output = 1, residual = 2 };
  static constexpr int kSites = 3;

  // Zero maxima for n_layer layers, on `device`.
  void reset(int64_t n_layer, torch::Device device);
  void record(Site site, int64_t layer, const torch::Tensor& x);
  // q (B, nh, T, hs), k (B, nkv, T, hs), nkv dividing nh.
  void record_attention_logits(int64_t layer, const torch::Tensor& q, const torch::Tensor& k);
  // {"attention_logit_max": [...], "mlp_output_max": [...], "residual_max": [...]}, one per layer.
  std::map<std::string, std::vector<double>> read() const;

 private:
  torch::Tensor maxima_;  // (kSites, n_layer), fp32
};

// What a layer needs to report: the thermometer (null: not measuring) and its index.
struct ThermometerProbe {
  Thermometer* thermometer = nullptr;
  int64_t layer = 0;
};

}  // namespace gradbox::model

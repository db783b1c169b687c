#pragma once
// A LLaMA-style decoder as Hugging Face's LlamaForCausalLM computes it: rotary position
// embeddings (rotate_half convention, theta from the config), RMSNorm, SwiGLU feed-forward,
// grouped-query attention (n_kv_head key/value heads shared by groups of query heads), no
// biases unless asked, final norm and an lm_head that may be tied to the embedding.
// Module names mirror HF's (model.layers.0.self_attn.q_proj, ...); all layouts already match.
#include <torch/torch.h>

#include <memory>
#include <utility>
#include <vector>

#include "model/causal_lm.h"

namespace gradbox::model {

class LlamaRMSNorm : public torch::nn::Module {
 public:
  LlamaRMSNorm(int64_t dim, double eps);
  torch::Tensor forward(const torch::Tensor& x);

  torch::Tensor weight;
  double eps_;
};

// cos and sin tables (T, hs) for positions 0..T-1, float32, HF's layout: the frequencies
// repeated twice, cat(freqs, freqs).
struct RotaryTables {
  torch::Tensor cos, sin;
};
RotaryTables rotary_tables(int64_t T, int64_t head_dim, double theta, torch::Device device);
// x (B, nh, T, hs) -> x*cos + rotate_half(x)*sin, rotate_half(x) = cat(-x2, x1).
torch::Tensor apply_rotary(const torch::Tensor& x, const RotaryTables& rope);

class LlamaAttention : public torch::nn::Module {
 public:
  explicit LlamaAttention(const ModelConfig& c);
  torch::Tensor forward(const torch::Tensor& x, const RotaryTables& rope);  // (B, T, C)

  torch::nn::Linear q_proj{nullptr};  // C -> nh*hs
  torch::nn::Linear k_proj{nullptr};  // C -> nkv*hs
  torch::nn::Linear v_proj{nullptr};  // C -> nkv*hs
  torch::nn::Linear o_proj{nullptr};  // nh*hs -> C
  int64_t n_head_, n_kv_head_, head_dim_;
  double dropout_;
  ThermometerProbe probe;
};

class LlamaMLP : public torch::nn::Module {
 public:
  explicit LlamaMLP(const ModelConfig& c);
  torch::Tensor forward(const torch::Tensor& x);  // down(silu(gate(x)) * up(x))

  torch::nn::Linear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};
  double dropout_;
};

class LlamaDecoderLayer : public torch::nn::Module {
 public:
  explicit LlamaDecoderLayer(const ModelConfig& c);
  torch::Tensor forward(const torch::Tensor& x, const RotaryTables& rope);

  std::shared_ptr<LlamaAttention> self_attn;
  std::shared_ptr<LlamaMLP> mlp;
  std::shared_ptr<LlamaRMSNorm> input_layernorm, post_attention_layernorm;
  ThermometerProbe probe;
};

// HF's LlamaModel: the part named "model".
class LlamaModel : public torch::nn::Module {
 public:
  explicit LlamaModel(const ModelConfig& c);

  torch::nn::Embedding embed_tokens{nullptr};
  torch::nn::ModuleList layers{nullptr};
  std::vector<std::shared_ptr<LlamaDecoderLayer>> decoder_layers;  // the same as layers, typed
  std::shared_ptr<LlamaRMSNorm> norm;
};

class LlamaForCausalLM : public CausalLM {
 public:
  LlamaForCausalLM(const ModelConfig& config, uint64_t seed);

  // No fixed limit on T (positions are rotary), but block_size is what it was trained for.
  torch::Tensor hidden(const torch::Tensor& idx) override;
  torch::Tensor head_weight() override;
  torch::nn::Embedding token_embedding() override;
  void set_thermometer(Thermometer* thermometer) override;
  void set_dropout(double p) override;
  std::vector<std::pair<std::string, torch::Tensor>> hf_state_dict() const override;
  // Also accepts the rotary inv_freq buffers older transformers saved, and a stored copy of a
  // tied lm_head.weight; both are ignored.
  void load_hf_state_dict(const std::map<std::string, torch::Tensor>& tensors,
                          const std::string& where) override;

 private:
  const RotaryTables& rope_for(int64_t T, torch::Device device);

  std::shared_ptr<LlamaModel> model_;
  torch::nn::Linear lm_head_{nullptr};  // only when the head is not tied
  RotaryTables rope_cache_;             // not a buffer: derived from the config, never saved
};

}  // namespace gradbox::model

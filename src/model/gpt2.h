#pragma once
// GPT-2 as Hugging Face's GPT2LMHeadModel computes it: learned positions, pre-LayerNorm blocks,
// GELU (tanh approximation, HF "gelu_new"), LayerNorm eps from the config, head tied to wte.
// Module names mirror HF's (transformer.h.0.attn.c_attn, ...). HF stores the Conv1D matrices
// (c_attn, c_proj, c_fc) as (in, out); here they are ordinary Linear (out, in) and
// hf_state_dict() / load_hf_state_dict() transpose them.
#include <torch/torch.h>

#include <memory>
#include <vector>

#include "model/causal_lm.h"

namespace gradbox::model {

class GPT2Attention : public torch::nn::Module {
 public:
  explicit GPT2Attention(const ModelConfig& c);
  torch::Tensor forward(const torch::Tensor& x);  // (B, T, C) -> (B, T, C)

  torch::nn::Linear c_attn{nullptr};  // C -> 3C: q, k, v
  torch::nn::Linear c_proj{nullptr};  // C -> C
  int64_t n_head_;
  double dropout_;
  ThermometerProbe probe;
};

class GPT2MLP : public torch::nn::Module {
 public:
  explicit GPT2MLP(const ModelConfig& c);
  torch::Tensor forward(const torch::Tensor& x);  // (B, T, C) -> (B, T, C)

  torch::nn::Linear c_fc{nullptr};    // C -> ffn
  torch::nn::Linear c_proj{nullptr};  // ffn -> C
  double dropout_;
};

class GPT2Block : public torch::nn::Module {
 public:
  explicit GPT2Block(const ModelConfig& c);
  torch::Tensor forward(const torch::Tensor& x);  // (B, T, C) -> (B, T, C)

  torch::nn::LayerNorm ln_1{nullptr};
  std::shared_ptr<GPT2Attention> attn;
  torch::nn::LayerNorm ln_2{nullptr};
  std::shared_ptr<GPT2MLP> mlp;
  ThermometerProbe probe;
};

// HF's GPT2Model: the part named "transformer".
class GPT2Model : public torch::nn::Module {
 public:
  explicit GPT2Model(const ModelConfig& c);

  torch::nn::Embedding wte{nullptr};  // (V, C), also the output head
  torch::nn::Embedding wpe{nullptr};  // (block_size, C)
  torch::nn::ModuleList h{nullptr};
  std::vector<std::shared_ptr<GPT2Block>> blocks;  // the same modules as h, typed
  torch::nn::LayerNorm ln_f{nullptr};
};

class GPT2LMHeadModel : public CausalLM {
 public:
  GPT2LMHeadModel(const ModelConfig& config, uint64_t seed);

  torch::Tensor hidden(const torch::Tensor& idx) override;
  torch::Tensor head_weight() override;
  torch::nn::Embedding token_embedding() override;
  void set_thermometer(Thermometer* thermometer) override;
  void set_dropout(double p) override;
  GPT2Model& transformer() { return *transformer_; }
  std::vector<std::pair<std::string, torch::Tensor>> hf_state_dict() const override;
  // Also accepts GPT2Model checkpoints (names without "transformer.", like the original
  // openai-community/gpt2 files), the old attention-mask buffers (attn.bias, attn.masked_bias)
  // and a stored copy of the tied lm_head.weight; those three are ignored.
  void load_hf_state_dict(const std::map<std::string, torch::Tensor>& tensors,
                          const std::string& where) override;

 protected:
  bool hf_transposed(const std::string& param_name) const override;

 private:
  std::shared_ptr<GPT2Model> transformer_;
  double embd_dropout_;
};

}  // namespace gradbox::model

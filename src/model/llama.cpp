#include "model/llama.h"

#include "common/error.h"
#include "model/attention.h"
#include "model/checkpoint.h"

namespace gradbox::model {

namespace F = torch::nn::functional;

namespace {

torch::nn::Linear linear(int64_t in, int64_t out, bool bias) {
  return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(bias));
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

torch::Tensor rotate_half(const torch::Tensor& x) {
  const int64_t half = x.size(-1) / 2;
  return torch::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

}  // namespace

LlamaRMSNorm::LlamaRMSNorm(int64_t dim, double eps)
    : weight(register_parameter("weight", torch::ones({dim}))), eps_(eps) {}

torch::Tensor LlamaRMSNorm::forward(const torch::Tensor& x) {
  return at::rms_norm(x, {weight.size(0)}, weight, eps_);
}

RotaryTables rotary_tables(int64_t T, int64_t head_dim, double theta, torch::Device device) {
  // As HF computes them, in float32: inv_freq = 1 / theta^(2i/hs), angle = position * inv_freq.
  auto opts = torch::TensorOptions().dtype(torch::kFloat).device(device);
  torch::Tensor exponent = torch::arange(0, head_dim, 2, opts.dtype(torch::kLong)).to(torch::kFloat) /
                           static_cast<double>(head_dim);
  torch::Tensor inv_freq = 1.0 / torch::pow(theta, exponent);            // (hs/2)
  torch::Tensor pos = torch::arange(T, opts.dtype(torch::kLong)).to(torch::kFloat);  // (T)
  torch::Tensor freqs = torch::outer(pos, inv_freq);                     // (T, hs/2)
  torch::Tensor emb = torch::cat({freqs, freqs}, -1);                    // (T, hs)
  return {emb.cos(), emb.sin()};
}

torch::Tensor apply_rotary(const torch::Tensor& x, const RotaryTables& rope) {
  const int64_t T = x.size(2);
  torch::Tensor cos = rope.cos.narrow(0, 0, T).to(x.scalar_type());      // (T, hs)
  torch::Tensor sin = rope.sin.narrow(0, 0, T).to(x.scalar_type());
  return x * cos + rotate_half(x) * sin;                                 // (B, nh, T, hs)
}

LlamaAttention::LlamaAttention(const ModelConfig& c)
    : q_proj(register_module("q_proj", linear(c.n_embd, c.n_head * c.head_dim(), c.bias))),
      k_proj(register_module("k_proj", linear(c.n_embd, c.kv_dim(), c.bias))),
      v_proj(register_module("v_proj", linear(c.n_embd, c.kv_dim(), c.bias))),
      o_proj(register_module("o_proj", linear(c.n_head * c.head_dim(), c.n_embd, c.bias))),
      n_head_(c.n_head),
      n_kv_head_(c.n_kv_head),
      head_dim_(c.head_dim()),
      dropout_(c.dropout) {}

torch::Tensor LlamaAttention::forward(const torch::Tensor& x, const RotaryTables& rope) {
  const int64_t B = x.size(0), T = x.size(1);
  auto heads = [&](const torch::Tensor& t, int64_t n) {
    return t.view({B, T, n, head_dim_}).transpose(1, 2);                 // (B, n, T, hs)
  };
  torch::Tensor q = apply_rotary(heads(q_proj(x), n_head_), rope);       // (B, nh, T, hs)
  torch::Tensor k = apply_rotary(heads(k_proj(x), n_kv_head_), rope);    // (B, nkv, T, hs)
  torch::Tensor v = heads(v_proj(x), n_kv_head_);                        // (B, nkv, T, hs)
  const double p = is_training() ? dropout_ : 0.0;
  if (probe.thermometer) probe.thermometer->record_attention_logits(probe.layer, q, k);
  torch::Tensor y = causal_attention(q, k, v, p);                        // (B, nh, T, hs)
  y = y.transpose(1, 2).contiguous().view({B, T, n_head_ * head_dim_});  // (B, T, nh*hs)
  return F::dropout(o_proj(y), F::DropoutFuncOptions().p(dropout_).training(is_training()));
}

LlamaMLP::LlamaMLP(const ModelConfig& c)
    : gate_proj(register_module("gate_proj", linear(c.n_embd, c.ffn_dim(), c.bias))),
      up_proj(register_module("up_proj", linear(c.n_embd, c.ffn_dim(), c.bias))),
      down_proj(register_module("down_proj", linear(c.ffn_dim(), c.n_embd, c.bias))),
      dropout_(c.dropout) {}

torch::Tensor LlamaMLP::forward(const torch::Tensor& x) {
  torch::Tensor h = F::silu(gate_proj(x)) * up_proj(x);                  // (B, T, ffn)
  return F::dropout(down_proj(h), F::DropoutFuncOptions().p(dropout_).training(is_training()));
}

LlamaDecoderLayer::LlamaDecoderLayer(const ModelConfig& c)
    : self_attn(register_module("self_attn", std::make_shared<LlamaAttention>(c))),
      mlp(register_module("mlp", std::make_shared<LlamaMLP>(c))),
      input_layernorm(register_module("input_layernorm",
                                      std::make_shared<LlamaRMSNorm>(c.n_embd, c.norm_eps))),
      post_attention_layernorm(register_module(
          "post_attention_layernorm", std::make_shared<LlamaRMSNorm>(c.n_embd, c.norm_eps))) {}

torch::Tensor LlamaDecoderLayer::forward(const torch::Tensor& x, const RotaryTables& rope) {
  torch::Tensor h = x + self_attn->forward(input_layernorm->forward(x), rope);
  torch::Tensor m = mlp->forward(post_attention_layernorm->forward(h));
  torch::Tensor out = h + m;
  if (probe.thermometer) {
    probe.thermometer->record(Thermometer::mlp_output, probe.layer, m);
    probe.thermometer->record(Thermometer::residual, probe.layer, out);
  }
  return out;
}

LlamaModel::LlamaModel(const ModelConfig& c)
    : embed_tokens(register_module("embed_tokens", torch::nn::Embedding(c.vocab_size, c.n_embd))),
      layers(register_module("layers", torch::nn::ModuleList())) {
  for (int64_t i = 0; i < c.n_layer; ++i) {
    decoder_layers.push_back(std::make_shared<LlamaDecoderLayer>(c));
    layers->push_back(decoder_layers.back());
  }
  norm = register_module("norm", std::make_shared<LlamaRMSNorm>(c.n_embd, c.norm_eps));
}

LlamaForCausalLM::LlamaForCausalLM(const ModelConfig& config, uint64_t seed) : CausalLM(config) {
  GB_CHECK(config_.arch == Arch::llama, "LlamaForCausalLM built from a ", to_string(config_.arch),
           " config");
  model_ = register_module("model", std::make_shared<LlamaModel>(config_));
  if (!config_.tie_embeddings) {
    lm_head_ = register_module("lm_head", linear(config_.n_embd, config_.vocab_size, false));
  }
  mark_no_decay("model.embed_tokens.weight");
  init_weights(seed, {".self_attn.o_proj.weight", ".mlp.down_proj.weight"});
}

const RotaryTables& LlamaForCausalLM::rope_for(int64_t T, torch::Device device) {
  if (!rope_cache_.cos.defined() || rope_cache_.cos.device() != device ||
      rope_cache_.cos.size(0) < T) {
    rope_cache_ = rotary_tables(std::max(T, config_.block_size), config_.head_dim(),
                                config_.rope_theta, device);
  }
  return rope_cache_;
}

torch::Tensor LlamaForCausalLM::hidden(const torch::Tensor& idx) {
  GB_CHECK(idx.dim() == 2 && idx.scalar_type() == torch::kLong, "idx must be (B, T) int64, got ",
           idx.sizes(), " ", idx.scalar_type());
  torch::Tensor x = model_->embed_tokens(idx);                           // (B, T, C)
  const RotaryTables rope = rope_for(idx.size(1), idx.device());         // shared by all layers
  const auto& layers = model_->decoder_layers;
  for (int64_t i = 0; i < static_cast<int64_t>(layers.size()); ++i) {
    LlamaDecoderLayer* layer = layers[i].get();
    if (checkpointing_.applies_to(i, config_.n_layer)) {
      x = checkpoint([layer, rope](const torch::Tensor& in) { return layer->forward(in, rope); }, x);
    } else {
      x = layer->forward(x, rope);
    }
  }
  return model_->norm->forward(x);
}

void LlamaForCausalLM::set_thermometer(Thermometer* thermometer) {
  for (size_t i = 0; i < model_->decoder_layers.size(); ++i) {
    LlamaDecoderLayer& layer = *model_->decoder_layers[i];
    layer.probe = layer.self_attn->probe = {thermometer, static_cast<int64_t>(i)};
  }
}

torch::Tensor LlamaForCausalLM::head_weight() {
  return config_.tie_embeddings ? model_->embed_tokens->weight : lm_head_->weight;
}

torch::nn::Embedding LlamaForCausalLM::token_embedding() { return model_->embed_tokens; }

void LlamaForCausalLM::set_dropout(double p) {
  GB_REQUIRE(p >= 0.0 && p < 1.0, "dropout must be in [0, 1), got ", p);
  config_.dropout = p;
  for (auto& layer : model_->decoder_layers) {
    layer->self_attn->dropout_ = p;
    layer->mlp->dropout_ = p;
  }
}

std::vector<std::pair<std::string, torch::Tensor>> LlamaForCausalLM::hf_state_dict() const {
  return export_hf_tensors();  // a tied lm_head is no parameter here, as in HF's files
}

void LlamaForCausalLM::load_hf_state_dict(const std::map<std::string, torch::Tensor>& tensors,
                                          const std::string& where) {
  std::map<std::string, torch::Tensor> params;
  for (const auto& [name, t] : tensors) {
    if (ends_with(name, ".rotary_emb.inv_freq")) continue;  // a buffer in older checkpoints
    if (name == "lm_head.weight" && config_.tie_embeddings) continue;
    params.emplace(name, t);
  }
  import_hf_tensors(params, where);
}

}  // namespace gradbox::model

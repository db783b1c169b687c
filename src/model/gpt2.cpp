#include "model/gpt2.h"

#include "common/error.h"
#include "model/attention.h"
#include "model/checkpoint.h"

namespace gradbox::model {

namespace F = torch::nn::functional;

namespace {

torch::nn::Linear linear(int64_t in, int64_t out) {
  return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(true));
}

torch::nn::LayerNorm layer_norm(const ModelConfig& c) {
  return torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.n_embd}).eps(c.norm_eps));
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

GPT2Attention::GPT2Attention(const ModelConfig& c)
    : c_attn(register_module("c_attn", linear(c.n_embd, 3 * c.n_embd))),
      c_proj(register_module("c_proj", linear(c.n_embd, c.n_embd))),
      n_head_(c.n_head),
      dropout_(c.dropout) {}

torch::Tensor GPT2Attention::forward(const torch::Tensor& x) {
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2), hs = C / n_head_;
  auto qkv = c_attn(x).split(C, /*dim=*/2);                      // 3 x (B, T, C)
  auto heads = [&](const torch::Tensor& t) {
    return t.view({B, T, n_head_, hs}).transpose(1, 2);          // (B, nh, T, hs)
  };
  const double p = is_training() ? dropout_ : 0.0;
  if (probe.thermometer) probe.thermometer->record_attention_logits(probe.layer, heads(qkv[0]), heads(qkv[1]));
  torch::Tensor y = causal_attention(heads(qkv[0]), heads(qkv[1]), heads(qkv[2]), p);
  y = y.transpose(1, 2).contiguous().view({B, T, C});           // (B, T, C)
  return F::dropout(c_proj(y), F::DropoutFuncOptions().p(dropout_).training(is_training()));
}

GPT2MLP::GPT2MLP(const ModelConfig& c)
    : c_fc(register_module("c_fc", linear(c.n_embd, c.ffn_dim()))),
      c_proj(register_module("c_proj", linear(c.ffn_dim(), c.n_embd))),
      dropout_(c.dropout) {}

torch::Tensor GPT2MLP::forward(const torch::Tensor& x) {
  torch::Tensor h = torch::gelu(c_fc(x), "tanh");                // (B, T, ffn)
  return F::dropout(c_proj(h), F::DropoutFuncOptions().p(dropout_).training(is_training()));
}

GPT2Block::GPT2Block(const ModelConfig& c)
    : ln_1(register_module("ln_1", layer_norm(c))),
      attn(register_module("attn", std::make_shared<GPT2Attention>(c))),
      ln_2(register_module("ln_2", layer_norm(c))),
      mlp(register_module("mlp", std::make_shared<GPT2MLP>(c))) {}

torch::Tensor GPT2Block::forward(const torch::Tensor& x) {
  torch::Tensor y = x + attn->forward(ln_1(x));
  torch::Tensor m = mlp->forward(ln_2(y));
  torch::Tensor out = y + m;
  if (probe.thermometer) {
    probe.thermometer->record(Thermometer::mlp_output, probe.layer, m);
    probe.thermometer->record(Thermometer::residual, probe.layer, out);
  }
  return out;
}

GPT2Model::GPT2Model(const ModelConfig& c)
    : wte(register_module("wte", torch::nn::Embedding(c.vocab_size, c.n_embd))),
      wpe(register_module("wpe", torch::nn::Embedding(c.block_size, c.n_embd))),
      h(register_module("h", torch::nn::ModuleList())) {
  for (int64_t i = 0; i < c.n_layer; ++i) {
    blocks.push_back(std::make_shared<GPT2Block>(c));
    h->push_back(blocks.back());
  }
  ln_f = register_module("ln_f", layer_norm(c));
}

GPT2LMHeadModel::GPT2LMHeadModel(const ModelConfig& config, uint64_t seed)
    : CausalLM(config), embd_dropout_(config.dropout) {
  GB_CHECK(config_.arch == Arch::gpt2, "GPT2LMHeadModel built from a ", to_string(config_.arch),
           " config");
  transformer_ = register_module("transformer", std::make_shared<GPT2Model>(config_));
  mark_no_decay("transformer.wte.weight");
  mark_no_decay("transformer.wpe.weight");
  init_weights(seed, {".attn.c_proj.weight", ".mlp.c_proj.weight"});
}

torch::Tensor GPT2LMHeadModel::hidden(const torch::Tensor& idx) {
  GB_CHECK(idx.dim() == 2 && idx.scalar_type() == torch::kLong, "idx must be (B, T) int64, got ",
           idx.sizes(), " ", idx.scalar_type());
  const int64_t T = idx.size(1);
  GB_REQUIRE(T <= config_.block_size, "gpt2: sequence length ", T, " exceeds block_size ",
             config_.block_size);
  torch::Tensor pos = torch::arange(T, idx.options());            // (T)
  torch::Tensor x = transformer_->wte(idx) + transformer_->wpe(pos);  // (B, T, C)
  x = F::dropout(x, F::DropoutFuncOptions().p(embd_dropout_).training(is_training()));
  const auto& blocks = transformer_->blocks;
  for (int64_t i = 0; i < static_cast<int64_t>(blocks.size()); ++i) {
    GPT2Block* block = blocks[i].get();
    if (checkpointing_.applies_to(i, config_.n_layer)) {
      x = checkpoint([block](const torch::Tensor& in) { return block->forward(in); }, x);
    } else {
      x = block->forward(x);
    }
  }
  return transformer_->ln_f(x);
}

void GPT2LMHeadModel::set_thermometer(Thermometer* thermometer) {
  for (size_t i = 0; i < transformer_->blocks.size(); ++i) {
    GPT2Block& block = *transformer_->blocks[i];
    block.probe = block.attn->probe = {thermometer, static_cast<int64_t>(i)};
  }
}

torch::Tensor GPT2LMHeadModel::head_weight() { return transformer_->wte->weight; }  // tied
torch::nn::Embedding GPT2LMHeadModel::token_embedding() { return transformer_->wte; }

void GPT2LMHeadModel::set_dropout(double p) {
  GB_REQUIRE(p >= 0.0 && p < 1.0, "dropout must be in [0, 1), got ", p);
  config_.dropout = p;
  embd_dropout_ = p;
  for (auto& block : transformer_->blocks) {
    block->attn->dropout_ = p;
    block->mlp->dropout_ = p;
  }
}

bool GPT2LMHeadModel::hf_transposed(const std::string& name) const {
  return ends_with(name, ".c_attn.weight") || ends_with(name, ".c_proj.weight") ||
         ends_with(name, ".c_fc.weight");
}

std::vector<std::pair<std::string, torch::Tensor>> GPT2LMHeadModel::hf_state_dict() const {
  return export_hf_tensors();  // the tied lm_head is no parameter here, as in HF's files
}

void GPT2LMHeadModel::load_hf_state_dict(const std::map<std::string, torch::Tensor>& tensors,
                                         const std::string& where) {
  std::map<std::string, torch::Tensor> params;
  for (const auto& [name, t] : tensors) {
    if (ends_with(name, ".attn.bias") || ends_with(name, ".attn.masked_bias") ||
        name == "lm_head.weight") {
      continue;  // causal-mask buffers of older transformers; the tied head
    }
    const std::string full = name.rfind("transformer.", 0) == 0 ? name : "transformer." + name;
    GB_REQUIRE(params.emplace(full, t).second, where, ": tensor '", name,
               "' is present with and without the 'transformer.' prefix");
  }
  import_hf_tensors(params, where);
}

}  // namespace gradbox::model

#include "model/causal_lm.h"

#include <cmath>

#include "common/error.h"
#include "model/chunked_lm_loss.h"
#include "model/gpt2.h"
#include "model/llama.h"

namespace gradbox::model {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string shape_str(at::IntArrayRef sizes) { return gradbox::str(sizes); }

}  // namespace

CausalLM::CausalLM(ModelConfig config) : config_(std::move(config)) { config_.validate(); }

void CausalLM::set_activation_checkpointing(const ActivationCheckpointing& ac) {
  ac.validate(config_.n_layer);
  checkpointing_ = ac;
}

bool CausalLM::is_no_decay(const std::string& param_name) const {
  const auto params = named_parameters();
  const torch::Tensor* p = params.find(param_name);
  GB_CHECK(p != nullptr, "no parameter named '", param_name, "'");
  return p->dim() < 2 || no_decay_.count(param_name) > 0;
}

void CausalLM::init_weights(uint64_t seed, const std::vector<std::string>& residual_suffixes) {
  torch::NoGradGuard no_grad;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const double kStd = 0.02;
  const double residual_std = kStd / std::sqrt(2.0 * static_cast<double>(config_.n_layer));
  for (auto& item : named_parameters()) {
    const std::string& name = item.key();
    torch::Tensor& p = item.value();
    GB_CHECK(p.device().is_cpu(), "init_weights runs before the model moves: ", name);
    if (ends_with(name, ".bias")) {
      p.zero_();
    } else if (p.dim() == 1) {
      p.fill_(1.0);  // LayerNorm / RMSNorm gain
    } else {
      bool residual = false;
      for (const auto& suffix : residual_suffixes) residual = residual || ends_with(name, suffix);
      p.normal_(0.0, residual ? residual_std : kStd, gen);
    }
  }
}

std::vector<std::pair<std::string, torch::Tensor>> CausalLM::export_hf_tensors() const {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& item : named_parameters()) {
    torch::Tensor t = item.value().detach();
    if (hf_transposed(item.key())) t = t.t();
    // contiguous() may return t itself: to(..., copy=true) makes sure we hand out a copy.
    out.emplace_back(item.key(), t.contiguous().to(torch::kCPU, /*non_blocking=*/false,
                                                  /*copy=*/true));
  }
  return out;
}

void CausalLM::import_hf_tensors(const std::map<std::string, torch::Tensor>& tensors,
                                 const std::string& where) {
  const auto params = named_parameters();
  // Check everything before changing anything: a bad file leaves the model as it was.
  for (const auto& item : params) {
    const std::string& name = item.key();
    auto it = tensors.find(name);
    GB_REQUIRE(it != tensors.end(), where, ": tensor '", name, "' is missing");
    std::vector<int64_t> expected = item.value().sizes().vec();
    if (hf_transposed(name)) std::swap(expected[0], expected[1]);
    GB_REQUIRE(it->second.sizes().vec() == expected, where, ": tensor '", name, "' has shape ",
               shape_str(it->second.sizes()), ", expected ", shape_str(expected));
    GB_REQUIRE(it->second.is_floating_point(), where, ": tensor '", name, "' has dtype ",
               it->second.scalar_type(), ", expected a floating-point type");
  }
  for (const auto& [name, t] : tensors) {
    GB_REQUIRE(params.contains(name), where, ": unexpected tensor '", name, "' (shape ",
               shape_str(t.sizes()), ") for a ", to_string(config_.arch), " model with ",
               config_.n_layer, " layers");
  }
  torch::NoGradGuard no_grad;
  for (auto& item : params) {
    const torch::Tensor& src = tensors.at(item.key());
    item.value().copy_(hf_transposed(item.key()) ? src.t() : src);  // converts dtype and device
  }
}

std::shared_ptr<CausalLM> make_model(const ModelConfig& config, uint64_t seed) {
  config.validate();
  switch (config.arch) {
    case Arch::gpt2: return std::make_shared<GPT2LMHeadModel>(config, seed);
    case Arch::llama: return std::make_shared<LlamaForCausalLM>(config, seed);
  }
  GB_CHECK(false, "unknown arch ", static_cast<int>(config.arch));
  return nullptr;
}

torch::Tensor CausalLM::forward(const torch::Tensor& idx) {
  return torch::nn::functional::linear(hidden(idx), head_weight());
}

torch::Tensor CausalLM::loss(const torch::Tensor& idx, const torch::Tensor& targets, int64_t head_chunk_rows) {
  if (head_chunk_rows <= 0) return language_model_loss(forward(idx), targets);
  return chunked_lm_loss(hidden(idx), head_weight(), targets, head_chunk_rows,
                         kept_grad_buffers_ ? &head_grad_ : nullptr);
}

void CausalLM::set_kept_grad_buffers(bool on) {
  kept_grad_buffers_ = on;
  token_embedding()->options.sparse(on);
  if (!on) head_grad_ = torch::Tensor();
}

torch::Tensor language_model_loss(const torch::Tensor& logits, const torch::Tensor& targets) {
  GB_CHECK(logits.dim() == 3 && targets.dim() == 2 && logits.size(0) == targets.size(0) &&
               logits.size(1) == targets.size(1),
           "logits ", logits.sizes(), " targets ", targets.sizes());
  const int64_t vocab = logits.size(2);
  return torch::nn::functional::cross_entropy(logits.reshape({-1, vocab}).to(torch::kFloat),
                                              targets.reshape({-1}));
}

}  // namespace gradbox::model

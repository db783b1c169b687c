#pragma once
// The interface the trainer sees: a decoder-only language model, whatever its architecture.
// Parameter names mirror Hugging Face's (transformer.h.0.attn.c_attn.weight,
// model.layers.0.self_attn.q_proj.weight, ...), so the mapping to HF files is obvious; the
// layouts are LibTorch's (Linear weights are (out, in)) and hf_state_dict() converts.
#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "model/config.h"
#include "model/thermometer.h"

namespace gradbox::model {

class CausalLM : public torch::nn::Module {
 public:
  explicit CausalLM(ModelConfig config);

  // (B, T) int64 token ids -> (B, T, vocab_size) logits, float.
  torch::Tensor forward(const torch::Tensor& idx);
  // (B, T) int64 token ids -> (B, T, n_embd): the final norm's output, the LM head's input.
  virtual torch::Tensor hidden(const torch::Tensor& idx) = 0;
  // The LM head's weight (vocab_size, n_embd): the token embedding when they are tied.
  virtual torch::Tensor head_weight() = 0;
  // The token embedding table (vocab_size, n_embd).
  virtual torch::nn::Embedding token_embedding() = 0;
  // Note [Kept gradient buffers]
  // For a model whose .grad tensors are kept dense buffers (FlatParameters), backward can add
  // into them directly instead of handing autograd vocab x C tensors made fresh every step:
  //  - the token embedding gives autograd its batch's rows alone (a sparse gradient), not a
  //    vocab x C table of zeros with a few hundred rows added (154 MB at GPT-2's vocabulary),
  //    and AccumulateGrad adds those rows into .grad;
  //  - the chunked head adds its weight gradient straight into .grad (Note [Head gradient
  //    into the kept .grad] in chunked_lm_loss.h), from a buffer the model keeps.
  // Off by default: a parameter with no .grad would be handed the sparse tensor itself.
  void set_kept_grad_buffers(bool on);
  // Mean cross-entropy of the next tokens: language_model_loss(forward(idx), targets), or with
  // head_chunk_rows > 0 the chunked head (Note [Chunked LM head] in chunked_lm_loss.h).
  torch::Tensor loss(const torch::Tensor& idx, const torch::Tensor& targets, int64_t head_chunk_rows = 0);
  // Every layer reports its maxima to `thermometer` from the next forward on (Note
  // [Thermometers] in thermometer.h); nullptr stops it.
  virtual void set_thermometer(Thermometer* thermometer) = 0;
  // Dropout probability of every dropout site; takes effect from the next forward.
  virtual void set_dropout(double p) = 0;
  // Which blocks recompute activations in backward (Note [Activation checkpointing] in
  // checkpoint.h); InputError naming --activation-checkpointing for a layer that does not exist.
  virtual void set_activation_checkpointing(const ActivationCheckpointing& ac);
  // Hugging Face names and layouts (GPT-2's Conv1D weights transposed to (in, out)); a tied
  // head is omitted as HF's save_pretrained omits it. Tensors are copies, detached.
  virtual std::vector<std::pair<std::string, torch::Tensor>> hf_state_dict() const = 0;
  // The inverse of hf_state_dict(). A missing, unexpected or wrongly shaped tensor throws
  // InputError naming `where` and the tensor. Values are converted to the parameter's dtype.
  virtual void load_hf_state_dict(const std::map<std::string, torch::Tensor>& tensors,
                                  const std::string& where) = 0;

  const ModelConfig& config() const { return config_; }
  const ActivationCheckpointing& activation_checkpointing() const { return checkpointing_; }
  // Biases, norm weights and embeddings take no weight decay. `param_name` is a name from
  // named_parameters(); an unknown name is a bug (GB_CHECK).
  bool is_no_decay(const std::string& param_name) const;

 protected:
  // Derived constructors name their embedding tables here.
  void mark_no_decay(const std::string& param_name) { no_decay_.insert(param_name); }
  // Re-initialises every parameter from `seed`: matrices and embeddings normal(0, 0.02), biases
  // 0, norm weights 1, and the residual output projections (names ending in one of
  // `residual_suffixes`) normal(0, 0.02/sqrt(2*n_layer)), as nanoGPT does. Uses its own
  // generator, so a seed gives the same weights whatever the global RNG did before.
  void init_weights(uint64_t seed, const std::vector<std::string>& residual_suffixes);

  // Parameter names already are HF's; what differs is the layout of some matrices.
  virtual bool hf_transposed(const std::string& param_name) const { return false; }
  // All parameters in HF layout, on the CPU, copied.
  std::vector<std::pair<std::string, torch::Tensor>> export_hf_tensors() const;
  // Strict inverse of export_hf_tensors(): every parameter present with its HF shape, no
  // other tensor. Callers drop tensors HF files may carry that are not parameters first.
  void import_hf_tensors(const std::map<std::string, torch::Tensor>& tensors,
                         const std::string& where);

  ModelConfig config_;
  ActivationCheckpointing checkpointing_;

 private:
  std::set<std::string> no_decay_;
  bool kept_grad_buffers_ = false;
  torch::Tensor head_grad_;  // Note [Kept gradient buffers]
};

// Builds the architecture named by config.arch (after config.validate()), initialised
// deterministically from `seed`, on the CPU in float32.
std::shared_ptr<CausalLM> make_model(const ModelConfig& config, uint64_t seed);

// Mean cross entropy over all B*T positions; logits (B, T, V), targets (B, T) int64.
// Computed in float32 whatever the logits' dtype.
torch::Tensor language_model_loss(const torch::Tensor& logits, const torch::Tensor& targets);

}  // namespace gradbox::model

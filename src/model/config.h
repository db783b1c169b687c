#pragma once
// The shape of a model: one place where its defaults live. No LibTorch here, so the CLI and
// config code can read, validate and size models without it.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/activation_checkpointing.h"

namespace gradbox::model {

enum class Arch { gpt2, llama };

std::string to_string(Arch arch);
Arch parse_arch(const std::string& name, const std::string& where);  // InputError naming `where`

struct ModelConfig {
  Arch arch = Arch::gpt2;
  int64_t vocab_size = 50257;
  int64_t block_size = 1024;  // longest sequence; GPT-2's learned positions end here
  int64_t n_layer = 12;
  int64_t n_head = 12;
  int64_t n_kv_head = 12;     // gpt2: == n_head; llama: divides n_head (grouped-query attention)
  int64_t n_embd = 768;
  int64_t ffn_hidden = 0;     // 0: derived, see ffn_dim()
  int64_t ffn_multiple_of = 64;
  double dropout = 0.0;
  bool bias = true;            // gpt2: always true; llama: false unless asked
  bool tie_embeddings = true;  // gpt2: always tied; llama: optional
  double rope_theta = 10000.0;
  double norm_eps = 1e-5;

  int64_t head_dim() const { return n_embd / n_head; }
  int64_t kv_dim() const { return n_kv_head * head_dim(); }
  // gpt2: 4*d; llama: int(4*d*2/3) rounded up to a multiple of ffn_multiple_of.
  int64_t ffn_dim() const;

  // InputError naming the offending key and the values involved.
  void validate() const;
  nlohmann::json to_json() const;
  // Unknown keys and wrong types -> InputError naming `where` and the key. The optional key
  // "preset" starts from that preset; then "arch" (defaults for llama: bias false), then the
  // rest. n_kv_head defaults to n_head. The result is validated.
  static ModelConfig from_json(const nlohmann::json& j, const std::string& where);
  // InputError "--model: unknown preset 'x' (known: ...)".
  static ModelConfig preset(const std::string& name);
  static std::vector<std::string> preset_names();

  // Analytic count of trainable parameters; a tied head is counted once.
  int64_t parameter_count() const;
};

}  // namespace gradbox::model

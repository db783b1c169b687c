#include "model/config.h"

#include <map>
#include <set>

#include "common/error.h"

namespace gradbox::model {

namespace {

struct Preset {
  const char* name;
  ModelConfig config;
};

ModelConfig gpt2_shape(int64_t n_layer, int64_t n_head, int64_t n_embd, int64_t block_size,
                       int64_t vocab_size) {
  ModelConfig c;
  c.arch = Arch::gpt2;
  c.n_layer = n_layer;
  c.n_head = c.n_kv_head = n_head;
  c.n_embd = n_embd;
  c.block_size = block_size;
  c.vocab_size = vocab_size;
  return c;
}

ModelConfig llama_shape(int64_t n_layer, int64_t n_head, int64_t n_kv_head, int64_t n_embd,
                        int64_t block_size, int64_t vocab_size, bool tie) {
  ModelConfig c = gpt2_shape(n_layer, n_head, n_embd, block_size, vocab_size);
  c.arch = Arch::llama;
  c.n_kv_head = n_kv_head;
  c.bias = false;
  c.tie_embeddings = tie;
  return c;
}

// The four GPT-2 sizes match Hugging Face's parameter counts exactly (tied head).
// The tiny presets are for tests; the mini ones (~7-9M parameters, 8192 tokens, block 256)
// train in minutes on two CPU cores. Set vocab_size to the tokenizer's when it differs.
const std::vector<Preset>& presets() {
  static const std::vector<Preset> kPresets = {
      {"gpt2", gpt2_shape(12, 12, 768, 1024, 50257)},
      {"gpt2-medium", gpt2_shape(24, 16, 1024, 1024, 50257)},
      {"gpt2-large", gpt2_shape(36, 20, 1280, 1024, 50257)},
      {"gpt2-xl", gpt2_shape(48, 25, 1600, 1024, 50257)},
      {"gpt2-mini", gpt2_shape(6, 4, 256, 256, 8192)},
      {"gpt2-tiny", gpt2_shape(2, 2, 64, 64, 512)},
      {"llama-mini", llama_shape(6, 4, 2, 256, 256, 8192, /*tie=*/false)},
      {"llama-tiny", llama_shape(2, 4, 2, 64, 64, 512, /*tie=*/false)},
  };
  return kPresets;
}

std::string known_keys_list(const std::set<std::string>& keys) {
  std::string out;
  for (const auto& k : keys) out += (out.empty() ? "" : ", ") + k;
  return out;
}

int64_t get_int(const nlohmann::json& v, const std::string& where, const std::string& key) {
  GB_REQUIRE(v.is_number_integer(), where, ": key '", key, "' must be an integer, got ", v.dump());
  return v.get<int64_t>();
}

double get_double(const nlohmann::json& v, const std::string& where, const std::string& key) {
  GB_REQUIRE(v.is_number(), where, ": key '", key, "' must be a number, got ", v.dump());
  return v.get<double>();
}

bool get_bool(const nlohmann::json& v, const std::string& where, const std::string& key) {
  GB_REQUIRE(v.is_boolean(), where, ": key '", key, "' must be true or false, got ", v.dump());
  return v.get<bool>();
}

std::string get_string(const nlohmann::json& v, const std::string& where, const std::string& key) {
  GB_REQUIRE(v.is_string(), where, ": key '", key, "' must be a string, got ", v.dump());
  return v.get<std::string>();
}

}  // namespace

std::string to_string(Arch arch) { return arch == Arch::gpt2 ? "gpt2" : "llama"; }

Arch parse_arch(const std::string& name, const std::string& where) {
  if (name == "gpt2") return Arch::gpt2;
  if (name == "llama") return Arch::llama;
  throw InputError(str(where, ": unknown arch '", name, "' (known: gpt2, llama)"));
}

int64_t ModelConfig::ffn_dim() const {
  if (ffn_hidden > 0) return ffn_hidden;
  if (arch == Arch::gpt2) return 4 * n_embd;
  // SwiGLU has three matrices instead of two: 2/3 of 4d keeps the parameter count.
  const int64_t hidden = 4 * n_embd * 2 / 3;
  return (hidden + ffn_multiple_of - 1) / ffn_multiple_of * ffn_multiple_of;
}

void ModelConfig::validate() const {
  const char* kWhere = "model config";
  auto positive = [&](int64_t v, const char* key) {
    GB_REQUIRE(v > 0, kWhere, ": ", key, " must be positive, got ", v);
  };
  positive(vocab_size, "vocab_size");
  positive(block_size, "block_size");
  positive(n_layer, "n_layer");
  positive(n_head, "n_head");
  positive(n_kv_head, "n_kv_head");
  positive(n_embd, "n_embd");
  positive(ffn_multiple_of, "ffn_multiple_of");
  GB_REQUIRE(ffn_hidden >= 0, kWhere, ": ffn_hidden must be >= 0 (0: derived), got ", ffn_hidden);
  GB_REQUIRE(n_embd % n_head == 0, kWhere, ": n_embd (", n_embd, ") must be divisible by n_head (",
             n_head, ")");
  GB_REQUIRE(n_head % n_kv_head == 0, kWhere, ": n_kv_head (", n_kv_head, ") must divide n_head (",
             n_head, ")");
  GB_REQUIRE(dropout >= 0.0 && dropout < 1.0, kWhere, ": dropout must be in [0, 1), got ", dropout);
  GB_REQUIRE(norm_eps > 0.0, kWhere, ": norm_eps must be positive, got ", norm_eps);
  if (arch == Arch::gpt2) {
    GB_REQUIRE(n_kv_head == n_head, kWhere, ": n_kv_head (", n_kv_head,
               ") must equal n_head (", n_head, ") for gpt2; grouped-query attention is llama only");
    GB_REQUIRE(bias, kWhere, ": bias must be true for gpt2 (GPT-2 always has biases)");
    GB_REQUIRE(tie_embeddings, kWhere, ": tie_embeddings must be true for gpt2");
  } else {
    GB_REQUIRE(head_dim() % 2 == 0, kWhere, ": head_dim n_embd/n_head (", head_dim(),
               ") must be even for rotary embeddings");
    GB_REQUIRE(rope_theta > 0.0, kWhere, ": rope_theta must be positive, got ", rope_theta);
  }
}

nlohmann::json ModelConfig::to_json() const {
  return nlohmann::json{
      {"arch", to_string(arch)},         {"vocab_size", vocab_size},
      {"block_size", block_size},        {"n_layer", n_layer},
      {"n_head", n_head},                {"n_kv_head", n_kv_head},
      {"n_embd", n_embd},                {"ffn_hidden", ffn_hidden},
      {"ffn_multiple_of", ffn_multiple_of}, {"dropout", dropout},
      {"bias", bias},                    {"tie_embeddings", tie_embeddings},
      {"rope_theta", rope_theta},        {"norm_eps", norm_eps},
  };
}

ModelConfig ModelConfig::from_json(const nlohmann::json& j, const std::string& where) {
  GB_REQUIRE(j.is_object(), where, ": model config must be a JSON object, got ", j.dump());
  static const std::set<std::string> kKnown = {
      "preset", "arch", "vocab_size", "block_size", "n_layer", "n_head", "n_kv_head", "n_embd",
      "ffn_hidden", "ffn_multiple_of", "dropout", "bias", "tie_embeddings", "rope_theta",
      "norm_eps"};
  for (const auto& [key, value] : j.items()) {
    GB_REQUIRE(kKnown.count(key), where, ": unknown key '", key, "' (known: ",
               known_keys_list(kKnown), ")");
  }
  ModelConfig c;
  if (j.contains("preset")) {
    const std::string name = get_string(j["preset"], where, "preset");
    try {
      c = preset(name);
    } catch (const InputError& e) {
      throw InputError(str(where, ": key 'preset': ", e.what()));
    }
  }
  if (j.contains("arch")) {
    const Arch arch = parse_arch(get_string(j["arch"], where, "arch"), str(where, ": key 'arch'"));
    if (arch != c.arch) {
      c.arch = arch;
      c.bias = arch == Arch::gpt2;  // the arch's own default unless given below
    }
  }
  if (j.contains("vocab_size")) c.vocab_size = get_int(j["vocab_size"], where, "vocab_size");
  if (j.contains("block_size")) c.block_size = get_int(j["block_size"], where, "block_size");
  if (j.contains("n_layer")) c.n_layer = get_int(j["n_layer"], where, "n_layer");
  if (j.contains("n_head")) {
    c.n_head = get_int(j["n_head"], where, "n_head");
    c.n_kv_head = c.n_head;  // plain multi-head attention unless n_kv_head says otherwise
  }
  if (j.contains("n_kv_head")) c.n_kv_head = get_int(j["n_kv_head"], where, "n_kv_head");
  if (j.contains("n_embd")) c.n_embd = get_int(j["n_embd"], where, "n_embd");
  if (j.contains("ffn_hidden")) c.ffn_hidden = get_int(j["ffn_hidden"], where, "ffn_hidden");
  if (j.contains("ffn_multiple_of"))
    c.ffn_multiple_of = get_int(j["ffn_multiple_of"], where, "ffn_multiple_of");
  if (j.contains("dropout")) c.dropout = get_double(j["dropout"], where, "dropout");
  if (j.contains("bias")) c.bias = get_bool(j["bias"], where, "bias");
  if (j.contains("tie_embeddings"))
    c.tie_embeddings = get_bool(j["tie_embeddings"], where, "tie_embeddings");
  if (j.contains("rope_theta")) c.rope_theta = get_double(j["rope_theta"], where, "rope_theta");
  if (j.contains("norm_eps")) c.norm_eps = get_double(j["norm_eps"], where, "norm_eps");
  try {
    c.validate();
  } catch (const InputError& e) {
    throw InputError(str(where, ": ", e.what()));
  }
  return c;
}

ModelConfig ModelConfig::preset(const std::string& name) {
  for (const auto& p : presets()) {
    if (name == p.name) return p.config;
  }
  std::string known;
  for (const auto& n : preset_names()) known += (known.empty() ? "" : ", ") + n;
  throw InputError(str("--model: unknown preset '", name, "' (known: ", known, ")"));
}

std::vector<std::string> ModelConfig::preset_names() {
  std::vector<std::string> names;
  for (const auto& p : presets()) names.emplace_back(p.name);
  return names;
}

int64_t ModelConfig::parameter_count() const {
  const int64_t d = n_embd, f = ffn_dim(), q = n_head * head_dim(), kv = kv_dim();
  const int64_t b = bias ? 1 : 0;
  int64_t per_layer = 0;
  int64_t total = vocab_size * d;  // token embedding (and the tied head)
  if (arch == Arch::gpt2) {
    total += block_size * d;                                    // learned positions
    per_layer = 2 * (2 * d)                                     // ln_1, ln_2 (weight + bias)
                + d * (q + 2 * kv) + b * (q + 2 * kv)           // c_attn
                + q * d + b * d                                 // attn c_proj
                + d * f + b * f + f * d + b * d;                // c_fc, mlp c_proj
    total += 2 * d;                                             // ln_f
  } else {
    per_layer = 2 * d                                           // input/post_attention norms
                + d * (q + 2 * kv) + b * (q + 2 * kv)           // q, k, v
                + q * d + b * d                                 // o_proj
                + 2 * (d * f + b * f) + f * d + b * d;          // gate, up, down
    total += d;                                                 // final norm
  }
  total += n_layer * per_layer;
  if (!tie_embeddings) total += vocab_size * d;                 // separate lm_head
  return total;
}

}  // namespace gradbox::model

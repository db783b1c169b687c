#include "model/hf.h"

#include <set>

#include "common/atomic_file.h"
#include "common/error.h"
#include "common/json_file.h"
#include "model/safetensors.h"

namespace gradbox::model {

namespace {

namespace fs = std::filesystem;

// Reads HF config keys with HF's defaults for absent ones, checking types.
class HfKeys {
 public:
  HfKeys(const nlohmann::json& j, std::string where) : j_(j), where_(std::move(where)) {}

  bool has(const char* key) const { return j_.contains(key) && !j_[key].is_null(); }
  int64_t get_int(const char* key, int64_t fallback) const {
    if (!has(key)) return fallback;
    GB_REQUIRE(j_[key].is_number_integer(), where_, ": key '", key, "' must be an integer, got ",
               j_[key].dump());
    return j_[key].get<int64_t>();
  }
  double get_double(const char* key, double fallback) const {
    if (!has(key)) return fallback;
    GB_REQUIRE(j_[key].is_number(), where_, ": key '", key, "' must be a number, got ",
               j_[key].dump());
    return j_[key].get<double>();
  }
  bool get_bool(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    GB_REQUIRE(j_[key].is_boolean(), where_, ": key '", key, "' must be true or false, got ",
               j_[key].dump());
    return j_[key].get<bool>();
  }
  std::string get_string(const char* key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    GB_REQUIRE(j_[key].is_string(), where_, ": key '", key, "' must be a string, got ",
               j_[key].dump());
    return j_[key].get<std::string>();
  }
  // A setting we do not compute: only `supported` (or absence) is accepted.
  template <class T>
  void require(const char* key, const T& supported, const std::string& why) const {
    if (!has(key)) return;
    GB_REQUIRE(j_[key] == nlohmann::json(supported), where_, ": key '", key, "' is ",
               j_[key].dump(), "; gradbox supports only ", nlohmann::json(supported).dump(),
               " (", why, ")");
  }

 private:
  const nlohmann::json& j_;
  std::string where_;
};

ModelConfig gpt2_from_hf(const HfKeys& k, const std::string& where) {
  ModelConfig c;  // GPT2Config's defaults are GPT-2 small's, as are ModelConfig's
  c.arch = Arch::gpt2;
  c.vocab_size = k.get_int("vocab_size", 50257);
  c.block_size = k.get_int("n_positions", 1024);
  c.n_embd = k.get_int("n_embd", 768);
  c.n_layer = k.get_int("n_layer", 12);
  c.n_head = c.n_kv_head = k.get_int("n_head", 12);
  c.ffn_hidden = k.get_int("n_inner", 0);
  if (c.ffn_hidden == 4 * c.n_embd) c.ffn_hidden = 0;
  c.norm_eps = k.get_double("layer_norm_epsilon", 1e-5);
  c.dropout = k.get_double("resid_pdrop", 0.1);
  const std::string act = k.get_string("activation_function", "gelu_new");
  GB_REQUIRE(act == "gelu_new" || act == "gelu_pytorch_tanh", where,
             ": key 'activation_function' is '", act,
             "'; gradbox's GPT-2 computes only the tanh GELU (gelu_new)");
  k.require("scale_attn_weights", true, "attention is scaled by 1/sqrt(head_dim)");
  k.require("scale_attn_by_inverse_layer_idx", false, "no per-layer attention scaling");
  k.require("add_cross_attention", false, "decoder-only");
  k.require("tie_word_embeddings", true, "GPT-2's head is tied to wte");
  return c;
}

ModelConfig llama_from_hf(const HfKeys& k, const nlohmann::json& hf, const std::string& where) {
  ModelConfig c;
  c.arch = Arch::llama;
  c.vocab_size = k.get_int("vocab_size", 32000);
  c.n_embd = k.get_int("hidden_size", 4096);
  c.n_layer = k.get_int("num_hidden_layers", 32);
  c.n_head = k.get_int("num_attention_heads", 32);
  c.n_kv_head = k.get_int("num_key_value_heads", c.n_head);
  c.block_size = k.get_int("max_position_embeddings", 2048);
  c.norm_eps = k.get_double("rms_norm_eps", 1e-6);
  c.tie_embeddings = k.get_bool("tie_word_embeddings", false);
  c.dropout = k.get_double("attention_dropout", 0.0);
  c.ffn_hidden = k.get_int("intermediate_size", 11008);
  {
    ModelConfig derived = c;
    derived.ffn_hidden = 0;
    if (derived.ffn_dim() == c.ffn_hidden) c.ffn_hidden = 0;  // keep "derived" when it is
  }
  const bool attention_bias = k.get_bool("attention_bias", false);
  const bool mlp_bias = k.get_bool("mlp_bias", false);
  GB_REQUIRE(attention_bias == mlp_bias, where, ": attention_bias (", attention_bias,
             ") and mlp_bias (", mlp_bias, ") differ; gradbox has one bias setting for both");
  c.bias = attention_bias;
  const std::string act = k.get_string("hidden_act", "silu");
  GB_REQUIRE(act == "silu", where, ": key 'hidden_act' is '", act,
             "'; gradbox's LLaMA computes only SwiGLU (silu)");
  if (k.has("head_dim") && c.n_head > 0) {
    GB_REQUIRE(k.get_int("head_dim", 0) == c.n_embd / c.n_head, where, ": key 'head_dim' is ",
               k.get_int("head_dim", 0), "; gradbox needs hidden_size/num_attention_heads (",
               c.n_embd / c.n_head, ")");
  }
  // Rope: transformers 5 writes rope_parameters, older versions rope_theta + rope_scaling.
  c.rope_theta = k.get_double("rope_theta", 10000.0);
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    if (!k.has(key)) continue;
    const nlohmann::json& rope = hf[key];
    GB_REQUIRE(rope.is_object(), where, ": key '", key, "' must be an object, got ", rope.dump());
    const std::string type = rope.value("rope_type", rope.value("type", std::string("default")));
    GB_REQUIRE(type == "default", where, ": key '", key, "' asks for rope_type '", type,
               "'; gradbox computes only the default rotary embedding");
    if (rope.contains("rope_theta")) {
      GB_REQUIRE(rope["rope_theta"].is_number(), where, ": ", key, ".rope_theta must be a number");
      c.rope_theta = rope["rope_theta"].get<double>();
    }
  }
  return c;
}

std::map<std::string, torch::Tensor> load_weights(const fs::path& dir) {
  const fs::path single = dir / "model.safetensors";
  const fs::path index = dir / "model.safetensors.index.json";
  if (fs::exists(single)) return load_safetensors(single);
  if (fs::exists(index)) {
    const std::string where = index.string();
    const auto j = nlohmann::json::parse(read_file(index), nullptr, false);
    GB_REQUIRE(!j.is_discarded() && j.is_object() && j.contains("weight_map") &&
                   j["weight_map"].is_object(),
               where, ": not a safetensors index (needs a weight_map object)");
    std::set<std::string> shards;
    for (const auto& [name, file] : j["weight_map"].items()) {
      GB_REQUIRE(file.is_string(), where, ": weight_map entry '", name, "' must be a file name");
      const fs::path shard(file.get<std::string>());
      GB_REQUIRE(shard.filename() == shard && shard != "." && shard != "..", where,
                 ": weight_map entry '", name, "' names '", shard.string(),
                 "', not a file in this folder");
      shards.insert(shard.string());
    }
    std::map<std::string, torch::Tensor> all;
    for (const auto& shard : shards) {
      for (auto& [name, t] : load_safetensors(dir / shard)) {
        GB_REQUIRE(all.emplace(name, std::move(t)).second, where, ": tensor '", name,
                   "' appears in more than one shard");
      }
    }
    return all;
  }
  GB_REQUIRE(!fs::exists(dir / "pytorch_model.bin"), dir.string(),
             ": has only pytorch_model.bin; gradbox reads safetensors (convert with "
             "transformers' save_pretrained(..., safe_serialization=True))");
  throw InputError(gradbox::str(dir.string(), ": no model.safetensors or model.safetensors.index.json"));
}

}  // namespace

ModelConfig config_from_hf(const nlohmann::json& hf, const std::string& where) {
  GB_REQUIRE(hf.is_object(), where, ": not a JSON object");
  HfKeys k(hf, where);
  const std::string type = k.get_string("model_type", "");
  ModelConfig c;
  if (type == "gpt2") {
    c = gpt2_from_hf(k, where);
  } else if (type == "llama") {
    c = llama_from_hf(k, hf, where);
  } else {
    throw InputError(gradbox::str(where, ": unsupported model_type '", type, "' (supported: gpt2, llama)"));
  }
  try {
    c.validate();
  } catch (const InputError& e) {
    throw InputError(gradbox::str(where, ": ", e.what()));
  }
  return c;
}

nlohmann::json config_to_hf(const ModelConfig& c, const std::string& torch_dtype) {
  nlohmann::json j;
  if (c.arch == Arch::gpt2) {
    j = {{"architectures", {"GPT2LMHeadModel"}},
         {"model_type", "gpt2"},
         {"vocab_size", c.vocab_size},
         {"n_positions", c.block_size},
         {"n_ctx", c.block_size},
         {"n_embd", c.n_embd},
         {"n_layer", c.n_layer},
         {"n_head", c.n_head},
         {"n_inner", c.ffn_hidden > 0 ? nlohmann::json(c.ffn_hidden) : nlohmann::json(nullptr)},
         {"activation_function", "gelu_new"},
         {"resid_pdrop", c.dropout},
         {"embd_pdrop", c.dropout},
         {"attn_pdrop", c.dropout},
         {"layer_norm_epsilon", c.norm_eps},
         {"initializer_range", 0.02},
         {"scale_attn_weights", true},
         {"scale_attn_by_inverse_layer_idx", false},
         {"reorder_and_upcast_attn", false},
         {"tie_word_embeddings", true}};
    // GPT-2's tokenizer ends its 50257 tokens with <|endoftext|>; with any other vocabulary we
    // do not know the special tokens (HF's default 50256 may not even exist).
    const nlohmann::json eos = c.vocab_size == 50257 ? nlohmann::json(50256) : nlohmann::json(nullptr);
    j["bos_token_id"] = eos;
    j["eos_token_id"] = eos;
  } else {
    j = {{"architectures", {"LlamaForCausalLM"}},
         {"model_type", "llama"},
         {"vocab_size", c.vocab_size},
         {"hidden_size", c.n_embd},
         {"intermediate_size", c.ffn_dim()},
         {"num_hidden_layers", c.n_layer},
         {"num_attention_heads", c.n_head},
         {"num_key_value_heads", c.n_kv_head},
         {"head_dim", c.head_dim()},
         {"max_position_embeddings", c.block_size},
         {"rms_norm_eps", c.norm_eps},
         // Both spellings: transformers 5 reads rope_parameters, 4.x reads rope_theta.
         {"rope_theta", c.rope_theta},
         {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", c.rope_theta}}},
         {"hidden_act", "silu"},
         {"attention_bias", c.bias},
         {"mlp_bias", c.bias},
         {"attention_dropout", c.dropout},
         {"initializer_range", 0.02},
         {"pretraining_tp", 1},
         {"tie_word_embeddings", c.tie_embeddings}};
  }
  j["torch_dtype"] = torch_dtype;
  return j;
}

void export_hf(const CausalLM& model, const fs::path& dir) {
  auto tensors = model.hf_state_dict();
  GB_CHECK(!tensors.empty(), "model without parameters");
  const auto dtype = tensors.front().second.scalar_type();
  const std::string torch_dtype = dtype == torch::kFloat16    ? "float16"
                                  : dtype == torch::kBFloat16 ? "bfloat16"
                                                              : "float32";
  std::error_code ec;
  fs::create_directories(dir, ec);
  GB_REQUIRE(!ec, dir.string(), ": cannot create the export folder: ", ec.message());
  // "format": "pt" is what from_pretrained checks before it trusts a safetensors file.
  save_safetensors(dir / "model.safetensors", tensors, {{"format", "pt"}});
  write_file_atomic(dir / "config.json", config_to_hf(model.config(), torch_dtype).dump(2) + "\n");
}

std::shared_ptr<CausalLM> import_hf(const fs::path& dir) {
  const fs::path config_path = dir / "config.json";
  GB_REQUIRE(fs::exists(config_path), dir.string(), ": no config.json: not a Hugging Face model folder");
  const auto hf = read_json_file(config_path);
  const ModelConfig config = config_from_hf(hf, config_path.string());
  auto weights = load_weights(dir);
  auto model = make_model(config, /*seed=*/0);  // every parameter is overwritten below
  const fs::path single = dir / "model.safetensors";
  const fs::path where = fs::exists(single) ? single : dir / "model.safetensors.index.json";
  model->load_hf_state_dict(weights, where.string());
  return model;
}

}  // namespace gradbox::model

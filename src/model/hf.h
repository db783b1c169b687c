#pragma once
// Hugging Face folders: config.json (GPT2Config / LlamaConfig keys) + model.safetensors, the
// layout AutoModelForCausalLM.from_pretrained(dir) reads.
#include <filesystem>
#include <memory>

#include "model/causal_lm.h"

namespace gradbox::model {

// Writes dir/config.json and dir/model.safetensors (creating dir), each atomically.
void export_hf(const CausalLM& model, const std::filesystem::path& dir);

// Reads dir/config.json (model_type gpt2 or llama), builds the model and loads
// dir/model.safetensors, or the shards named by dir/model.safetensors.index.json.
// InputError naming the file and key for an unsupported model_type or a setting this
// implementation does not compute (another activation, rope scaling, cross attention, ...).
std::shared_ptr<CausalLM> import_hf(const std::filesystem::path& dir);

// The ModelConfig a HF config.json describes; `where` names the file in errors.
ModelConfig config_from_hf(const nlohmann::json& hf, const std::string& where);
nlohmann::json config_to_hf(const ModelConfig& config, const std::string& torch_dtype);

}  // namespace gradbox::model

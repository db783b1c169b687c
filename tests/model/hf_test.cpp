#include <gtest/gtest.h>
#include <torch/torch.h>

#include "common/atomic_file.h"
#include "model/hf.h"
#include "model/safetensors.h"
#include "test_util.h"

namespace gradbox::model {
namespace {

namespace fs = std::filesystem;
using testing::expect_input_error;

// Moves every parameter off its init value (norm gains 1, biases 0 would hide layout bugs).
void perturb(CausalLM& model) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(9);
  for (auto& p : model.parameters()) p.add_(torch::randn_like(p) * 0.05);
}

torch::Tensor logits_of(CausalLM& model) {
  model.eval();
  torch::NoGradGuard no_grad;
  torch::manual_seed(1);
  return model.forward(torch::randint(model.config().vocab_size, {2, 20}, torch::kLong));
}

ModelConfig config_named(const std::string& name) {
  if (name == "llama-tied") {
    ModelConfig c = ModelConfig::preset("llama-tiny");
    c.tie_embeddings = true;
    c.rope_theta = 500000.0;
    return c;
  }
  if (name == "llama-bias-mqa") {
    ModelConfig c = ModelConfig::preset("llama-tiny");
    c.bias = true;
    c.n_kv_head = 1;
    c.ffn_hidden = 100;
    return c;
  }
  return ModelConfig::preset(name);
}

class HfRoundTrip : public ::testing::TestWithParam<const char*> {};

TEST_P(HfRoundTrip, ExportThenImportGivesIdenticalLogits) {
  const fs::path dir = testing::fresh_dir(GetParam());
  auto model = make_model(config_named(GetParam()), 3);
  perturb(*model);
  export_hf(*model, dir);
  auto back = import_hf(dir);
  EXPECT_EQ(back->config().to_json(), model->config().to_json());
  EXPECT_TRUE(torch::equal(logits_of(*model), logits_of(*back)));
}

INSTANTIATE_TEST_SUITE_P(Models, HfRoundTrip,
                         ::testing::Values("gpt2-tiny", "llama-tiny", "llama-tied", "llama-bias-mqa"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n) ch = std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
                           return n;
                         });

TEST(Hf, Gpt2FilesUseHuggingFaceLayout) {
  const fs::path dir = testing::fresh_dir("layout");
  auto model = make_model(ModelConfig::preset("gpt2-tiny"), 3);
  export_hf(*model, dir);
  std::map<std::string, std::string> meta;
  const auto tensors = load_safetensors(dir / "model.safetensors", &meta);
  EXPECT_EQ(meta.at("format"), "pt");
  EXPECT_EQ(tensors.at("transformer.h.0.attn.c_attn.weight").sizes(), (std::vector<int64_t>{64, 192}));
  EXPECT_EQ(tensors.at("transformer.h.0.mlp.c_fc.weight").sizes(), (std::vector<int64_t>{64, 256}));
  EXPECT_EQ(tensors.at("transformer.h.0.mlp.c_proj.weight").sizes(), (std::vector<int64_t>{256, 64}));
  EXPECT_TRUE(torch::equal(tensors.at("transformer.h.0.mlp.c_fc.weight"),
                           model->named_parameters()["transformer.h.0.mlp.c_fc.weight"].t()));
  EXPECT_FALSE(tensors.count("lm_head.weight"));  // tied, omitted like HF's save_pretrained
  const auto config = nlohmann::json::parse(read_file(dir / "config.json"));
  EXPECT_EQ(config["model_type"], "gpt2");
  EXPECT_EQ(config["architectures"][0], "GPT2LMHeadModel");
  EXPECT_EQ(config["torch_dtype"], "float32");
  EXPECT_EQ(config["n_positions"], 64);
}

TEST(Hf, LlamaConfigKeys) {
  const auto j = config_to_hf(config_named("llama-tied"), "float32");
  EXPECT_EQ(j["architectures"][0], "LlamaForCausalLM");
  EXPECT_EQ(j["num_key_value_heads"], 2);
  EXPECT_EQ(j["intermediate_size"], 192);
  EXPECT_EQ(j["tie_word_embeddings"], true);
  EXPECT_EQ(j["rope_parameters"]["rope_theta"], 500000.0);
}

TEST(Hf, ImportsGpt2ModelNamesAndOldBuffers) {
  // The original openai-community/gpt2 file: GPT2Model names (no "transformer."), mask buffers.
  auto model = make_model(ModelConfig::preset("gpt2-tiny"), 3);
  perturb(*model);
  std::map<std::string, torch::Tensor> tensors;
  for (auto& [name, t] : model->hf_state_dict()) tensors[name.substr(std::string("transformer.").size())] = t;
  tensors["h.0.attn.bias"] = torch::ones({1, 1, 64, 64});
  tensors["h.0.attn.masked_bias"] = torch::tensor(-1e4);
  auto back = make_model(model->config(), 4);
  back->load_hf_state_dict(tensors, "gpt2.safetensors");
  EXPECT_TRUE(torch::equal(logits_of(*model), logits_of(*back)));
}

TEST(Hf, BadWeightsAreNamed) {
  auto model = make_model(ModelConfig::preset("llama-tiny"), 3);
  std::map<std::string, torch::Tensor> good;
  for (auto& [name, t] : model->hf_state_dict()) good[name] = t;
  auto missing = good;
  missing.erase("model.layers.1.mlp.up_proj.weight");
  expect_input_error([&] { model->load_hf_state_dict(missing, "w.safetensors"); }, "w.safetensors",
                     "'model.layers.1.mlp.up_proj.weight' is missing");
  auto shaped = good;
  shaped["model.norm.weight"] = torch::ones({65});
  expect_input_error([&] { model->load_hf_state_dict(shaped, "w.safetensors"); }, "w.safetensors",
                     "'model.norm.weight'", "[65]", "[64]");
  auto extra = good;
  extra["model.layers.2.mlp.up_proj.weight"] = torch::ones({192, 64});
  expect_input_error([&] { model->load_hf_state_dict(extra, "w.safetensors"); }, "w.safetensors",
                     "unexpected tensor 'model.layers.2.mlp.up_proj.weight'");
  auto ints = good;
  ints["model.norm.weight"] = torch::ones({64}, torch::kLong);
  expect_input_error([&] { model->load_hf_state_dict(ints, "w.safetensors"); }, "'model.norm.weight'",
                     "floating-point");
  // A half-precision file converts to the parameters' dtype.
  auto half = good;
  for (auto& [name, t] : half) t = t.to(torch::kFloat16);
  model->load_hf_state_dict(half, "w.safetensors");
  EXPECT_EQ(model->parameters()[0].scalar_type(), torch::kFloat);
}

TEST(Hf, UnsupportedConfigsAreNamed) {
  const fs::path dir = testing::fresh_dir("unsupported");
  auto model = make_model(ModelConfig::preset("llama-tiny"), 3);
  export_hf(*model, dir);
  const auto good = nlohmann::json::parse(read_file(dir / "config.json"));
  const std::string where = (dir / "config.json").string();
  auto with = [&](const char* key, const nlohmann::json& value) {
    auto j = good;
    j[key] = value;
    write_file_atomic(dir / "config.json", j.dump());
  };
  with("model_type", "bert");
  expect_input_error([&] { import_hf(dir); }, where, "unsupported model_type 'bert'");
  with("rope_parameters", {{"rope_type", "llama3"}, {"rope_theta", 5e5}});
  expect_input_error([&] { import_hf(dir); }, where, "rope_parameters", "llama3");
  with("hidden_act", "gelu");
  expect_input_error([&] { import_hf(dir); }, where, "hidden_act");
  with("num_key_value_heads", 3);
  expect_input_error([&] { import_hf(dir); }, where, "n_kv_head (3)");
  with("num_hidden_layers", "2");
  expect_input_error([&] { import_hf(dir); }, where, "'num_hidden_layers'", "integer");
  with("num_hidden_layers", 3);  // config and weights disagree
  expect_input_error([&] { import_hf(dir); }, "model.safetensors", "'model.layers.2.");
  write_file_atomic(dir / "config.json", "{oops");
  expect_input_error([&] { import_hf(dir); }, where, "not valid JSON");
  fs::remove(dir / "config.json");
  expect_input_error([&] { import_hf(dir); }, "no config.json");
}

TEST(Hf, ImportsShardedFolders) {
  const fs::path dir = testing::fresh_dir("sharded");
  auto model = make_model(ModelConfig::preset("llama-tiny"), 3);
  perturb(*model);
  export_hf(*model, dir);
  auto tensors = load_safetensors(dir / "model.safetensors");
  fs::remove(dir / "model.safetensors");
  std::vector<std::pair<std::string, torch::Tensor>> a, b;
  nlohmann::json weight_map;
  for (auto& [name, t] : tensors) {
    const bool first = name.find("layers.1.") == std::string::npos;
    (first ? a : b).emplace_back(name, t);
    weight_map[name] = first ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
  }
  save_safetensors(dir / "model-00001-of-00002.safetensors", a, {{"format", "pt"}});
  save_safetensors(dir / "model-00002-of-00002.safetensors", b, {{"format", "pt"}});
  write_file_atomic(dir / "model.safetensors.index.json",
                    nlohmann::json{{"metadata", nlohmann::json::object()}, {"weight_map", weight_map}}.dump());
  EXPECT_TRUE(torch::equal(logits_of(*model), logits_of(*import_hf(dir))));
  weight_map["model.norm.weight"] = "../elsewhere.safetensors";
  write_file_atomic(dir / "model.safetensors.index.json", nlohmann::json{{"weight_map", weight_map}}.dump());
  expect_input_error([&] { import_hf(dir); }, "model.safetensors.index.json", "not a file in this folder");
}

}  // namespace
}  // namespace gradbox::model

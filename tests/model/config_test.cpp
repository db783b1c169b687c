#include <gtest/gtest.h>

#include "model/config.h"
#include "test_util.h"

namespace gradbox::model {
namespace {

using testing::expect_input_error;

TEST(ModelConfig, Gpt2PresetsMatchHuggingFaceCounts) {
  // GPT2LMHeadModel's num_parameters() for the four released sizes (head tied to wte).
  EXPECT_EQ(ModelConfig::preset("gpt2").parameter_count(), 124'439'808);
  EXPECT_EQ(ModelConfig::preset("gpt2-medium").parameter_count(), 354'823'168);
  EXPECT_EQ(ModelConfig::preset("gpt2-large").parameter_count(), 774'030'080);
  EXPECT_EQ(ModelConfig::preset("gpt2-xl").parameter_count(), 1'557'611'200);
}

TEST(ModelConfig, PresetsAreValidAndMiniPresetsAreDemoSized) {
  for (const auto& name : ModelConfig::preset_names()) {
    SCOPED_TRACE(name);
    const ModelConfig c = ModelConfig::preset(name);
    EXPECT_NO_THROW(c.validate());
    if (name.find("-mini") != std::string::npos) {
      EXPECT_GE(c.parameter_count(), 5'000'000);
      EXPECT_LE(c.parameter_count(), 10'000'000);
      EXPECT_EQ(c.block_size, 256);
    }
  }
  const ModelConfig llama = ModelConfig::preset("llama-tiny");
  EXPECT_EQ(llama.arch, Arch::llama);
  EXPECT_LT(llama.n_kv_head, llama.n_head);  // exercises grouped-query attention
  EXPECT_FALSE(llama.bias);
}

TEST(ModelConfig, UnknownPresetNamesTheFlagAndTheKnownOnes) {
  expect_input_error([] { ModelConfig::preset("gpt5"); }, "--model", "unknown preset 'gpt5'",
                     "gpt2-medium", "llama-tiny");
}

TEST(ModelConfig, FfnDim) {
  ModelConfig c = ModelConfig::preset("gpt2");
  EXPECT_EQ(c.ffn_dim(), 4 * 768);
  c = ModelConfig::preset("llama-tiny");
  EXPECT_EQ(c.ffn_dim(), 192);  // int(4*64*2/3) = 170, rounded up to a multiple of 64
  c.n_embd = 4096;
  c.n_head = 32;
  c.ffn_multiple_of = 256;
  EXPECT_EQ(c.ffn_dim(), 11008);  // LLaMA-7B's intermediate size
  c.ffn_hidden = 1000;
  EXPECT_EQ(c.ffn_dim(), 1000);
}

TEST(ModelConfig, JsonRoundTrip) {
  ModelConfig c = ModelConfig::preset("llama-mini");
  c.dropout = 0.05;
  c.rope_theta = 500000.0;
  c.tie_embeddings = true;
  const ModelConfig back = ModelConfig::from_json(c.to_json(), "test");
  EXPECT_EQ(back.to_json(), c.to_json());
}

TEST(ModelConfig, FromJsonStartsFromPresetAndArchDefaults) {
  const auto c = ModelConfig::from_json({{"preset", "gpt2-medium"}, {"dropout", 0.05}}, "run.json");
  EXPECT_EQ(c.n_layer, 24);
  EXPECT_DOUBLE_EQ(c.dropout, 0.05);
  const auto l = ModelConfig::from_json(
      {{"arch", "llama"}, {"n_layer", 4}, {"n_head", 8}, {"n_kv_head", 2}, {"n_embd", 128}},
      "run.json");
  EXPECT_FALSE(l.bias);  // llama's default
  EXPECT_EQ(l.n_kv_head, 2);
  const auto g = ModelConfig::from_json({{"n_head", 4}, {"n_embd", 128}}, "run.json");
  EXPECT_EQ(g.n_kv_head, 4);  // follows n_head
}

TEST(ModelConfig, FromJsonRejectsUnknownKeysAndWrongTypes) {
  expect_input_error([] { ModelConfig::from_json({{"n_layers", 12}}, "run.json:model"); },
                     "run.json:model", "unknown key 'n_layers'", "n_layer");
  expect_input_error([] { ModelConfig::from_json({{"n_layer", "12"}}, "run.json:model"); },
                     "run.json:model", "'n_layer'", "integer");
  expect_input_error([] { ModelConfig::from_json({{"n_layer", 12.5}}, "run.json:model"); },
                     "'n_layer'", "integer");
  expect_input_error([] { ModelConfig::from_json({{"bias", 1}}, "cfg"); }, "'bias'", "true or false");
  expect_input_error([] { ModelConfig::from_json({{"arch", "bert"}}, "cfg"); }, "cfg",
                     "unknown arch 'bert'");
  expect_input_error([] { ModelConfig::from_json({{"preset", "nope"}}, "cfg"); }, "cfg",
                     "unknown preset 'nope'");
  expect_input_error([] { ModelConfig::from_json(nlohmann::json::array(), "cfg"); }, "cfg", "object");
}

TEST(ModelConfig, ValidateNamesTheOffendingKey) {
  ModelConfig c = ModelConfig::preset("llama-tiny");
  c.n_kv_head = 3;
  expect_input_error([&] { c.validate(); }, "n_kv_head (3)", "n_head (4)");
  c = ModelConfig::preset("gpt2-tiny");
  c.n_embd = 65;
  expect_input_error([&] { c.validate(); }, "n_embd (65)", "n_head (2)");
  c = ModelConfig::preset("gpt2-tiny");
  c.n_kv_head = 1;
  expect_input_error([&] { c.validate(); }, "n_kv_head", "gpt2");
  c = ModelConfig::preset("gpt2-tiny");
  c.tie_embeddings = false;
  expect_input_error([&] { c.validate(); }, "tie_embeddings");
  c = ModelConfig::preset("gpt2-tiny");
  c.dropout = 1.0;
  expect_input_error([&] { c.validate(); }, "dropout");
  expect_input_error([] { ModelConfig::from_json({{"preset", "llama-tiny"}, {"n_kv_head", 3}}, "f.json"); },
                     "f.json", "n_kv_head (3)");
}

TEST(ActivationCheckpointing, ParseAndApply) {
  using AC = ActivationCheckpointing;
  EXPECT_EQ(AC::parse("none").strategy, CheckpointStrategy::none);
  const AC alt = AC::parse("alternate");
  EXPECT_TRUE(alt.applies_to(0, 4));
  EXPECT_FALSE(alt.applies_to(1, 4));
  EXPECT_TRUE(alt.applies_to(2, 4));
  const AC fl = AC::parse("first_last");
  EXPECT_TRUE(fl.applies_to(0, 4));
  EXPECT_FALSE(fl.applies_to(2, 4));
  EXPECT_TRUE(fl.applies_to(3, 4));
  EXPECT_TRUE(AC::parse("all").applies_to(2, 4));
  const AC custom = AC::parse("custom:5,0,3");
  EXPECT_EQ(custom.layers, (std::vector<int64_t>{0, 3, 5}));
  EXPECT_TRUE(custom.applies_to(3, 6));
  EXPECT_FALSE(custom.applies_to(4, 6));
  for (const char* spec : {"none", "alternate", "first_last", "all", "custom:0,3,5"}) {
    EXPECT_EQ(AC::parse(spec).to_string(), spec);
  }
}

TEST(ActivationCheckpointing, BadSpecsNameTheFlag) {
  using AC = ActivationCheckpointing;
  expect_input_error([] { AC::parse("every"); }, "--activation-checkpointing", "unknown strategy 'every'",
                     "alternate");
  expect_input_error([] { AC::parse("custom:"); }, "--activation-checkpointing");
  expect_input_error([] { AC::parse("custom:1,x"); }, "--activation-checkpointing", "'x'");
  expect_input_error([] { AC::parse("custom:-1"); }, "--activation-checkpointing", "'-1'");
  expect_input_error([] { AC::parse("custom:1,1"); }, "--activation-checkpointing", "twice");
  expect_input_error([] { AC::parse("custom:0,7").validate(4); }, "--activation-checkpointing",
                     "layer 7");
}

}  // namespace
}  // namespace gradbox::model

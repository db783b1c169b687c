#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "model/attention.h"
#include "model/causal_lm.h"
#include "test_util.h"

namespace gradbox::model {
namespace {

using testing::expect_input_error;

// These tests share two cores with builds and other test binaries: OpenMP threads that
// spin-wait against them made tiny steps 100x slower. One intra-op thread for the whole binary.
class OneTorchThread : public ::testing::Environment {
 public:
  void SetUp() override { torch::set_num_threads(1); }
};
[[maybe_unused]] const auto* const kOneTorchThread =
    ::testing::AddGlobalTestEnvironment(new OneTorchThread);

int64_t built_count(const CausalLM& model) {
  int64_t n = 0;
  for (const auto& p : model.parameters()) n += p.numel();
  return n;
}

ModelConfig llama_variant(bool tie, bool bias, int64_t n_kv_head) {
  ModelConfig c = ModelConfig::preset("llama-tiny");
  c.tie_embeddings = tie;
  c.bias = bias;
  c.n_kv_head = n_kv_head;
  return c;
}

TEST(CausalLM, BuiltParameterCountsEqualAnalytic) {
  std::vector<ModelConfig> configs;
  for (const char* name : {"gpt2-tiny", "gpt2-mini", "llama-tiny", "llama-mini"}) {
    configs.push_back(ModelConfig::preset(name));
  }
  configs.push_back(llama_variant(/*tie=*/true, /*bias=*/false, 2));
  configs.push_back(llama_variant(/*tie=*/false, /*bias=*/true, 1));
  ModelConfig odd = ModelConfig::preset("gpt2-tiny");
  odd.ffn_hidden = 100;
  configs.push_back(odd);
  for (const auto& c : configs) {
    SCOPED_TRACE(c.to_json().dump());
    EXPECT_EQ(built_count(*make_model(c, 1)), c.parameter_count());
  }
}

TEST(CausalLM, Gpt2SmallBuiltMatchesHuggingFace) {
  // The real 124M model (0.5 GB); the larger presets are checked analytically only (gpt2-xl
  // would take ~6 GB here), their structure is the same code as this one's.
  auto model = make_model(ModelConfig::preset("gpt2"), 1);
  EXPECT_EQ(built_count(*model), 124'439'808);
  const auto params = model->named_parameters();
  EXPECT_EQ(params["transformer.h.11.attn.c_attn.weight"].sizes(), (std::vector<int64_t>{2304, 768}));
  EXPECT_EQ(params["transformer.wpe.weight"].sizes(), (std::vector<int64_t>{1024, 768}));
  EXPECT_FALSE(params.contains("lm_head.weight"));  // tied: one tensor, counted once
}

TEST(CausalLM, NamesMirrorHuggingFace) {
  auto gpt2 = make_model(ModelConfig::preset("gpt2-tiny"), 1);
  auto llama = make_model(ModelConfig::preset("llama-tiny"), 1);
  const auto g = gpt2->named_parameters();
  for (const char* name : {"transformer.wte.weight", "transformer.wpe.weight",
                           "transformer.h.0.ln_1.weight", "transformer.h.0.attn.c_attn.bias",
                           "transformer.h.1.attn.c_proj.weight", "transformer.h.1.ln_2.bias",
                           "transformer.h.1.mlp.c_fc.weight", "transformer.h.1.mlp.c_proj.bias",
                           "transformer.ln_f.weight"}) {
    EXPECT_TRUE(g.contains(name)) << name;
  }
  const auto l = llama->named_parameters();
  for (const char* name : {"model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight",
                           "model.layers.0.self_attn.k_proj.weight",
                           "model.layers.1.self_attn.o_proj.weight",
                           "model.layers.1.mlp.gate_proj.weight", "model.layers.1.mlp.up_proj.weight",
                           "model.layers.1.mlp.down_proj.weight",
                           "model.layers.0.input_layernorm.weight",
                           "model.layers.0.post_attention_layernorm.weight", "model.norm.weight",
                           "lm_head.weight"}) {
    EXPECT_TRUE(l.contains(name)) << name;
  }
  EXPECT_FALSE(l.contains("model.layers.0.self_attn.q_proj.bias"));
}

TEST(CausalLM, InitIsDeterministicPerSeedAndScaled) {
  const ModelConfig c = ModelConfig::preset("gpt2-tiny");
  torch::manual_seed(1);
  auto a = make_model(c, 42);
  torch::manual_seed(2);  // the global RNG must not matter
  auto b = make_model(c, 42);
  auto other = make_model(c, 43);
  const auto pa = a->named_parameters(), pb = b->named_parameters(), po = other->named_parameters();
  for (const auto& item : pa) {
    EXPECT_TRUE(torch::equal(item.value(), pb[item.key()])) << item.key();
  }
  EXPECT_FALSE(torch::equal(pa["transformer.wte.weight"], po["transformer.wte.weight"]));
  // nanoGPT's scheme: std 0.02, residual projections 0.02/sqrt(2*n_layer), biases 0, norms 1.
  auto big = make_model(ModelConfig::preset("gpt2-mini"), 7);
  const auto pbig = big->named_parameters();
  EXPECT_NEAR(pbig["transformer.h.0.attn.c_attn.weight"].std().item<double>(), 0.02, 0.001);
  EXPECT_NEAR(pbig["transformer.h.0.mlp.c_proj.weight"].std().item<double>(), 0.02 / std::sqrt(12.0),
              0.0005);
  EXPECT_EQ(pbig["transformer.h.0.attn.c_attn.bias"].abs().sum().item<double>(), 0.0);
  EXPECT_TRUE(torch::equal(pbig["transformer.ln_f.weight"], torch::ones({256})));
}

TEST(CausalLM, NoDecayForBiasesNormsAndEmbeddings) {
  auto gpt2 = make_model(ModelConfig::preset("gpt2-tiny"), 1);
  EXPECT_TRUE(gpt2->is_no_decay("transformer.wte.weight"));
  EXPECT_TRUE(gpt2->is_no_decay("transformer.wpe.weight"));
  EXPECT_TRUE(gpt2->is_no_decay("transformer.h.0.ln_1.weight"));
  EXPECT_TRUE(gpt2->is_no_decay("transformer.h.0.attn.c_attn.bias"));
  EXPECT_FALSE(gpt2->is_no_decay("transformer.h.0.attn.c_attn.weight"));
  auto llama = make_model(ModelConfig::preset("llama-tiny"), 1);
  EXPECT_TRUE(llama->is_no_decay("model.embed_tokens.weight"));
  EXPECT_TRUE(llama->is_no_decay("model.norm.weight"));
  EXPECT_FALSE(llama->is_no_decay("lm_head.weight"));
  EXPECT_FALSE(llama->is_no_decay("model.layers.0.mlp.down_proj.weight"));
  EXPECT_THROW(llama->is_no_decay("nope"), std::logic_error);
}

class CausalMask : public ::testing::TestWithParam<const char*> {};

TEST_P(CausalMask, FutureTokensDoNotChangeEarlierLogits) {
  auto model = make_model(ModelConfig::preset(GetParam()), 3);
  model->eval();
  torch::NoGradGuard no_grad;
  torch::manual_seed(0);
  const int64_t V = model->config().vocab_size, T = 24, k = 13;
  torch::Tensor idx = torch::randint(V, {2, T}, torch::kLong);
  torch::Tensor changed = idx.clone();
  changed.index_put_({torch::indexing::Slice(), k}, (idx.index({torch::indexing::Slice(), k}) + 1) % V);
  torch::Tensor a = model->forward(idx), b = model->forward(changed);
  ASSERT_EQ(a.sizes(), (std::vector<int64_t>{2, T, V}));
  EXPECT_EQ(a.scalar_type(), torch::kFloat);
  using torch::indexing::Slice;
  EXPECT_TRUE(torch::allclose(a.index({Slice(), Slice(0, k)}), b.index({Slice(), Slice(0, k)}),
                              /*rtol=*/0, /*atol=*/1e-6));
  EXPECT_GT((a.index({Slice(), Slice(k)}) - b.index({Slice(), Slice(k)})).abs().max().item<float>(),
            1e-4);
}

INSTANTIATE_TEST_SUITE_P(BothArchs, CausalMask, ::testing::Values("gpt2-tiny", "llama-tiny"));

TEST(Attention, GroupedQueryMatchesRepeatedHeadsReference) {
  torch::manual_seed(0);
  const int64_t B = 2, T = 7, hs = 16;
  for (int64_t nkv : {4, 2, 1}) {
    SCOPED_TRACE(nkv);
    torch::Tensor q = torch::randn({B, 4, T, hs}), k = torch::randn({B, nkv, T, hs}),
                  v = torch::randn({B, nkv, T, hs});
    torch::Tensor y = causal_attention(q, k, v, 0.0);
    ASSERT_EQ(y.sizes(), (std::vector<int64_t>{B, 4, T, hs}));
    // Reference: explicit softmax with each kv head repeated for its group of query heads.
    torch::Tensor kr = k.repeat_interleave(4 / nkv, 1), vr = v.repeat_interleave(4 / nkv, 1);
    torch::Tensor att = torch::matmul(q, kr.transpose(-2, -1)) / std::sqrt(static_cast<double>(hs));
    torch::Tensor mask = torch::ones({T, T}, torch::kBool).triu(1);
    att = att.masked_fill(mask, -std::numeric_limits<float>::infinity()).softmax(-1);
    EXPECT_TRUE(torch::allclose(y, torch::matmul(att, vr), 1e-5, 1e-5));
  }
}

TEST(Attention, GroupedQueryWithDropoutMatchesTorchsOwnGqa) {
  // With dropout torch picks the math kernel, so causal_attention repeats the kv heads itself;
  // torch's enable_gqa path must give the same result from the same RNG stream.
  torch::manual_seed(0);
  torch::Tensor q = torch::randn({2, 6, 9, 8}), k = torch::randn({2, 2, 9, 8}), v = torch::randn({2, 2, 9, 8});
  torch::manual_seed(1);
  torch::Tensor ours = causal_attention(q, k, v, 0.3);
  torch::manual_seed(1);
  torch::Tensor torchs = at::scaled_dot_product_attention(q, k, v, {}, 0.3, /*is_causal=*/true,
                                                          std::nullopt, /*enable_gqa=*/true);
  EXPECT_TRUE(torch::allclose(ours, torchs, 1e-6, 1e-6));
}

TEST(CausalLM, GroupedQueryShapes) {
  ModelConfig c = ModelConfig::preset("llama-tiny");  // 4 query heads, 2 kv heads, hs 16
  auto model = make_model(c, 1);
  const auto p = model->named_parameters();
  EXPECT_EQ(p["model.layers.0.self_attn.q_proj.weight"].sizes(), (std::vector<int64_t>{64, 64}));
  EXPECT_EQ(p["model.layers.0.self_attn.k_proj.weight"].sizes(), (std::vector<int64_t>{32, 64}));
  EXPECT_EQ(p["model.layers.0.self_attn.v_proj.weight"].sizes(), (std::vector<int64_t>{32, 64}));
  EXPECT_EQ(p["model.layers.0.self_attn.o_proj.weight"].sizes(), (std::vector<int64_t>{64, 64}));
  EXPECT_EQ(p["model.layers.0.mlp.gate_proj.weight"].sizes(), (std::vector<int64_t>{192, 64}));
  torch::Tensor logits = model->forward(torch::zeros({3, 5}, torch::kLong));
  EXPECT_EQ(logits.sizes(), (std::vector<int64_t>{3, 5, 512}));
  // T = 1 and T = block_size work too.
  EXPECT_EQ(model->forward(torch::zeros({1, 1}, torch::kLong)).sizes(), (std::vector<int64_t>{1, 1, 512}));
  EXPECT_EQ(model->forward(torch::zeros({1, 64}, torch::kLong)).size(1), 64);
}

TEST(CausalLM, Gpt2RejectsSequencesLongerThanBlock) {
  auto model = make_model(ModelConfig::preset("gpt2-tiny"), 1);
  expect_input_error([&] { model->forward(torch::zeros({1, 65}, torch::kLong)); }, "block_size 64");
}

TEST(CausalLM, LossIsMeanCrossEntropyAndStartsNearLogV) {
  auto model = make_model(ModelConfig::preset("gpt2-tiny"), 1);
  torch::manual_seed(0);
  torch::Tensor idx = torch::randint(512, {4, 32}, torch::kLong);
  torch::Tensor targets = torch::randint(512, {4, 32}, torch::kLong);
  torch::Tensor logits = model->forward(idx);
  const double loss = language_model_loss(logits, targets).item<double>();
  EXPECT_NEAR(loss, std::log(512.0), 0.1);  // small init: nearly uniform predictions
  torch::Tensor manual = -logits.log_softmax(-1).gather(-1, targets.unsqueeze(-1)).mean();
  EXPECT_NEAR(loss, manual.item<double>(), 1e-5);
}

TEST(CausalLM, DropoutIsLiveAndOnlyInTraining) {
  auto model = make_model(ModelConfig::preset("llama-tiny"), 1);
  torch::Tensor idx = torch::randint(512, {2, 16}, torch::kLong);
  model->train();
  torch::Tensor a = model->forward(idx), b = model->forward(idx);
  EXPECT_TRUE(torch::equal(a, b));  // dropout 0
  model->set_dropout(0.2);
  EXPECT_DOUBLE_EQ(model->config().dropout, 0.2);
  a = model->forward(idx);
  b = model->forward(idx);
  EXPECT_FALSE(torch::equal(a, b));
  model->eval();
  EXPECT_TRUE(torch::equal(model->forward(idx), model->forward(idx)));
  EXPECT_THROW(model->set_dropout(1.0), InputError);
}

TEST(CausalLM, TrainsOnARepeatedBatch) {
  for (const char* name : {"gpt2-tiny", "llama-tiny"}) {
    SCOPED_TRACE(name);
    auto model = make_model(ModelConfig::preset(name), 1);
    torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(3e-3));
    torch::manual_seed(0);
    torch::Tensor data = torch::randint(512, {4, 33}, torch::kLong);
    using torch::indexing::Slice;
    torch::Tensor x = data.index({Slice(), Slice(0, 32)}), y = data.index({Slice(), Slice(1)});
    double first = 0, last = 0;
    for (int step = 0; step < 30; ++step) {
      opt.zero_grad();
      torch::Tensor loss = language_model_loss(model->forward(x), y);
      loss.backward();
      opt.step();
      (step == 0 ? first : last) = loss.item<double>();
    }
    EXPECT_LT(last, first - 1.0);
  }
}

}  // namespace
}  // namespace gradbox::model

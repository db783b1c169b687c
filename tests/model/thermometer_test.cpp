// Note [Thermometers]: the maxima a measured forward records are the ones its layers produce,
// recomputed here from the modules themselves.
#include "model/thermometer.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "model/causal_lm.h"
#include "model/gpt2.h"

namespace gradbox::model {
namespace {

TEST(Thermometer, Gpt2LayersReportTheirLogitMlpAndResidualMaxima) {
  ModelConfig config = ModelConfig::preset("gpt2-tiny");
  auto model = std::dynamic_pointer_cast<GPT2LMHeadModel>(make_model(config, 5));
  ASSERT_TRUE(model);
  model->eval();
  const torch::Tensor idx = torch::randint(config.vocab_size, {2, 24}, torch::kLong);
  Thermometer thermometer;
  thermometer.reset(config.n_layer, torch::kCPU);
  model->set_thermometer(&thermometer);
  model->forward(idx);
  model->set_thermometer(nullptr);
  const auto reading = thermometer.read();

  // The same forward by hand, layer by layer.
  torch::NoGradGuard no_grad;
  GPT2Model& t = model->transformer();
  torch::Tensor x = t.wte(idx) + t.wpe(torch::arange(24, idx.options()));
  const int64_t C = config.n_embd, nh = config.n_head, hs = C / nh;
  for (int64_t i = 0; i < config.n_layer; ++i) {
    SCOPED_TRACE("layer " + std::to_string(i));
    GPT2Block& block = *t.blocks[i];
    auto qkv = block.attn->c_attn(block.ln_1(x)).split(C, 2);
    const torch::Tensor q = qkv[0].view({2, 24, nh, hs}).transpose(1, 2), k = qkv[1].view({2, 24, nh, hs}).transpose(1, 2);
    const torch::Tensor scores = torch::matmul(q, k.transpose(2, 3)) / std::sqrt(static_cast<double>(hs));
    const double logit_max = scores.abs().tril().max().item<double>();
    const torch::Tensor y = x + block.attn->forward(block.ln_1(x));
    const torch::Tensor m = block.mlp->forward(block.ln_2(y));
    x = y + m;
    EXPECT_NEAR(reading.at("attention_logit_max")[i], logit_max, 1e-5 * logit_max);
    EXPECT_NEAR(reading.at("mlp_output_max")[i], m.abs().max().item<double>(), 1e-6);
    EXPECT_NEAR(reading.at("residual_max")[i], x.abs().max().item<double>(), 1e-6);
  }
}

TEST(Thermometer, LlamaWithGroupedQueryAttentionReportsEveryLayerAndStopsWhenDetached) {
  ModelConfig config = ModelConfig::preset("llama-tiny");  // 4 query heads over 2 kv heads
  auto model = make_model(config, 5);
  const torch::Tensor idx = torch::randint(config.vocab_size, {1, 16}, torch::kLong);
  Thermometer thermometer;
  thermometer.reset(config.n_layer, torch::kCPU);
  model->set_thermometer(&thermometer);
  model->forward(idx);
  model->set_thermometer(nullptr);
  const auto first = thermometer.read();
  for (const auto& [site, values] : first) {
    ASSERT_EQ(values.size(), static_cast<size_t>(config.n_layer)) << site;
    for (double v : values) EXPECT_TRUE(std::isfinite(v) && v > 0) << site;
  }
  // Detached, a forward on other data records nothing.
  model->forward(idx * 0);
  EXPECT_EQ(thermometer.read(), first);
}

TEST(Thermometer, AttentionLogitsInBlocksOfQueryRowsMatchTheDenseCausalMaximum) {
  // 300 positions: three blocks of query rows, the last one partial; 4 query heads over 2 kv
  // heads; random data whose largest |logit| lies above the diagonal, where the mask hides it.
  torch::manual_seed(9);
  const torch::Tensor q = torch::randn({2, 4, 300, 8}), k = torch::randn({2, 2, 300, 8});
  const torch::Tensor kr = k.repeat_interleave(2, 1);
  const torch::Tensor scores = torch::matmul(q, kr.transpose(2, 3)) / std::sqrt(8.0);
  const double causal = scores.abs().tril().max().item<double>();
  ASSERT_LT(causal, scores.abs().max().item<double>()) << "the data should have a larger value above the diagonal";
  Thermometer thermometer;
  thermometer.reset(1, torch::kCPU);
  thermometer.record_attention_logits(0, q, k);
  EXPECT_NEAR(thermometer.read().at("attention_logit_max")[0], causal, 1e-5 * causal);
}

}  // namespace
}  // namespace gradbox::model

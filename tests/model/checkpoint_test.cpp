#include <gtest/gtest.h>
#include <torch/torch.h>

#include "model/causal_lm.h"
#include "model/checkpoint.h"
#include "test_util.h"

namespace gradbox::model {
namespace {

struct StepResult {
  torch::Tensor loss;
  std::map<std::string, torch::Tensor> grads;
  torch::Tensor rng_after;  // the next draw from the global RNG after backward
};

// One training step of a freshly built model (same seed, same data, same RNG stream).
StepResult train_step(const ModelConfig& config, const std::string& strategy, double dropout) {
  auto model = make_model(config, 11);
  model->train();
  model->set_dropout(dropout);
  model->set_activation_checkpointing(ActivationCheckpointing::parse(strategy));
  torch::manual_seed(5);
  torch::Tensor data = torch::randint(config.vocab_size, {3, 25}, torch::kLong);
  using torch::indexing::Slice;
  StepResult run;
  run.loss = language_model_loss(model->forward(data.index({Slice(), Slice(0, 24)})),
                                 data.index({Slice(), Slice(1)}));
  run.loss.backward();
  for (const auto& item : model->named_parameters()) {
    EXPECT_TRUE(item.value().grad().defined()) << strategy << ": no gradient for " << item.key();
    if (item.value().grad().defined()) run.grads[item.key()] = item.value().grad().clone();
  }
  run.rng_after = torch::rand({4});
  return run;
}

struct Case {
  const char* preset;
  const char* strategy;
};

class CheckpointGradients : public ::testing::TestWithParam<Case> {};

TEST_P(CheckpointGradients, EqualThePlainModelsExactly) {
  ModelConfig config = ModelConfig::preset(GetParam().preset);
  config.n_layer = 4;  // alternate / first_last / custom each select a distinct subset
  const StepResult plain = train_step(config, "none", 0.1);
  const StepResult ckpt = train_step(config, GetParam().strategy, 0.1);
  EXPECT_TRUE(torch::equal(plain.loss, ckpt.loss));
  ASSERT_EQ(plain.grads.size(), ckpt.grads.size());
  for (const auto& [name, g] : plain.grads) {
    ASSERT_TRUE(ckpt.grads.count(name)) << name;
    EXPECT_TRUE(torch::equal(g, ckpt.grads.at(name)))
        << name << ": max diff " << (g - ckpt.grads.at(name)).abs().max().item<float>();
  }
  // The replay restores the RNG: the stream after backward is the one without checkpointing.
  EXPECT_TRUE(torch::equal(plain.rng_after, ckpt.rng_after));
}

INSTANTIATE_TEST_SUITE_P(
    Strategies, CheckpointGradients,
    ::testing::Values(Case{"gpt2-tiny", "alternate"}, Case{"gpt2-tiny", "first_last"},
                      Case{"gpt2-tiny", "all"}, Case{"gpt2-tiny", "custom:1,2"},
                      Case{"llama-tiny", "alternate"}, Case{"llama-tiny", "first_last"},
                      Case{"llama-tiny", "all"}, Case{"llama-tiny", "custom:3"}),
    [](const ::testing::TestParamInfo<Case>& info) {
      std::string name = std::string(info.param.preset) + "_" + info.param.strategy;
      for (char& ch : name) {
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
      }
      return name;
    });

TEST(Checkpoint, DropoutReallyFiresInTheseRuns) {
  // Guards the test above: with dropout the loss must differ from the run without it.
  const ModelConfig config = ModelConfig::preset("gpt2-tiny");
  EXPECT_FALSE(torch::equal(train_step(config, "all", 0.1).loss, train_step(config, "all", 0.0).loss));
}

TEST(Checkpoint, KeepsOnlyTheInputForBackward) {
  // A block that would save two intermediate tensors; the checkpointed one saves only x.
  torch::Tensor w = torch::randn({8, 8}, torch::requires_grad());
  BlockFn fn = [&](const torch::Tensor& x) { return torch::tanh(torch::matmul(x, w)).sin(); };
  torch::Tensor x = torch::randn({4, 8}, torch::requires_grad());
  torch::Tensor y = checkpoint(fn, x);
  EXPECT_TRUE(y.requires_grad());
  EXPECT_NE(y.grad_fn()->name().find("CheckpointFunction"), std::string::npos);
  y.sum().backward();
  const torch::Tensor gw = w.grad().clone(), gx = x.grad().clone();
  w.grad().zero_();
  x.grad().zero_();
  fn(x).sum().backward();
  EXPECT_TRUE(torch::equal(gw, w.grad()));
  EXPECT_TRUE(torch::equal(gx, x.grad()));
}

TEST(Checkpoint, PassesThroughWithoutGrad) {
  torch::Tensor w = torch::randn({8, 8}, torch::requires_grad());
  BlockFn fn = [&](const torch::Tensor& x) { return torch::matmul(x, w); };
  {
    torch::NoGradGuard no_grad;
    EXPECT_FALSE(checkpoint(fn, torch::randn({2, 8}, torch::requires_grad())).requires_grad());
  }
  // An input without a gradient: plain call, so w still gets its gradient.
  torch::Tensor y = checkpoint(fn, torch::randn({2, 8}));
  y.sum().backward();
  EXPECT_TRUE(w.grad().defined());
}

TEST(Checkpoint, CustomLayerOutOfRangeNamesTheFlag) {
  auto model = make_model(ModelConfig::preset("gpt2-tiny"), 1);
  testing::expect_input_error(
      [&] { model->set_activation_checkpointing(ActivationCheckpointing::parse("custom:2")); },
      "--activation-checkpointing", "layer 2");
  EXPECT_EQ(model->activation_checkpointing().strategy, CheckpointStrategy::none);
}

}  // namespace
}  // namespace gradbox::model

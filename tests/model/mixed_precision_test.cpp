// Note [Mixed precision] in src/worker/loss_scale.h: under autocast the matmuls run in 16 bits
// while the residual stream, every norm's input and output, and the loss stay fp32. Checked
// under CPU autocast (bf16), whose policy keeps neither norms nor softmax in fp32 by itself: what
// holds here is gradbox's own doing, and CUDA's policy only adds to it.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <ATen/autocast_mode.h>

#include "model/causal_lm.h"
#include "model/gpt2.h"
#include "model/llama.h"

namespace gradbox::model {
namespace {

// bf16 autocast on the CPU for the scope's life.
class CpuAutocast {
 public:
  CpuAutocast() {
    at::autocast::set_autocast_enabled(at::kCPU, true);
    at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
    at::autocast::increment_nesting();
  }
  ~CpuAutocast() {
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    at::autocast::set_autocast_enabled(at::kCPU, false);
  }
};

TEST(MixedPrecision, Gpt2KeepsItsResidualStreamNormsAndLossInFp32) {
  const ModelConfig config = ModelConfig::preset("gpt2-tiny");
  auto model = std::dynamic_pointer_cast<GPT2LMHeadModel>(make_model(config, 3));
  ASSERT_TRUE(model);
  const torch::Tensor idx = torch::randint(config.vocab_size, {2, 16}, torch::kLong);
  CpuAutocast autocast;
  GPT2Model& t = model->transformer();
  torch::Tensor x = t.wte(idx) + t.wpe(torch::arange(16, idx.options()));
  EXPECT_EQ(x.scalar_type(), torch::kFloat32);
  for (const auto& block : t.blocks) {
    const torch::Tensor normed = block->ln_1(x);
    EXPECT_EQ(normed.scalar_type(), torch::kFloat32) << "a norm sees the fp32 residual stream";
    EXPECT_EQ(block->attn->c_attn(normed).scalar_type(), torch::kBFloat16) << "autocast is on";
    EXPECT_EQ(block->mlp->forward(block->ln_2(x)).scalar_type(), torch::kBFloat16);
    x = block->forward(x);
    EXPECT_EQ(x.scalar_type(), torch::kFloat32) << "residual additions promote to fp32";
  }
  EXPECT_EQ(model->hidden(idx).scalar_type(), torch::kFloat32);
  const torch::Tensor targets = torch::randint(config.vocab_size, {2, 16}, torch::kLong);
  EXPECT_EQ(model->loss(idx, targets).scalar_type(), torch::kFloat32);
  EXPECT_EQ(model->loss(idx, targets, 8).scalar_type(), torch::kFloat32) << "the chunked head too";
}

TEST(MixedPrecision, LlamaKeepsItsResidualStreamAndNormsInFp32) {
  const ModelConfig config = ModelConfig::preset("llama-tiny");
  LlamaDecoderLayer layer(config);
  const int64_t head_dim = config.n_embd / config.n_head;
  const RotaryTables rope = rotary_tables(16, head_dim, config.rope_theta, torch::kCPU);
  const torch::Tensor x = torch::randn({2, 16, config.n_embd});
  CpuAutocast autocast;
  EXPECT_EQ(layer.input_layernorm->forward(x).scalar_type(), torch::kFloat32);
  EXPECT_EQ(layer.mlp->forward(layer.post_attention_layernorm->forward(x)).scalar_type(), torch::kBFloat16);
  EXPECT_EQ(layer.forward(x, rope).scalar_type(), torch::kFloat32);
  auto model = make_model(config, 3);
  const torch::Tensor idx = torch::randint(config.vocab_size, {1, 16}, torch::kLong);
  EXPECT_EQ(model->hidden(idx).scalar_type(), torch::kFloat32);
  EXPECT_EQ(model->loss(idx, idx).scalar_type(), torch::kFloat32);
}

}  // namespace
}  // namespace gradbox::model

// Note [Memory plan]: the parts a step keeps alive, for GPT-2-Large on a 15 GB T4, the case it
// was made for.
#include "worker/memory_plan.h"

#include <gtest/gtest.h>

#include <cmath>

namespace gradbox::worker {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

MemoryPlanInputs gpt2_large_on_a_t4() {
  MemoryPlanInputs in;
  in.model = model::ModelConfig::preset("gpt2-large");
  in.micro_batch = 1;
  in.block_size = 1024;
  in.cuda = true;
  in.precision = Precision::fp16;
  return in;
}

double part(const MemoryPlan& plan, const std::string& prefix) {
  for (const MemoryPart& p : plan.parts)
    if (p.name.rfind(prefix, 0) == 0) return p.bytes;
  return -1;
}

TEST(MemoryPlan, GPT2LargeStatesAreSixteenBytesAParameterAsTheIssueCountsThem) {
  const MemoryPlan plan = plan_memory(gpt2_large_on_a_t4());
  const double p = 774'030'080;  // GPT-2-Large's parameters, the tied head once
  EXPECT_EQ(gpt2_large_on_a_t4().model.parameter_count(), 774'030'080);
  EXPECT_EQ(part(plan, "parameters"), 4 * p);
  EXPECT_EQ(part(plan, "gradients"), 4 * p);
  EXPECT_EQ(part(plan, "optimizer moments"), 8 * p);
  EXPECT_EQ(part(plan, "autocast"), 2 * p);
  // 36 layers x 1024 tokens x 16 x 1280 values x 2 bytes; the head: 1024 x 50257 x 12 bytes.
  EXPECT_EQ(part(plan, "activations of 36 layers"), 36.0 * 1024 * 16 * 1280 * 2);
  EXPECT_EQ(part(plan, "LM head logits"), 1024.0 * 50257 * 12);
  EXPECT_NEAR(plan.device_bytes / kGiB, 14.96, 0.01);  // over 90% of 15 GiB
  EXPECT_FALSE(memory_plan_fits(plan, 15 * kGiB));
  const std::string report = format_memory_plan(plan, gpt2_large_on_a_t4(), 15 * kGiB, "cuda:0");
  EXPECT_NE(report.find("DOES NOT FIT"), std::string::npos) << report;
  EXPECT_NE(report.find("--lm-head-chunk"), std::string::npos) << report;
}

TEST(MemoryPlan, ChunkingTheHeadAndCheckpointingShrinkWhatTheyShould) {
  MemoryPlanInputs in = gpt2_large_on_a_t4();
  const MemoryPlan before = plan_memory(in);
  in.lm_head_chunk = 256;
  in.checkpointed_layers = 36;
  const MemoryPlan after = plan_memory(in);
  EXPECT_EQ(part(after, "LM head, chunked"), 256.0 * 50257 * 8 + 1024.0 * 1280 * 4 + 50257.0 * 1280 * 4);
  EXPECT_EQ(part(after, "activations of 0 layers"), -1);  // nothing kept whole
  EXPECT_EQ(part(after, "activations of 36 checkpointed"), 36.0 * 1024 * 1280 * 2 + 1024.0 * 16 * 1280 * 2);
  EXPECT_LT(after.device_bytes, before.device_bytes - 1.5 * kGiB);
  // Now it fits, barely: the fp32 states, moments and 16-bit copies (18 bytes a parameter,
  // 13.0 GiB) are nearly all of it, so four sequences at once do not.
  EXPECT_TRUE(memory_plan_fits(after, 15 * kGiB));
  EXPECT_NEAR(after.device_bytes / kGiB, 13.44, 0.01);
  in.micro_batch = 4;
  EXPECT_FALSE(memory_plan_fits(plan_memory(in), 15 * kGiB));
}

// Note [8-bit moments]: --moments int8 leaves GPT-2-Large 4.3 GiB more of a T4: with the head
// chunked it fits without recomputing any layer, and four sequences at once fit with every layer
// recomputed.
TEST(MemoryPlan, EightBitMomentsLeaveRoomForActivations) {
  MemoryPlanInputs in = gpt2_large_on_a_t4();
  in.moments = MomentStorage::int8;
  const double p = 774'030'080;
  EXPECT_EQ(part(plan_memory(in), "optimizer moments (2 x int8"), 2 * p + 16 * std::ceil(p / 256));
  const std::string report = format_memory_plan(plan_memory(gpt2_large_on_a_t4()), gpt2_large_on_a_t4(), 15 * kGiB, "cuda:0");
  EXPECT_NE(report.find("--moments int8"), std::string::npos) << report;
  in.lm_head_chunk = 256;
  EXPECT_TRUE(memory_plan_fits(plan_memory(in), 15 * kGiB)) << plan_memory(in).device_bytes / kGiB;
  in.checkpointed_layers = 36;
  in.micro_batch = 4;
  EXPECT_TRUE(memory_plan_fits(plan_memory(in), 15 * kGiB)) << plan_memory(in).device_bytes / kGiB;
}

TEST(MemoryPlan, DilocoStateAndTheExchangesCopiesGoOnTheHost) {
  MemoryPlanInputs in = gpt2_large_on_a_t4();
  const double device = plan_memory(in).device_bytes;
  in.diloco = true;
  in.exchange = true;
  in.overlap = true;
  const MemoryPlan plan = plan_memory(in);
  EXPECT_EQ(plan.device_bytes, device);
  EXPECT_EQ(plan.host_bytes, 8.0 * 774'030'080 + 8.0 * 774'030'080);
}

TEST(MemoryPlan, OnTheCpuActivationsAreFp32AndThereAreNoAutocastCopies) {
  MemoryPlanInputs in;
  in.model = model::ModelConfig::preset("llama-mini");
  in.micro_batch = 4;
  in.block_size = 256;
  const MemoryPlan plan = plan_memory(in);
  EXPECT_EQ(part(plan, "autocast"), -1);
  const model::ModelConfig& m = in.model;
  EXPECT_EQ(part(plan, "activations of 6 layers"),
            6.0 * 1024 * (7.0 * m.n_embd + 3.0 * m.kv_dim() + 4.0 * m.ffn_dim()) * 4);
}

}  // namespace
}  // namespace gradbox::worker

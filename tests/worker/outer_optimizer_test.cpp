// The outer step of DiLoCo rounds and the inner SGD against plain tensor-op references, one
// rounding per written operation (replicas must get the same bytes on any machine).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "worker/flat_parameters.h"
#include "worker/optimizer.h"
#include "worker/outer_optimizer.h"

namespace gradbox::worker {
namespace {

torch::Tensor random_vector(int64_t n, uint64_t seed) {
  torch::manual_seed(seed);
  return torch::randn({n});
}

TEST(OuterOptimizer, NesterovAndHeavyBallStepsMatchTheFormulaBitForBit) {
  const int64_t n = 10007;  // odd: no vector width divides it
  for (const bool nesterov : {true, false}) {
    torch::Tensor params = random_vector(n, 1);
    OuterOptimizer outer(params, OuterHyper{0.7, 0.9, nesterov});
    torch::Tensor global = params.clone(), momentum = torch::zeros({n});
    for (int round = 0; round < 4; ++round) {
      torch::Tensor local = params + 0.01 * random_vector(n, 10 + round);  // what the inner steps did
      torch::Tensor delta;
      outer.pseudo_gradient(local, delta);
      ASSERT_TRUE(torch::equal(delta, global - local));
      // The reference, one operation at a time.
      momentum = momentum * 0.9f + delta;
      const torch::Tensor update = nesterov ? delta + momentum * 0.9f : momentum;
      global = global - update * 0.7f;
      outer.step(delta, local);
      ASSERT_TRUE(torch::equal(outer.global(), global)) << "round " << round << " nesterov " << nesterov;
      ASSERT_TRUE(torch::equal(outer.momentum(), momentum));
      ASSERT_TRUE(torch::equal(local, global));  // every replica continues from the new global state
      params = local;
    }
  }
}

TEST(OuterOptimizer, ASkippedRoundGoesBackToTheGlobalState) {
  torch::Tensor params = random_vector(100, 2);
  OuterOptimizer outer(params, OuterHyper{});
  const torch::Tensor start = params.clone();
  params.add_(1.0);
  outer.discard_round(params);
  EXPECT_TRUE(torch::equal(params, start));
  EXPECT_EQ(outer.momentum().abs().sum().item<float>(), 0.f);
}

struct Net : torch::nn::Module {
  Net() {
    torch::manual_seed(3);
    w = register_parameter("w", torch::randn({257, 3}));
    bias = register_parameter("bias", torch::randn({5}));
  }
  torch::Tensor w, bias;
};

TEST(Optimizer, FusedSgdMatchesTheTensorOpsPathAndTheFormula) {
  Net fused_net, ops_net;
  auto no_decay = [](const std::string& name) { return name == "bias"; };
  FlatParameters fused_flat(fused_net, no_decay), ops_flat(ops_net, no_decay);
  Optimizer fused(fused_flat, OptimizerHyper{OptimizerKind::sgd}, OptimizerBackend::fused_cpu);
  Optimizer ops(ops_flat, OptimizerHyper{OptimizerKind::sgd}, OptimizerBackend::tensor_ops);
  torch::Tensor expected = fused_flat.params().clone();
  for (int step = 0; step < 3; ++step) {
    const torch::Tensor grad = random_vector(fused_flat.numel(), 20 + step);
    fused_flat.grads().copy_(grad);
    ops_flat.grads().copy_(grad);
    fused.step(0.1, 0.01, 0.5);
    ops.step(0.1, 0.01, 0.5);
    torch::Tensor decayed = expected.narrow(0, 0, fused_flat.decay_numel());
    decayed.mul_(1.0f - 0.1f * 0.01f);
    expected = expected - (grad * 0.5f) * 0.1f;
    EXPECT_TRUE(torch::allclose(ops_flat.params(), fused_flat.params(), 0, 1e-6)) << "step " << step;
    EXPECT_TRUE(torch::equal(fused_flat.params(), expected)) << "step " << step;
  }
  // Only weights decay: with a zero gradient the bias does not move.
  fused_flat.grads().zero_();
  const torch::Tensor bias = fused_flat.params().narrow(0, fused_flat.decay_numel(), 5).clone();
  fused.step(0.1, 0.5, 1.0);
  EXPECT_TRUE(torch::equal(fused_flat.params().narrow(0, fused_flat.decay_numel(), 5), bias));
}

}  // namespace
}  // namespace gradbox::worker

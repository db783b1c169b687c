// The outer step of DiLoCo rounds and the inner SGD against plain tensor-op references, one
// rounding per written operation (replicas must get the same bytes on any machine).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdlib>

#include "worker/flat_parameters.h"
#include "worker/optimizer.h"
#include "worker/eager_outer.h"
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

namespace gradbox::worker {
namespace {

std::vector<ParameterSegment> gpt2_like_segments() {
  // Decay parameters first, as FlatParameters lays them out; two layers.
  std::vector<std::pair<std::string, int64_t>> named = {
      {"transformer.wte.weight", 4096}, {"transformer.h.0.attn.c_attn.weight", 768},
      {"transformer.h.0.mlp.c_fc.weight", 1024}, {"transformer.h.1.attn.c_attn.weight", 768},
      {"transformer.h.1.mlp.c_fc.weight", 1024}, {"transformer.wpe.weight", 512},
      {"transformer.h.0.ln_1.weight", 16}, {"transformer.h.1.ln_1.weight", 16}, {"transformer.ln_f.weight", 16}};
  std::vector<ParameterSegment> segments;
  int64_t offset = 0;
  for (const auto& [name, numel] : named) {
    segments.push_back({name, offset, numel, {numel}, true});
    offset += numel;
  }
  return segments;
}

std::vector<int> owners(const std::vector<Fragment>& fragments, int64_t n) {
  std::vector<int> owner(static_cast<size_t>(n), -1);
  for (size_t p = 0; p < fragments.size(); ++p)
    for (const auto& [begin, end] : fragments[p].ranges)
      for (int64_t i = begin; i < end; ++i) {
        EXPECT_EQ(owner[static_cast<size_t>(i)], -1) << "element " << i << " in two fragments";
        owner[static_cast<size_t>(i)] = static_cast<int>(p);
      }
  return owner;
}

TEST(Fragments, LayersAreStridedAndEveryElementIsInExactlyOneFragment) {
  const std::vector<ParameterSegment> segments = gpt2_like_segments();
  const int64_t n = segments.back().offset + segments.back().numel;
  EXPECT_EQ(layer_of("transformer.h.12.mlp.c_fc.weight"), 12);
  EXPECT_EQ(layer_of("model.layers.3.self_attn.q_proj.weight"), 3);
  EXPECT_EQ(layer_of("transformer.wte.weight"), -1);
  for (int64_t f : {1, 2, 3, 4}) {
    const std::vector<Fragment> fragments = partition_fragments(segments, f);
    ASSERT_EQ(fragments.size(), static_cast<size_t>(f));
    const std::vector<int> owner = owners(fragments, n);
    int64_t total = 0;
    for (const Fragment& fr : fragments) total += fr.numel;
    EXPECT_EQ(total, n) << f << " fragments";
    EXPECT_EQ(std::count(owner.begin(), owner.end(), -1), 0) << f << " fragments";
    if (f == 1) {
      EXPECT_EQ(fragments[0].ranges.size(), 1u) << "one fragment is the whole vector, one range";
    }
  }
  // Two fragments of a two-layer model: a layer each, and a layer's tensors stay together.
  const std::vector<Fragment> two = partition_fragments(segments, 2);
  const std::vector<int> owner = owners(two, n);
  for (const ParameterSegment& s : segments) {
    const int64_t layer = layer_of(s.name);
    if (layer < 0) continue;
    for (int64_t i = s.offset; i < s.offset + s.numel; ++i) ASSERT_EQ(owner[static_cast<size_t>(i)], layer % 2) << s.name;
  }
  // The tensors outside the layers (4,624 elements) even the fragments out: wte (4,096) is cut,
  // 2,312 into each fragment's room, and wpe and ln_f, which fit, stay whole.
  EXPECT_EQ(two[0].numel, n / 2);
  EXPECT_EQ(two[1].numel, n / 2);
  const ParameterSegment& wte = segments[0];
  EXPECT_EQ(std::count(owner.begin() + wte.offset, owner.begin() + wte.offset + wte.numel, 0), 2312);
  for (size_t whole : {5u, 8u}) {
    const ParameterSegment& s = segments[whole];
    EXPECT_EQ(std::count(owner.begin() + s.offset, owner.begin() + s.offset + s.numel, owner[static_cast<size_t>(s.offset)]),
              s.numel)
        << s.name << " was cut though it fits";
  }
  // Three fragments of two layers: every tensor is placed by size, and the fragments are still
  // even to an element.
  const std::vector<Fragment> three = partition_fragments(segments, 3);
  for (const Fragment& f : three) EXPECT_LE(std::abs(f.numel - n / 3), 1) << "fragment of " << f.numel;
  // Layers that do not divide evenly (three over two fragments) leave a gap the others fill first.
  std::vector<ParameterSegment> uneven;
  int64_t at = 0;
  for (const auto& [name, numel] : std::vector<std::pair<std::string, int64_t>>{
           {"wte", 100}, {"h.0.w", 1000}, {"h.1.w", 1000}, {"h.2.w", 1000}}) {
    uneven.push_back({name, at, numel, {numel}, true});
    at += numel;
  }
  const std::vector<Fragment> gap = partition_fragments(uneven, 2);
  EXPECT_EQ(gap[0].numel, 2000);  // layers 0 and 2
  EXPECT_EQ(gap[1].numel, 1100);  // layer 1 and all of wte
}

// A fragment's outer step touches its elements only, and the overlap merge keeps the local
// steps taken after the fragment's Δ went out.
TEST(Fragments, AnOuterStepOnAFragmentLeavesTheOthersAndKeepsLaterLocalSteps) {
  const torch::Tensor start = torch::arange(8, torch::kFloat32);
  OuterOptimizer outer(start, OuterHyper{0.5, 0.0, false});
  const Fragment fragment{{{1, 3}, {6, 8}}, 4};
  torch::Tensor params = start.clone() - 1.0;  // every element moved by -1 in the inner steps
  torch::Tensor delta;
  outer.pseudo_gradient(params, fragment, delta);
  EXPECT_TRUE(torch::equal(delta, torch::ones({4})));
  const torch::Tensor sent = torch::tensor({0.0f, 1.0f, 5.0f, 6.0f});  // params[1,2,6,7] as sent
  params -= 0.25;                                                        // a later local step
  outer.step(delta, fragment, params, &sent);
  // θ_g[fragment] = start - 0.5 * 1; params there = θ_g - 0.25; the others untouched.
  const torch::Tensor expected = torch::tensor({-1.25f, 0.25f, 1.25f, 1.75f, 2.75f, 3.75f, 5.25f, 6.25f});
  EXPECT_TRUE(torch::allclose(params, expected)) << params;
  const torch::Tensor global = torch::tensor({0.0f, 0.5f, 1.5f, 3.0f, 4.0f, 5.0f, 5.5f, 6.5f});
  EXPECT_TRUE(torch::allclose(outer.global(), global)) << outer.global();
}

// Note [Eager outer steps]: θ_g stepped on the agreed averages plus the offset is the paper's
// worker, whose own outer optimizer steps on Δ̃ = Δ̄^(t-1) + d^(t) - d^(t-1) each round, over a
// fragment of two ranges, with and without Nesterov (equal up to rounding: the sums differ in
// order); and the Δ handed to the exchange is the worker's progress since its own start.
TEST(EagerOuter, IsThePapersPerWorkerOuterStepAsAnOffsetFromTheAgreedOne) {
  const int64_t n = 1001;
  const Fragment fragment{{{3, 400}, {700, 1001}}, 698};
  for (const bool nesterov : {true, false}) {
    const OuterHyper hyper{0.7, 0.9, nesterov};
    const torch::Tensor start = random_vector(n, 4);
    OuterOptimizer agreed(start, hyper), paper(start, hyper);
    EagerOuter eager(n, 1, hyper);
    eager.agreed(0, 10, 40);  // a round before: this worker had 10 of 40 tokens, a share of 1/4
    torch::Tensor params = start.clone(), paper_params = start.clone();
    torch::Tensor last_average = torch::zeros({fragment.numel}), last_share = torch::zeros({fragment.numel});
    for (int round = 0; round < 5; ++round) {
      // The worker's inner steps, then its Δ: θ_g - θ_local corrected by the offset.
      const torch::Tensor progress = 0.01 * random_vector(n, 20 + round);
      torch::Tensor local = params + progress, own;
      agreed.pseudo_gradient(local, fragment, own);
      eager.own_progress(fragment, own);
      torch::Tensor expected_own;
      agreed.pseudo_gradient(agreed.global() + progress, fragment, expected_own);
      ASSERT_TRUE(torch::allclose(own, expected_own, 1e-5, 1e-6)) << "round " << round;
      const torch::Tensor before = local.clone();
      ASSERT_TRUE(eager.send(0, fragment, own, 10, agreed.global(), local));
      // The paper's worker: its outer step on Δ̃ from where it stood.
      const torch::Tensor share = own * 0.25f;
      paper.step(last_average + share - last_share, fragment, paper_params);
      last_share = share;
      for (const auto& [begin, end] : fragment.ranges)
        EXPECT_TRUE(torch::allclose(local.slice(0, begin, end), paper_params.slice(0, begin, end), 1e-5, 1e-6))
            << "round " << round << " nesterov " << nesterov;
      EXPECT_TRUE(torch::equal(local.slice(0, 0, 3), before.slice(0, 0, 3)));  // outside the fragment
      EXPECT_TRUE(torch::equal(local.slice(0, 400, 700), before.slice(0, 400, 700)));
      // The round is agreed (the others' Δs, this worker's at its share) and merged under the worker.
      last_average = share + 0.75f * 0.01f * random_vector(fragment.numel, 40 + round);
      const torch::Tensor sent = gather_fragment(agreed.global(), fragment);
      agreed.step(last_average, fragment, local, &sent);
      eager.agreed(0, 10, 40);
      params = local;
    }
  }
}

// The bookkeeping on exact values: nothing before a fragment's share is known, the step on the
// change of this worker's share, per fragment; settle and forget.
TEST(EagerOuter, WaitsForAShareStepsOnTheChangeOfItAndSettles) {
  const Fragment first{{{0, 2}}, 2}, second{{{2, 4}}, 2};
  EagerOuter eager(4, 2, OuterHyper{0.5, 0.5, true});
  const torch::Tensor global = torch::ones({4});
  torch::Tensor params = torch::full({4}, 3.0f);
  const torch::Tensor mine = torch::tensor({4.0f, 8.0f});
  EXPECT_FALSE(eager.send(0, first, mine, 10, global, params));
  EXPECT_TRUE(torch::equal(params, torch::full({4}, 3.0f)));
  eager.agreed(0, 10, 40);
  EXPECT_EQ(eager.others_tokens(), (std::vector<int64_t>{30, -1}));
  EXPECT_FALSE(eager.send(1, second, mine, 10, global, params));
  // Share 10/40: d = u = (1, 2); e = u; o = -0.5 (u + 0.5 e) = (-0.75, -1.5); params = θ_g + o there.
  ASSERT_TRUE(eager.send(0, first, mine, 10, global, params));
  EXPECT_TRUE(torch::equal(params, torch::tensor({0.25f, -0.5f, 3.0f, 3.0f}))) << params;
  // The same share again: u = 0, e = (0.5, 1), o -= 0.5 * 0.5 e.
  ASSERT_TRUE(eager.send(0, first, mine, 10, global, params));
  EXPECT_TRUE(torch::equal(eager.offset(), torch::tensor({-0.875f, -1.75f, 0.0f, 0.0f}))) << eager.offset();
  torch::Tensor delta = torch::zeros({2});
  eager.own_progress(first, delta);
  EXPECT_TRUE(torch::equal(delta, torch::tensor({-0.875f, -1.75f})));
  eager.settle(first);
  for (torch::Tensor* t : {&eager.offset(), &eager.momentum(), &eager.sent_share()})
    EXPECT_TRUE(torch::equal(*t, torch::zeros({4})));
  EXPECT_EQ(eager.others_tokens()[0], 30);
  eager.forget();
  EXPECT_EQ(eager.others_tokens(), (std::vector<int64_t>{-1, -1}));
}

}  // namespace
}  // namespace gradbox::worker

namespace gradbox::worker {
namespace {

// The outer step's tensor-op path on a GPU (the CPU has its own kernel): the same θ_g, momentum
// and merged parameters as the CPU kernel, to float rounding, over a fragment of two ranges.
// Skipped where no GPU is present: the check a GPU machine owes (README: tests on a GPU).
TEST(Fragments, TheCudaOuterStepMatchesTheCpuKernel) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  torch::manual_seed(7);
  const torch::Tensor start = torch::randn({1000});
  const Fragment fragment{{{10, 300}, {600, 1000}}, 690};
  torch::Tensor params[2] = {start - 0.01 * torch::randn({1000}), torch::Tensor()};
  params[1] = params[0].to(torch::kCUDA);
  OuterOptimizer outers[2] = {OuterOptimizer(start, OuterHyper{0.7, 0.9, true}),
                              OuterOptimizer(start.to(torch::kCUDA), OuterHyper{0.7, 0.9, true})};
  for (int round = 0; round < 3; ++round) {
    torch::Tensor deltas[2], sent[2];
    for (int d = 0; d < 2; ++d) {
      outers[d].pseudo_gradient(params[d], fragment, deltas[d]);
      sent[d] = torch::cat({params[d].narrow(0, 10, 290), params[d].narrow(0, 600, 400)}).to(torch::kCPU);
    }
    ASSERT_TRUE(torch::allclose(deltas[0], deltas[1], 1e-6, 1e-7));
    const torch::Tensor later = 0.001 * torch::randn({1000});  // a local step after the send
    for (int d = 0; d < 2; ++d) {
      params[d] += later.to(params[d].device());
      outers[d].step(deltas[0], fragment, params[d], &sent[d]);
    }
    EXPECT_TRUE(torch::allclose(outers[0].global(), outers[1].global().cpu(), 1e-5, 1e-6)) << "round " << round;
    EXPECT_TRUE(torch::allclose(outers[0].momentum(), outers[1].momentum().cpu(), 1e-5, 1e-6)) << "round " << round;
    EXPECT_TRUE(torch::allclose(params[0], params[1].cpu(), 1e-5, 1e-6)) << "round " << round;
  }
}

}  // namespace
}  // namespace gradbox::worker

// The fused optimizers against references: torch::optim::AdamW for AdamW, and the whole-buffer
// tensor-op path (what GPUs run) for both AdamW and LAMB.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "kernels/adamw.h"
#include "worker/flat_parameters.h"
#include "worker/optimizer.h"

namespace gradbox::worker {
namespace {

// A small module with odd sizes and a no-decay group (biases), built identically from a seed.
struct TinyNet : torch::nn::Module {
  TinyNet() {
    torch::manual_seed(7);
    a = register_module("a", torch::nn::Linear(13, 7));
    b = register_module("b", torch::nn::Linear(7, 3));
  }
  torch::Tensor forward(const torch::Tensor& x) { return b(torch::tanh(a(x))); }
  torch::nn::Linear a{nullptr}, b{nullptr};
};

bool is_bias(const std::string& name) { return name.ends_with("bias"); }

void backward_once(TinyNet& net, int step) {
  torch::manual_seed(100 + step);
  net.forward(torch::randn({5, 13})).pow(2).sum().backward();
}

TEST(FlatParameters, ParametersAndGradientsAreViewsOfTheBuffers) {
  TinyNet net;
  FlatParameters flat(net, is_bias);
  EXPECT_EQ(flat.numel(), 13 * 7 + 7 + 7 * 3 + 3);
  EXPECT_EQ(flat.decay_numel(), 13 * 7 + 7 * 3);  // weights first
  for (const auto& s : flat.segments()) EXPECT_EQ(s.decay, !is_bias(s.name)) << s.name;
  backward_once(net, 0);
  // The gradient landed in the flat buffer, through the views.
  EXPECT_GT(flat.grads().abs().sum().item<double>(), 0.0);
  EXPECT_EQ(net.a->weight.grad().data_ptr<float>(), flat.grads().data_ptr<float>() + flat.segments()[0].offset);
  flat.params().fill_(0.5f);
  EXPECT_EQ(net.b->bias[0].item<float>(), 0.5f);
  flat.zero_grad();
  EXPECT_EQ(net.a->weight.grad().abs().sum().item<double>(), 0.0);
}

TEST(FlatParameters, TiedWeightAppearsOnce) {
  struct Tied : torch::nn::Module {
    Tied() {
      emb = register_parameter("emb", torch::ones({4, 3}));
      head = register_parameter("head", emb);  // the same tensor under a second name
    }
    torch::Tensor emb, head;
  } tied;
  FlatParameters flat(tied, [](const std::string&) { return false; });
  EXPECT_EQ(flat.numel(), 12);
  EXPECT_EQ(flat.segments().size(), 1u);
}

TEST(Optimizer, FusedAdamWMatchesTorchAdamW) {
  TinyNet reference, ours;
  // torch's AdamW with the same groups: decay on weights only.
  std::vector<torch::Tensor> decay, no_decay;
  for (const auto& p : reference.named_parameters()) (is_bias(p.key()) ? no_decay : decay).push_back(p.value());
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, std::make_unique<torch::optim::AdamWOptions>(
                                 torch::optim::AdamWOptions(1e-2).betas({0.9, 0.95}).eps(1e-8).weight_decay(0.1)));
  groups.emplace_back(no_decay, std::make_unique<torch::optim::AdamWOptions>(
                                    torch::optim::AdamWOptions(1e-2).betas({0.9, 0.95}).eps(1e-8).weight_decay(0.0)));
  torch::optim::AdamW torch_adamw(groups, torch::optim::AdamWOptions(1e-2));

  FlatParameters flat(ours, is_bias);
  Optimizer fused(flat, OptimizerHyper{OptimizerKind::adamw, 0.9, 0.95, 1e-8}, OptimizerBackend::fused_cpu);
  for (int step = 0; step < 6; ++step) {
    torch_adamw.zero_grad();
    backward_once(reference, step);
    torch_adamw.step();
    flat.zero_grad();
    backward_once(ours, step);
    fused.step(1e-2, 0.1, 1.0);
  }
  for (const auto& [name, p] : std::vector<std::pair<std::string, torch::Tensor>>{
           {"a.weight", ours.a->weight}, {"a.bias", ours.a->bias}, {"b.weight", ours.b->weight}, {"b.bias", ours.b->bias}}) {
    torch::Tensor expected = reference.named_parameters()[name];
    EXPECT_TRUE(torch::allclose(p, expected, 1e-5, 1e-6)) << name << " max diff "
                                                          << (p - expected).abs().max().item<float>();
  }
}

// The fused CPU path and the tensor-op path run the same update.
void expect_backends_agree(OptimizerKind kind, double grad_scale) {
  TinyNet a, b;
  FlatParameters flat_a(a, is_bias), flat_b(b, is_bias);
  OptimizerHyper hyper{kind, 0.9, 0.99, 1e-6};
  Optimizer fused(flat_a, hyper, OptimizerBackend::fused_cpu);
  Optimizer ops(flat_b, hyper, OptimizerBackend::tensor_ops);
  for (int step = 0; step < 5; ++step) {
    flat_a.zero_grad();
    flat_b.zero_grad();
    backward_once(a, step);
    backward_once(b, step);
    fused.step(3e-3, 0.05, grad_scale);
    ops.step(3e-3, 0.05, grad_scale);
  }
  EXPECT_TRUE(torch::allclose(flat_a.params(), flat_b.params(), 1e-5, 1e-6))
      << "max diff " << (flat_a.params() - flat_b.params()).abs().max().item<float>();
  EXPECT_TRUE(torch::allclose(fused.exp_avg_sq(), ops.exp_avg_sq(), 1e-5, 1e-9));
}

TEST(Optimizer, AdamWBackendsAgree) { expect_backends_agree(OptimizerKind::adamw, 0.5); }
TEST(Optimizer, LambBackendsAgree) { expect_backends_agree(OptimizerKind::lamb, 0.5); }

TEST(Optimizer, GradScaleEqualsScaledGradients) {
  // Folding clipping into grad_scale must equal clipping the gradients themselves.
  TinyNet a, b;
  FlatParameters flat_a(a, is_bias), flat_b(b, is_bias);
  Optimizer opt_a(flat_a, {}), opt_b(flat_b, {});
  backward_once(a, 0);
  backward_once(b, 0);
  flat_b.grads().mul_(0.25);
  opt_a.step(1e-3, 0.1, 0.25);
  opt_b.step(1e-3, 0.1, 1.0);
  EXPECT_TRUE(torch::equal(flat_a.params(), flat_b.params()));
}

TEST(AdamWKernel, OddSizesAndEmptyRange) {
  for (int64_t n : {0, 1, 7, 4097}) {
    std::vector<float> p(n, 1.f), g(n, 0.5f), m(n, 0.f), v(n, 0.f);
    kernels::AdamWStep s;
    s.lr = 0.1f;
    s.weight_decay = 0.f;
    kernels::adamw_cpu(p.data(), g.data(), m.data(), v.data(), n, s);
    // First Adam step moves every element by ~lr in the gradient's opposite direction.
    for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(p[i], 0.9f, 1e-5f) << "n=" << n << " i=" << i;
  }
}

}  // namespace
}  // namespace gradbox::worker

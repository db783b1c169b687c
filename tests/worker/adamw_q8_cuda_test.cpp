// Note [8-bit moments] on the GPU (label gpu; each test skips without a CUDA device): the CUDA
// kernel against its CPU reference, bit for bit (the tolerance is 0: both compute
// adamw_q8_math.h without FMA contraction, with IEEE division and square root), over sizes
// 0, 1, a block less one, a block, a block and one, odd multi-block sizes and a million values;
// non-finite gradients; guard bytes around every buffer for out-of-bounds writes; and the
// Optimizer on CUDA taking the kernel and agreeing with its tensor-op path.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/adamw_q8.h"
#include "kernels/adamw_q8_cuda.h"
#include "worker/flat_parameters.h"
#include "worker/optimizer.h"

namespace gradbox::worker {
namespace {

using kernels::kQ8Block;

constexpr int64_t kGuard = 64;  // elements of sentinel after every buffer

#define SKIP_WITHOUT_CUDA() \
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device"

// One moment's state on the host: codes and block ranges, each followed by kGuard sentinels.
struct HostMoment {
  std::vector<uint8_t> codes;
  std::vector<float> lo, hi;
  HostMoment(int64_t n, int64_t blocks) : codes(n + kGuard, 0xAB), lo(blocks + kGuard, -7.f), hi(blocks + kGuard, -7.f) {
    std::fill(codes.begin(), codes.begin() + n, 0);
    std::fill(lo.begin(), lo.begin() + blocks, 0.f);
    std::fill(hi.begin(), hi.begin() + blocks, 0.f);
  }
  kernels::Q8Moment view() { return {codes.data(), lo.data(), hi.data()}; }
};

torch::Tensor on_device(const std::vector<float>& x) { return torch::tensor(x).cuda(); }
torch::Tensor on_device(const std::vector<uint8_t>& x) {
  return torch::from_blob(const_cast<uint8_t*>(x.data()), {static_cast<int64_t>(x.size())}, torch::kUInt8).clone().cuda();
}

// Bit patterns, so that NaNs compare equal to themselves.
torch::Tensor bits(const torch::Tensor& floats) { return floats.cpu().view(torch::kInt32); }
torch::Tensor bits(const std::vector<float>& x) { return bits(torch::tensor(x)); }

// Runs `steps` steps of both kernels from the same state and expects the same bits everywhere,
// the guards untouched.
void expect_same_bits(int64_t n, int steps, bool poison) {
  const int64_t blocks = (n + kQ8Block - 1) / kQ8Block;
  std::mt19937 rng(static_cast<uint32_t>(n) + 7);
  std::normal_distribution<float> normal;
  std::uniform_real_distribution<float> octave(-20.f, 0.f);
  std::vector<float> param(n + kGuard, 1234.5f);
  for (int64_t i = 0; i < n; ++i) param[i] = normal(rng) * 0.02f;
  HostMoment m(n, blocks), v(n, blocks);
  torch::Tensor d_param = on_device(param), d_grad;
  torch::Tensor d_m_codes = on_device(m.codes), d_m_lo = on_device(m.lo), d_m_hi = on_device(m.hi);
  torch::Tensor d_v_codes = on_device(v.codes), d_v_lo = on_device(v.lo), d_v_hi = on_device(v.hi);
  kernels::AdamWStep s;
  s.lr = 1e-3f;
  s.weight_decay = 0.1f;
  s.grad_scale = 0.5f;
  for (int step = 1; step <= steps; ++step) {
    std::vector<float> grad(n + kGuard, 0.f);
    for (int64_t i = 0; i < n; ++i) grad[i] = normal(rng) * std::exp2(octave(rng));
    if (poison && n > 3) {
      grad[1] = NAN;
      grad[2] = INFINITY;
      grad[n - 1] = -INFINITY;
    }
    d_grad = on_device(grad);
    s.step = step;
    const int64_t decay_end = n / 2;
    kernels::adamw_q8_cpu(param.data(), grad.data(), m.view(), v.view(), n, decay_end, s);
    kernels::adamw_q8_cuda(d_param.data_ptr<float>(), d_grad.data_ptr<float>(),
                           {d_m_codes.data_ptr<uint8_t>(), d_m_lo.data_ptr<float>(), d_m_hi.data_ptr<float>()},
                           {d_v_codes.data_ptr<uint8_t>(), d_v_lo.data_ptr<float>(), d_v_hi.data_ptr<float>()}, n,
                           decay_end, s, 0, nullptr);
  }
  torch::cuda::synchronize();
  const auto differing = [](const torch::Tensor& a, const torch::Tensor& b) { return a.ne(b).sum().item<int64_t>(); };
  EXPECT_EQ(differing(bits(d_param), bits(param)), 0) << "parameters, n=" << n;
  EXPECT_EQ(differing(d_m_codes.cpu(), on_device(m.codes).cpu()), 0) << "m codes, n=" << n;
  EXPECT_EQ(differing(d_v_codes.cpu(), on_device(v.codes).cpu()), 0) << "v codes, n=" << n;
  EXPECT_EQ(differing(bits(d_m_lo), bits(m.lo)) + differing(bits(d_m_hi), bits(m.hi)), 0) << "m ranges, n=" << n;
  EXPECT_EQ(differing(bits(d_v_lo), bits(v.lo)) + differing(bits(d_v_hi), bits(v.hi)), 0) << "v ranges, n=" << n;
  // The guards: both kernels left them as they were (the host's were compared above too).
  EXPECT_TRUE(d_param.cpu().narrow(0, n, kGuard).eq(1234.5f).all().item<bool>()) << n;
  EXPECT_TRUE(d_m_codes.cpu().narrow(0, n, kGuard).eq(0xAB).all().item<bool>()) << n;
  EXPECT_TRUE(d_v_lo.cpu().narrow(0, blocks, kGuard).eq(-7.f).all().item<bool>()) << n;
}

TEST(AdamWQ8Cuda, MatchesTheCpuKernelBitForBit) {
  SKIP_WITHOUT_CUDA();
  ASSERT_TRUE(kernels::adamw_q8_cuda_runs_on(0)) << "this build has no code for the device";
  for (int64_t n : {int64_t{0}, int64_t{1}, kQ8Block - 1, kQ8Block, kQ8Block + 1, 5 * kQ8Block + 77,
                    (int64_t{1} << 20) + 3})
    expect_same_bits(n, 4, false);
}

TEST(AdamWQ8Cuda, NonFiniteGradientsGoWhereTheCpuSends) {
  SKIP_WITHOUT_CUDA();
  expect_same_bits(3 * kQ8Block + 5, 3, true);
}

struct WideNet : torch::nn::Module {
  WideNet() {
    torch::manual_seed(5);
    a = register_module("a", torch::nn::Linear(61, 47));
    b = register_module("b", torch::nn::Linear(47, 9));
  }
  torch::nn::Linear a{nullptr}, b{nullptr};
};

// The Optimizer on CUDA with int8 moments runs the kernel: 8 steps of the same gradients agree
// with its own tensor-op path to 1% of the distance moved (the paths' log2 round differently
// at a level's edge; Q8Moments.FusedAndTensorOpsAgree on the CPU) and with the CPU optimizer
// bit for bit.
TEST(AdamWQ8Cuda, TheOptimizerOnCudaTakesTheKernel) {
  SKIP_WITHOUT_CUDA();
  WideNet kernel_net, ops_net, cpu_net;
  kernel_net.to(torch::kCUDA);
  ops_net.to(torch::kCUDA);
  const auto is_bias = [](const std::string& name) { return name.ends_with("bias"); };
  FlatParameters kernel_flat(kernel_net, is_bias), ops_flat(ops_net, is_bias), cpu_flat(cpu_net, is_bias);
  const OptimizerHyper hyper{OptimizerKind::adamw, 0.9, 0.95, 1e-8, MomentStorage::int8};
  Optimizer kernel(kernel_flat, hyper), ops(ops_flat, hyper, OptimizerBackend::tensor_ops), cpu(cpu_flat, hyper);
  const torch::Tensor start = cpu_flat.params().clone();
  for (int step = 0; step < 8; ++step) {
    torch::manual_seed(100 + step);
    const torch::Tensor grad = torch::randn({cpu_flat.numel()}) * 0.01;
    kernel_flat.grads().copy_(grad);
    ops_flat.grads().copy_(grad);
    cpu_flat.grads().copy_(grad);
    kernel.step(3e-3, 0.1, 0.5);
    ops.step(3e-3, 0.1, 0.5);
    cpu.step(3e-3, 0.1, 0.5);
  }
  const double moved = (cpu_flat.params() - start).norm().item<double>();
  const double apart = (kernel_flat.params().cpu() - ops_flat.params().cpu()).norm().item<double>();
  EXPECT_LT(apart, 0.02 * moved) << "moved " << moved << ", apart " << apart;
  EXPECT_TRUE(torch::equal(bits(kernel_flat.params()), bits(cpu_flat.params())));
}

}  // namespace
}  // namespace gradbox::worker

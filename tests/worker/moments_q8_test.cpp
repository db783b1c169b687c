// Note [8-bit moments]: the block code's error bounds, the fused kernel against the tensor-op
// path (what GPUs run), AdamW with 8-bit moments against fp32 AdamW, and moments in and out.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <map>
#include <string>
#include <random>
#include <vector>

#include "common/error.h"
#include "kernels/adamw_q8.h"
#include "worker/flat_parameters.h"
#include "worker/optimizer.h"

namespace gradbox::worker {
namespace {

using kernels::kQ8Block;
using kernels::Q8Sign;

// Log-uniform magnitudes over `octaves`, random signs, some exact zeros.
std::vector<float> moment_like(int64_t n, double octaves, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> e(-octaves, 0.0), u(0.0, 1.0);
  std::vector<float> x(n);
  for (float& v : x) v = u(rng) < 0.05 ? 0.f : static_cast<float>((u(rng) < 0.5 ? -1 : 1) * std::exp2(e(rng)) * 1e-3);
  return x;
}

// The largest relative error over the non-zero values in the block's range.
double worst_relative(const std::vector<float>& x, const std::vector<float>& y) {
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i)
    if (x[i] != 0) worst = std::max(worst, std::fabs(double{y[i]} - x[i]) / std::fabs(x[i]));
  return worst;
}

TEST(Q8Code, ErrorsStayWithinHalfALevelAndZerosAndSignsSurvive) {
  for (Q8Sign sign : {Q8Sign::signed_values, Q8Sign::non_negative}) {
    const int levels = sign == Q8Sign::signed_values ? 127 : 255;
    for (double octaves : {4.0, 20.0, 31.0}) {
      std::vector<float> x = moment_like(kQ8Block, octaves, 3);
      if (sign == Q8Sign::non_negative)
        for (float& v : x) v = std::fabs(v);
      std::vector<uint8_t> codes(kQ8Block);
      float lo = 0, hi = 0;
      kernels::q8_encode_block(x.data(), kQ8Block, sign, codes.data(), &lo, &hi);
      std::vector<float> y(kQ8Block);
      kernels::q8_decode_block(codes.data(), kQ8Block, sign, lo, hi, y.data());
      // Half a level of (hi - lo) / (levels - 1) octaves, and a little float rounding.
      const double bound = std::exp2(0.5 * (hi - lo) / (levels - 1)) - 1 + 1e-5;
      EXPECT_LE(worst_relative(x, y), bound) << octaves << " octaves";
      for (int64_t i = 0; i < kQ8Block; ++i) {
        if (x[i] == 0) {
          EXPECT_EQ(y[i], 0.f);
        }
        EXPECT_EQ(std::signbit(x[i]) && x[i] != 0, std::signbit(y[i])) << i;
      }
    }
  }
}

TEST(Q8Code, TheRangeIsCappedAndEmptyOrOddBlocksWork) {
  // Values beyond the cap (32 octaves for m, 64 for v), by a little or by much, become 0; the
  // floor itself is the lowest level.
  for (Q8Sign sign : {Q8Sign::signed_values, Q8Sign::non_negative}) {
    const float cap = kernels::q8_octaves(sign);
    std::vector<float> x(kQ8Block, 1.f);
    x[5] = std::exp2(-cap - 8.f);
    x[6] = std::exp2(-cap - 0.2f);
    x[7] = std::exp2(-cap);
    std::vector<uint8_t> codes(kQ8Block);
    float lo = 0, hi = 0;
    kernels::q8_encode_block(x.data(), kQ8Block, sign, codes.data(), &lo, &hi);
    EXPECT_FLOAT_EQ(hi, 0.f);
    EXPECT_FLOAT_EQ(lo, -cap);
    std::vector<float> y(kQ8Block);
    kernels::q8_decode_block(codes.data(), kQ8Block, sign, lo, hi, y.data());
    EXPECT_EQ(y[5], 0.f);
    EXPECT_EQ(y[6], 0.f);
    EXPECT_FLOAT_EQ(y[7], std::exp2(-cap));
  }
  std::vector<uint8_t> codes(kQ8Block);
  float lo = 0, hi = 0;
  std::vector<float> zeros(7, 0.f), out(7, 9.f);
  kernels::q8_encode_block(zeros.data(), 7, Q8Sign::signed_values, codes.data(), &lo, &hi);
  kernels::q8_decode_block(codes.data(), 7, Q8Sign::signed_values, lo, hi, out.data());
  for (float v : out) EXPECT_EQ(v, 0.f);
  std::vector<float> nan = {NAN, 1.f, INFINITY};
  kernels::q8_encode_block(nan.data(), 3, Q8Sign::signed_values, codes.data(), &lo, &hi);
  EXPECT_EQ(codes[0], 0);
  EXPECT_EQ(codes[2], 0);
  EXPECT_FLOAT_EQ(lo, 0.f);
}

// The tensor-op code (GPUs) writes the kernel's codes: the same ranges, and at most a level
// apart where log2 and exp2 round differently, over whole and partial blocks.
TEST(Q8Code, TensorOpsEncodeAndDecodeAsTheKernel) {
  const int64_t n = 5 * kQ8Block + 77;
  for (Q8Sign sign : {Q8Sign::signed_values, Q8Sign::non_negative}) {
    std::vector<float> x = moment_like(n, 24, 11);
    if (sign == Q8Sign::non_negative)
      for (float& v : x) v = std::fabs(v);
    const int64_t blocks = (n + kQ8Block - 1) / kQ8Block;
    std::vector<uint8_t> codes(n);
    std::vector<float> lo(blocks), hi(blocks), y(n);
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t len = std::min(kQ8Block, n - b * kQ8Block);
      kernels::q8_encode_block(x.data() + b * kQ8Block, len, sign, codes.data() + b * kQ8Block, &lo[b], &hi[b]);
      kernels::q8_decode_block(codes.data() + b * kQ8Block, len, sign, lo[b], hi[b], y.data() + b * kQ8Block);
    }
    torch::Tensor t_codes = torch::zeros({n}, torch::kUInt8), t_lo = torch::zeros({blocks}), t_hi = torch::zeros({blocks});
    q8_encode_range(torch::tensor(x), t_codes, t_lo, t_hi, 0, sign);
    EXPECT_TRUE(torch::allclose(t_lo, torch::tensor(lo), 0, 1e-5));
    EXPECT_TRUE(torch::allclose(t_hi, torch::tensor(hi), 0, 1e-5));
    const torch::Tensor kernel_codes = torch::from_blob(codes.data(), {n}, torch::kUInt8).to(torch::kInt32);
    const torch::Tensor level_gap = (t_codes.to(torch::kInt32).bitwise_and(0x7f) - kernel_codes.bitwise_and(0x7f)).abs();
    EXPECT_LE(level_gap.max().item<int>(), 1);
    EXPECT_LE(level_gap.gt(0).sum().item<int64_t>(), n / 100) << "more than 1% of the codes a level apart";
    const torch::Tensor decoded = q8_decode_range(t_codes, t_lo, t_hi, 0, n, sign);
    const torch::Tensor expected = torch::tensor(y);
    EXPECT_TRUE(torch::allclose(decoded.masked_select(level_gap == 0), expected.masked_select(level_gap == 0), 1e-5, 0));
  }
}

// A parameter whose gradient stops while its block's neighbours go on with gradients 2^14 times
// larger: its moments decay, and its steps shrink with them to nothing, as fp32 AdamW's do
// (0.92^k). Rounded up to the floor, a decaying m would stay there and the parameter would step
// for ever; m over a zeroed v would step by m / eps.
TEST(Q8Moments, AStaleParameterStopsAsItsMomentsDecay) {
  const int64_t n = kQ8Block;
  std::vector<float> param(n, 0.f), grad(n, 0.f);
  std::vector<uint8_t> m_codes(n, 0), v_codes(n, 0);
  float m_lo = 0, m_hi = 0, v_lo = 0, v_hi = 0;
  const kernels::Q8Moment m{m_codes.data(), &m_lo, &m_hi}, v{v_codes.data(), &v_lo, &v_hi};
  kernels::AdamWStep s;
  s.lr = 1e-3f;
  double largest_stale_step = 0, last_step = 0;
  for (int step = 1; step <= 600; ++step) {
    s.step = step;
    for (int64_t i = 1; i < n; ++i) grad[i] = (step + i) % 2 ? 1.f : -1.f;
    grad[0] = step <= 10 ? std::exp2(-14.f) : 0.f;
    const float before = param[0];
    kernels::adamw_q8_cpu(param.data(), grad.data(), m, v, n, 0, s);
    last_step = std::fabs(param[0] - before);
    if (step > 10) largest_stale_step = std::max(largest_stale_step, last_step);
  }
  EXPECT_LT(largest_stale_step, 1.0 * s.lr);
  EXPECT_EQ(last_step, 0.0) << "the parameter still steps " << last_step / s.lr << " learning rates";
  EXPECT_EQ(m_codes[0], 0);
}

// A net of a few thousand parameters (several blocks, a partial last one), built from a seed.
struct WideNet : torch::nn::Module {
  WideNet() {
    torch::manual_seed(5);
    a = register_module("a", torch::nn::Linear(61, 47));
    b = register_module("b", torch::nn::Linear(47, 9));
  }
  torch::Tensor forward(const torch::Tensor& x) { return b(torch::tanh(a(x))); }
  torch::nn::Linear a{nullptr}, b{nullptr};
};

bool is_bias(const std::string& name) { return name.ends_with("bias"); }

void backward_once(WideNet& net, int step) {
  torch::manual_seed(200 + step);
  net.forward(torch::randn({8, 61})).pow(2).sum().backward();
}

struct Training {
  WideNet net;
  FlatParameters flat{net, is_bias};
  Optimizer opt;
  Training(MomentStorage moments, OptimizerBackend backend)
      : opt(flat, OptimizerHyper{OptimizerKind::adamw, 0.9, 0.95, 1e-8, moments}, backend) {}
  void steps(int count) {
    for (int s = 0; s < count; ++s) {
      flat.zero_grad();
      backward_once(net, s);
      opt.step(3e-3, 0.1, 0.5);
    }
  }
};

// The paths' codes are a level apart where log2 rounds differently (see above), and a level is
// a few percent of a moment, so they agree to a small part (1% here) of how far the parameters moved.
TEST(Q8Moments, FusedAndTensorOpsAgree) {
  Training fused(MomentStorage::int8, OptimizerBackend::fused_cpu), ops(MomentStorage::int8, OptimizerBackend::tensor_ops);
  const torch::Tensor start = fused.flat.params().clone();
  fused.steps(8);
  ops.steps(8);
  const double moved = (fused.flat.params() - start).norm().item<double>();
  const double apart = (fused.flat.params() - ops.flat.params()).norm().item<double>();
  EXPECT_GT(moved, 0.01);
  EXPECT_LT(apart, 0.02 * moved) << "moved " << moved << ", apart " << apart;
}

// Each step of 8-bit AdamW moves the parameters as fp32 AdamW does, to within a few percent of
// the step's own size: over 30 steps the parameters' distance from fp32 AdamW's is a small part
// of how far either moved.
TEST(Q8Moments, TrackFp32AdamW) {
  Training q8(MomentStorage::int8, OptimizerBackend::fused_cpu), fp32(MomentStorage::fp32, OptimizerBackend::fused_cpu);
  const torch::Tensor start = fp32.flat.params().clone();
  q8.steps(30);
  fp32.steps(30);
  const double moved = (fp32.flat.params() - start).norm().item<double>();
  const double apart = (q8.flat.params() - fp32.flat.params()).norm().item<double>();
  EXPECT_GT(moved, 0.01);
  EXPECT_LT(apart, 0.05 * moved) << "moved " << moved << ", apart " << apart;
}

TEST(Q8Moments, MomentsGoOutAndComeBackAndTakeAQuarterOfTheBytes) {
  Training q8(MomentStorage::int8, OptimizerBackend::fused_cpu);
  Training fp32(MomentStorage::fp32, OptimizerBackend::fused_cpu);
  fp32.steps(5);
  q8.opt.load_moments(fp32.opt.exp_avg(), fp32.opt.exp_avg_sq());
  const Optimizer::Moments back = q8.opt.moments();
  const torch::Tensor m = fp32.opt.exp_avg(), v = fp32.opt.exp_avg_sq();
  EXPECT_LT(((back.exp_avg - m).abs() / m.abs().clamp_min(1e-30)).masked_select(m.abs() > m.abs().max() * 1e-6).max().item<double>(), 0.1);
  EXPECT_LT(((back.exp_avg_sq - v).abs() / v.clamp_min(1e-30)).masked_select(v > v.max() * 1e-6).max().item<double>(), 0.05);
  const int64_t n = q8.flat.numel(), blocks = (n + kQ8Block - 1) / kQ8Block;
  EXPECT_EQ(q8.opt.moment_bytes(), 2 * n + 16 * blocks);
  EXPECT_EQ(fp32.opt.moment_bytes(), 8 * n);
  EXPECT_THROW(q8.opt.exp_avg(), std::exception);
}

// Checkpoints keep int8 moments as their codes: loaded back into int8 storage they are the same
// bytes (a resumed run goes on bit for bit), into fp32 storage they are decoded, and fp32
// moments load into int8 storage encoded. A hostile file is named with what is wrong.
TEST(Q8Moments, CheckpointFormsLoadIntoEitherStorage) {
  Training q8(MomentStorage::int8, OptimizerBackend::fused_cpu), fp32(MomentStorage::fp32, OptimizerBackend::fused_cpu);
  q8.steps(5);
  fp32.steps(5);
  std::map<std::string, torch::Tensor> saved;
  for (const auto& [name, tensor] : q8.opt.moment_tensors()) saved[name] = tensor;
  ASSERT_EQ(saved.size(), 6u);
  EXPECT_EQ(saved.at("exp_avg.q8_codes").scalar_type(), torch::kUInt8);

  Training q8_back(MomentStorage::int8, OptimizerBackend::fused_cpu);
  q8_back.opt.load_moment_tensors(saved, "ckpt");
  for (const auto& [name, tensor] : q8_back.opt.moment_tensors()) EXPECT_TRUE(torch::equal(tensor, saved.at(name))) << name;

  Training fp32_back(MomentStorage::fp32, OptimizerBackend::fused_cpu);
  fp32_back.opt.load_moment_tensors(saved, "ckpt");
  EXPECT_TRUE(torch::equal(fp32_back.opt.exp_avg(), q8.opt.moments().exp_avg));
  EXPECT_TRUE(torch::equal(fp32_back.opt.exp_avg_sq(), q8.opt.moments().exp_avg_sq));

  std::map<std::string, torch::Tensor> from_fp32;
  for (const auto& [name, tensor] : fp32.opt.moment_tensors()) from_fp32[name] = tensor;
  Training encoded(MomentStorage::int8, OptimizerBackend::fused_cpu);
  encoded.opt.load_moment_tensors(from_fp32, "ckpt");
  const torch::Tensor m = fp32.opt.exp_avg();
  const torch::Tensor big = m.abs() > m.abs().max() * 1e-6;
  EXPECT_LT(((encoded.opt.moments().exp_avg - m).abs() / m.abs().clamp_min(1e-30)).masked_select(big).max().item<double>(), 0.1);

  auto error_of = [&](std::map<std::string, torch::Tensor> tensors) {
    try {
      Training t(MomentStorage::int8, OptimizerBackend::fused_cpu);
      t.opt.load_moment_tensors(tensors, "run/ckpt/optimizer.safetensors");
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  auto broken = saved;
  broken.erase("exp_avg_sq.q8_hi");
  EXPECT_NE(error_of(broken).find("run/ckpt/optimizer.safetensors: missing tensor 'exp_avg_sq.q8_hi'"), std::string::npos);
  broken = saved;
  broken["exp_avg.q8_codes"] = saved.at("exp_avg.q8_codes").narrow(0, 0, 100).clone();
  EXPECT_NE(error_of(broken).find("'exp_avg.q8_codes' is"), std::string::npos) << error_of(broken);
  broken = saved;
  broken["exp_avg.q8_lo"] = saved.at("exp_avg.q8_lo").clone();
  broken["exp_avg.q8_lo"][0] = NAN;
  EXPECT_NE(error_of(broken).find("non-finite"), std::string::npos) << error_of(broken);
  broken = saved;
  broken["exp_avg.q8_lo"] = saved.at("exp_avg.q8_hi") + 1;
  EXPECT_NE(error_of(broken).find("ends below its start"), std::string::npos) << error_of(broken);
}

}  // namespace
}  // namespace gradbox::worker

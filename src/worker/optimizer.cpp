#include "worker/optimizer.h"

#include <ATen/Parallel.h>

#include <cmath>

#include "common/error.h"
#include "kernels/adamw.h"
#include "kernels/adamw_q8.h"
#include "kernels/adamw_q8_math.h"
#include "kernels/lamb.h"
#if GRADBOX_CUDA_KERNELS
#include <c10/cuda/CUDAStream.h>

#include "kernels/adamw_q8_cuda.h"
#endif
#include "kernels/sgd.h"

namespace gradbox::worker {
namespace {

// Elements per task: large enough that scheduling is noise, small enough to split 1M params.
constexpr int64_t kGrain = 1 << 15;

// Note [8-bit moments] with tensor ops (CUDA where its kernel was not built, and the fused
// kernels' reference in tests): a chunk at a time, so that the fp32 temporaries stay small
// beside the codes.
constexpr int64_t kQ8Block = kernels::kQ8Block;
constexpr int64_t kQ8Chunk = int64_t{1} << 22;  // a multiple of kQ8Block

int64_t blocks_of(int64_t n) { return (n + kQ8Block - 1) / kQ8Block; }


// values [len] -> (blocks, kQ8Block), the last block padded with zeros (they encode as 0).
torch::Tensor as_blocks(const torch::Tensor& values) {
  const int64_t len = values.numel(), padded = blocks_of(len) * kQ8Block;
  torch::Tensor x = padded == len ? values : torch::constant_pad_nd(values, {0, padded - len}, 0);
  return x.view({-1, kQ8Block});
}

}  // namespace

torch::Tensor q8_decode_range(const torch::Tensor& codes, const torch::Tensor& lo, const torch::Tensor& hi,
                              int64_t begin, int64_t len, kernels::Q8Sign sign) {
  const int64_t first = begin / kQ8Block, nb = blocks_of(len);
  const torch::Tensor c = as_blocks(codes.narrow(0, begin, len).to(torch::kInt32));
  const torch::Tensor level = sign == kernels::Q8Sign::signed_values ? c.bitwise_and(0x7f) : c;
  const torch::Tensor l = lo.narrow(0, first, nb).unsqueeze(1), h = hi.narrow(0, first, nb).unsqueeze(1);
  const torch::Tensor step = (h - l) / static_cast<double>(kernels::q8::levels(sign) - 1);
  torch::Tensor a = torch::where(level > 0, torch::exp2(l + (level - 1).to(torch::kFloat32) * step),
                                 torch::zeros({}, l.options()));
  if (sign == kernels::Q8Sign::signed_values) a = torch::where(c.bitwise_and(0x80) > 0, -a, a);
  return a.flatten().narrow(0, 0, len);
}

void q8_encode_range(const torch::Tensor& values, torch::Tensor& codes, torch::Tensor& lo, torch::Tensor& hi,
                     int64_t begin, kernels::Q8Sign sign) {
  const int64_t len = values.numel(), first = begin / kQ8Block, nb = blocks_of(len);
  const int top = kernels::q8::levels(sign);
  const torch::Tensor x = as_blocks(values);
  const torch::Tensor a = x.abs();
  const torch::Tensor nz = (a > 0).logical_and(torch::isfinite(a));
  const torch::Tensor zero = torch::zeros({}, a.options());
  const torch::Tensor largest = torch::where(nz, a, zero).amax(1);
  const torch::Tensor smallest = torch::where(nz, a, torch::full({}, INFINITY, a.options())).amin(1);
  const torch::Tensor empty = largest == 0;
  const torch::Tensor h = torch::where(empty, zero, torch::log2(largest));
  const torch::Tensor l = torch::where(empty, zero, torch::maximum(torch::log2(smallest), h - kernels::q8_octaves(sign)));
  const torch::Tensor per_octave = torch::where(h > l, static_cast<double>(top - 1) / (h - l), zero).unsqueeze(1);
  const torch::Tensor floor_value = torch::exp2(l - kernels::kQ8FloorSlack).unsqueeze(1);
  torch::Tensor level = (1 + torch::round((torch::log2(a) - l.unsqueeze(1)) * per_octave)).clamp(1, top);
  level = torch::where(nz.logical_and(a >= floor_value), level, zero).to(torch::kInt32);
  if (sign == kernels::Q8Sign::signed_values) level = level + torch::where((x < 0).logical_and(level > 0), 128, 0);
  codes.narrow(0, begin, len).copy_(level.flatten().narrow(0, 0, len).to(torch::kUInt8));
  lo.narrow(0, first, nb).copy_(l);
  hi.narrow(0, first, nb).copy_(h);
}

Optimizer::Optimizer(FlatParameters& flat, OptimizerHyper hyper, OptimizerBackend backend)
    : flat_(flat), hyper_(hyper) {
  const bool on_cpu = flat_.params().is_cpu();
  GB_CHECK(on_cpu || backend != OptimizerBackend::fused_cpu, "the fused CPU optimizer needs CPU parameters");
  fused_ = backend == OptimizerBackend::fused_cpu || (backend == OptimizerBackend::automatic && on_cpu);
#if GRADBOX_CUDA_KERNELS
  cuda_kernel_ = backend == OptimizerBackend::automatic && flat_.params().is_cuda() &&
                 hyper_.kind == OptimizerKind::adamw && hyper_.moments == MomentStorage::int8 &&
                 kernels::adamw_q8_cuda_runs_on(flat_.params().device().index());
#endif
  if (hyper_.moments == MomentStorage::int8) {
    GB_CHECK(hyper_.kind == OptimizerKind::adamw, "int8 moments are AdamW's only");
    const auto options = flat_.params().options();
    for (Q8State* q : {&m_q8_, &v_q8_}) {
      q->codes = torch::zeros({flat_.numel()}, options.dtype(torch::kUInt8));
      q->lo = torch::zeros({blocks_of(flat_.numel())}, options);
      q->hi = torch::zeros({blocks_of(flat_.numel())}, options);
    }
  } else {
    exp_avg_ = torch::zeros_like(flat_.params());
    exp_avg_sq_ = torch::zeros_like(flat_.params());
  }
  if (hyper_.kind == OptimizerKind::lamb && fused_) lamb_update_ = torch::empty_like(flat_.params());
}

void Optimizer::step(double lr, double weight_decay, double grad_scale) {
  torch::NoGradGuard no_grad;
  ++step_;
  if (hyper_.kind == OptimizerKind::sgd) {
    sgd(lr, weight_decay, grad_scale);
  } else if (hyper_.kind == OptimizerKind::lamb) {
    fused_ ? lamb_cpu(lr, weight_decay, grad_scale) : lamb_tensor_ops(lr, weight_decay, grad_scale);
  } else if (hyper_.moments == MomentStorage::int8) {
    const auto f = [](double x) { return static_cast<float>(x); };
    if (fused_) adamw_q8_cpu(f(lr), f(weight_decay), f(grad_scale));
    else if (cuda_kernel_) adamw_q8_cuda(f(lr), f(weight_decay), f(grad_scale));
    else adamw_q8_tensor_ops(lr, weight_decay, grad_scale);
  } else if (fused_) {
    adamw_cpu(static_cast<float>(lr), static_cast<float>(weight_decay), static_cast<float>(grad_scale));
  } else {
    adamw_tensor_ops(lr, weight_decay, grad_scale);
  }
}

Optimizer::Moments Optimizer::moments() const {
  if (hyper_.moments == MomentStorage::fp32) return {exp_avg_, exp_avg_sq_};
  const int64_t n = flat_.numel();
  Moments out{torch::empty({n}, torch::kFloat32), torch::empty({n}, torch::kFloat32)};
  for (int64_t begin = 0; begin < n; begin += kQ8Chunk) {
    const int64_t len = std::min(kQ8Chunk, n - begin);
    out.exp_avg.narrow(0, begin, len)
        .copy_(q8_decode_range(m_q8_.codes, m_q8_.lo, m_q8_.hi, begin, len, kernels::Q8Sign::signed_values));
    out.exp_avg_sq.narrow(0, begin, len)
        .copy_(q8_decode_range(v_q8_.codes, v_q8_.lo, v_q8_.hi, begin, len, kernels::Q8Sign::non_negative));
  }
  return out;
}

void Optimizer::load_moments(const torch::Tensor& exp_avg, const torch::Tensor& exp_avg_sq) {
  torch::NoGradGuard no_grad;
  if (hyper_.moments == MomentStorage::fp32) {
    exp_avg_.copy_(exp_avg);
    exp_avg_sq_.copy_(exp_avg_sq);
    return;
  }
  const int64_t n = flat_.numel();
  const torch::Device device = flat_.params().device();
  for (int64_t begin = 0; begin < n; begin += kQ8Chunk) {
    const int64_t len = std::min(kQ8Chunk, n - begin);
    q8_encode_range(exp_avg.narrow(0, begin, len).to(device), m_q8_.codes, m_q8_.lo, m_q8_.hi, begin,
                    kernels::Q8Sign::signed_values);
    q8_encode_range(exp_avg_sq.narrow(0, begin, len).to(device), v_q8_.codes, v_q8_.lo, v_q8_.hi, begin,
                    kernels::Q8Sign::non_negative);
  }
}

namespace {

// A moment's names in a checkpoint: fp32 as `name`, int8 as name.q8_codes/.q8_lo/.q8_hi.
std::string q8_key(const char* moment, const char* part) { return str(moment, ".q8_", part); }

}  // namespace

Optimizer::NamedTensors Optimizer::moment_tensors() const {
  if (hyper_.moments == MomentStorage::fp32) return {{"exp_avg", exp_avg_.cpu()}, {"exp_avg_sq", exp_avg_sq_.cpu()}};
  NamedTensors out;
  for (const auto& [name, q] : {std::pair{"exp_avg", &m_q8_}, std::pair{"exp_avg_sq", &v_q8_}}) {
    out.emplace_back(q8_key(name, "codes"), q->codes.cpu());
    out.emplace_back(q8_key(name, "lo"), q->lo.cpu());
    out.emplace_back(q8_key(name, "hi"), q->hi.cpu());
  }
  return out;
}

void Optimizer::load_moment_tensors(const std::map<std::string, torch::Tensor>& tensors, const std::string& where) {
  torch::NoGradGuard no_grad;
  const int64_t n = flat_.numel(), blocks = blocks_of(n);
  auto get = [&](const std::string& key, torch::ScalarType dtype, int64_t numel) {
    const auto it = tensors.find(key);
    GB_REQUIRE(it != tensors.end(), where, ": missing tensor '", key, "'");
    GB_REQUIRE(it->second.scalar_type() == dtype && it->second.numel() == numel, where, ": tensor '", key, "' is ",
               it->second.scalar_type(), " x ", it->second.numel(), ", this model's optimizer expects ", dtype, " x ",
               numel);
    if (dtype == torch::kFloat32)
      GB_REQUIRE(torch::isfinite(it->second).all().item<bool>(), where, ": tensor '", key, "' holds non-finite values");
    return it->second.reshape({-1});
  };
  if (tensors.count("exp_avg")) {
    load_moments(get("exp_avg", torch::kFloat32, n), get("exp_avg_sq", torch::kFloat32, n));
    return;
  }
  Q8State loaded[2];
  const char* names[2] = {"exp_avg", "exp_avg_sq"};
  for (int i = 0; i < 2; ++i) {
    loaded[i].codes = get(q8_key(names[i], "codes"), torch::kUInt8, n);
    loaded[i].lo = get(q8_key(names[i], "lo"), torch::kFloat32, blocks);
    loaded[i].hi = get(q8_key(names[i], "hi"), torch::kFloat32, blocks);
    GB_REQUIRE(loaded[i].lo.le(loaded[i].hi).all().item<bool>(), where, ": tensor '", q8_key(names[i], "lo"),
               "' has a block whose range ends below its start");
  }
  if (hyper_.moments == MomentStorage::int8) {
    for (int i = 0; i < 2; ++i) {
      Q8State& q = i == 0 ? m_q8_ : v_q8_;
      q.codes.copy_(loaded[i].codes);
      q.lo.copy_(loaded[i].lo);
      q.hi.copy_(loaded[i].hi);
    }
    return;
  }
  for (int64_t begin = 0; begin < n; begin += kQ8Chunk) {
    const int64_t len = std::min(kQ8Chunk, n - begin);
    exp_avg_.narrow(0, begin, len)
        .copy_(q8_decode_range(loaded[0].codes, loaded[0].lo, loaded[0].hi, begin, len, kernels::Q8Sign::signed_values));
    exp_avg_sq_.narrow(0, begin, len)
        .copy_(q8_decode_range(loaded[1].codes, loaded[1].lo, loaded[1].hi, begin, len, kernels::Q8Sign::non_negative));
  }
}

torch::Tensor& Optimizer::exp_avg() {
  GB_CHECK(hyper_.moments == MomentStorage::fp32, "exp_avg(): the moments are stored in int8; use moments()");
  return exp_avg_;
}

torch::Tensor& Optimizer::exp_avg_sq() {
  GB_CHECK(hyper_.moments == MomentStorage::fp32, "exp_avg_sq(): the moments are stored in int8; use moments()");
  return exp_avg_sq_;
}

int64_t Optimizer::moment_bytes() const {
  if (hyper_.kind == OptimizerKind::sgd) return 0;
  if (hyper_.moments == MomentStorage::fp32) return 8 * flat_.numel();
  return kernels::q8_moment_bytes(flat_.numel());
}

kernels::AdamWStep Optimizer::adamw_step(float lr, float weight_decay, float grad_scale) const {
  kernels::AdamWStep s;
  s.lr = lr;
  s.beta1 = static_cast<float>(hyper_.beta1);
  s.beta2 = static_cast<float>(hyper_.beta2);
  s.eps = static_cast<float>(hyper_.eps);
  s.grad_scale = grad_scale;
  s.weight_decay = weight_decay;
  s.step = step_;
  return s;
}

void Optimizer::adamw_q8_cpu(float lr, float weight_decay, float grad_scale) {
  float* param = flat_.params().data_ptr<float>();
  const float* grad = flat_.grads().data_ptr<float>();
  const kernels::AdamWStep s = adamw_step(lr, weight_decay, grad_scale);
  const int64_t n = flat_.numel(), decay_end = flat_.decay_numel();
  auto moment = [](Q8State& q, int64_t begin) {
    return kernels::Q8Moment{q.codes.data_ptr<uint8_t>() + begin, q.lo.data_ptr<float>() + begin / kQ8Block,
                             q.hi.data_ptr<float>() + begin / kQ8Block};
  };
  // Tasks are whole blocks: each block's range is rewritten as one.
  at::parallel_for(0, blocks_of(n), kGrain / kQ8Block, [&](int64_t first, int64_t last) {
    const int64_t begin = first * kQ8Block, end = std::min(n, last * kQ8Block);
    kernels::adamw_q8_cpu(param + begin, grad + begin, moment(m_q8_, begin), moment(v_q8_, begin), end - begin,
                          decay_end - begin, s);
  });
}

void Optimizer::adamw_q8_cuda(float lr, float weight_decay, float grad_scale) {
#if GRADBOX_CUDA_KERNELS
  const kernels::AdamWStep s = adamw_step(lr, weight_decay, grad_scale);
  auto moment = [](Q8State& q) {
    return kernels::Q8Moment{q.codes.data_ptr<uint8_t>(), q.lo.data_ptr<float>(), q.hi.data_ptr<float>()};
  };
  kernels::adamw_q8_cuda(flat_.params().data_ptr<float>(), flat_.grads().data_ptr<float>(), moment(m_q8_),
                         moment(v_q8_), flat_.numel(), flat_.decay_numel(), s, flat_.params().device().index(),
                         c10::cuda::getCurrentCUDAStream(flat_.params().device().index()).stream());
#else
  GB_CHECK(false, "adamw_q8_cuda: built without the CUDA kernels");
#endif
}

void Optimizer::adamw_q8_tensor_ops(double lr, double weight_decay, double grad_scale) {
  const double bias_correction1 = 1.0 - std::pow(hyper_.beta1, static_cast<double>(step_));
  const double bias_correction2 = 1.0 - std::pow(hyper_.beta2, static_cast<double>(step_));
  const int64_t n = flat_.numel(), decay_end = flat_.decay_numel();
  for (int64_t begin = 0; begin < n; begin += kQ8Chunk) {
    const int64_t len = std::min(kQ8Chunk, n - begin);
    torch::Tensor param = flat_.params().narrow(0, begin, len);
    torch::Tensor grad = flat_.grads().narrow(0, begin, len) * grad_scale;
    torch::Tensor m = q8_decode_range(m_q8_.codes, m_q8_.lo, m_q8_.hi, begin, len, kernels::Q8Sign::signed_values);
    torch::Tensor v = q8_decode_range(v_q8_.codes, v_q8_.lo, v_q8_.hi, begin, len, kernels::Q8Sign::non_negative);
    m.masked_fill_(v == 0, 0.0);  // a pair is only as old as its v (Note [8-bit moments])
    const int64_t decayed = std::clamp<int64_t>(decay_end - begin, 0, len);
    if (decayed > 0 && weight_decay != 0.0) param.narrow(0, 0, decayed).mul_(1.0 - lr * weight_decay);
    m.lerp_(grad, 1.0 - hyper_.beta1);
    v.mul_(hyper_.beta2).addcmul_(grad, grad, 1.0 - hyper_.beta2);
    torch::Tensor denom = (v.sqrt() / std::sqrt(bias_correction2)).add_(hyper_.eps);
    param.addcdiv_(m, denom, -lr / bias_correction1);
    q8_encode_range(m, m_q8_.codes, m_q8_.lo, m_q8_.hi, begin, kernels::Q8Sign::signed_values);
    q8_encode_range(v, v_q8_.codes, v_q8_.lo, v_q8_.hi, begin, kernels::Q8Sign::non_negative);
  }
}

void Optimizer::sgd(double lr, double weight_decay, double grad_scale) {
  if (!fused_) {
    torch::Tensor params = flat_.params();
    if (flat_.decay_numel() > 0 && weight_decay != 0.0)
      params.narrow(0, 0, flat_.decay_numel()).mul_(1.0 - lr * weight_decay);
    params.add_(flat_.grads(), -lr * grad_scale);
    return;
  }
  float* param = flat_.params().data_ptr<float>();
  const float* grad = flat_.grads().data_ptr<float>();
  const int64_t decay_end = flat_.decay_numel();
  const auto f = [](double x) { return static_cast<float>(x); };
  at::parallel_for(0, flat_.numel(), kGrain, [&](int64_t begin, int64_t end) {
    if (begin < decay_end) {
      const int64_t stop = std::min(end, decay_end);
      kernels::sgd_cpu(param + begin, grad + begin, stop - begin, f(lr), f(weight_decay), f(grad_scale));
      begin = stop;
    }
    if (begin < end) kernels::sgd_cpu(param + begin, grad + begin, end - begin, f(lr), 0.f, f(grad_scale));
  });
}

void Optimizer::adamw_cpu(float lr, float weight_decay, float grad_scale) {
  float* param = flat_.params().data_ptr<float>();
  const float* grad = flat_.grads().data_ptr<float>();
  float* m = exp_avg_.data_ptr<float>();
  float* v = exp_avg_sq_.data_ptr<float>();
  const kernels::AdamWStep s = adamw_step(lr, 0.f, grad_scale);  // the decay per task, below
  const int64_t decay_end = flat_.decay_numel();
  at::parallel_for(0, flat_.numel(), kGrain, [&](int64_t begin, int64_t end) {
    // A task may straddle the decay boundary: split it there.
    if (begin < decay_end) {
      kernels::AdamWStep decayed = s;
      decayed.weight_decay = weight_decay;
      const int64_t stop = std::min(end, decay_end);
      kernels::adamw_cpu(param + begin, grad + begin, m + begin, v + begin, stop - begin, decayed);
      begin = stop;
    }
    if (begin < end) kernels::adamw_cpu(param + begin, grad + begin, m + begin, v + begin, end - begin, s);
  });
}

void Optimizer::adamw_tensor_ops(double lr, double weight_decay, double grad_scale) {
  torch::Tensor params = flat_.params();
  torch::Tensor grad = flat_.grads() * grad_scale;
  const double bias_correction1 = 1.0 - std::pow(hyper_.beta1, static_cast<double>(step_));
  const double bias_correction2 = 1.0 - std::pow(hyper_.beta2, static_cast<double>(step_));
  if (flat_.decay_numel() > 0 && weight_decay != 0.0)
    params.narrow(0, 0, flat_.decay_numel()).mul_(1.0 - lr * weight_decay);
  exp_avg_.lerp_(grad, 1.0 - hyper_.beta1);
  exp_avg_sq_.mul_(hyper_.beta2).addcmul_(grad, grad, 1.0 - hyper_.beta2);
  torch::Tensor denom = (exp_avg_sq_.sqrt() / std::sqrt(bias_correction2)).add_(hyper_.eps);
  params.addcdiv_(exp_avg_, denom, -lr / bias_correction1);
}

void Optimizer::lamb_cpu(double lr, double weight_decay, double grad_scale) {
  kernels::LambMoments s;
  s.beta1 = static_cast<float>(hyper_.beta1);
  s.beta2 = static_cast<float>(hyper_.beta2);
  s.eps = static_cast<float>(hyper_.eps);
  s.grad_scale = static_cast<float>(grad_scale);
  s.step = step_;
  // Trust ratios are per tensor, so the work is split by segment, then by range within it.
  for (const ParameterSegment& seg : flat_.segments()) {
    float* param = flat_.params().data_ptr<float>() + seg.offset;
    const float* grad = flat_.grads().data_ptr<float>() + seg.offset;
    float* m = exp_avg_.data_ptr<float>() + seg.offset;
    float* v = exp_avg_sq_.data_ptr<float>() + seg.offset;
    float* update = lamb_update_.data_ptr<float>() + seg.offset;
    kernels::LambMoments seg_step = s;
    seg_step.weight_decay = seg.decay ? static_cast<float>(weight_decay) : 0.f;
    const kernels::SquaredNorms norms = at::parallel_reduce(
        0, seg.numel, kGrain, kernels::SquaredNorms{},
        [&](int64_t begin, int64_t end, kernels::SquaredNorms acc) {
          kernels::SquaredNorms part = kernels::lamb_moments_cpu(param + begin, grad + begin, m + begin, v + begin,
                                                                 update + begin, end - begin, seg_step);
          return kernels::SquaredNorms{acc.param + part.param, acc.update + part.update};
        },
        [](kernels::SquaredNorms a, kernels::SquaredNorms b) {
          return kernels::SquaredNorms{a.param + b.param, a.update + b.update};
        });
    const float scaled = static_cast<float>(lr) * kernels::lamb_trust_ratio(norms);
    at::parallel_for(0, seg.numel, kGrain, [&](int64_t begin, int64_t end) {
      kernels::lamb_apply_cpu(param + begin, update + begin, end - begin, scaled);
    });
  }
}

void Optimizer::lamb_tensor_ops(double lr, double weight_decay, double grad_scale) {
  const double bias_correction1 = 1.0 - std::pow(hyper_.beta1, static_cast<double>(step_));
  const double bias_correction2 = 1.0 - std::pow(hyper_.beta2, static_cast<double>(step_));
  for (const ParameterSegment& seg : flat_.segments()) {
    torch::Tensor param = flat_.params().narrow(0, seg.offset, seg.numel);
    torch::Tensor grad = flat_.grads().narrow(0, seg.offset, seg.numel) * grad_scale;
    torch::Tensor m = exp_avg_.narrow(0, seg.offset, seg.numel);
    torch::Tensor v = exp_avg_sq_.narrow(0, seg.offset, seg.numel);
    m.mul_(hyper_.beta1).add_(grad, 1.0 - hyper_.beta1);
    v.mul_(hyper_.beta2).addcmul_(grad, grad, 1.0 - hyper_.beta2);
    torch::Tensor update = (m / bias_correction1) / ((v / bias_correction2).sqrt() + hyper_.eps);
    if (seg.decay) update.add_(param, weight_decay);
    const double p_norm = param.norm().item<double>();
    const double u_norm = update.norm().item<double>();
    const double trust = (p_norm > 0 && u_norm > 0) ? p_norm / u_norm : 1.0;
    param.add_(update, -lr * trust);
  }
}

double gradient_norm(const FlatParameters& flat) {
  torch::NoGradGuard no_grad;
  return flat.grads().norm().item<double>();
}

}  // namespace gradbox::worker

#include "worker/eager_outer.h"

#include "common/error.h"
#include "kernels/sgd.h"

namespace gradbox::worker {
namespace {

void check_cpu_fp32(const torch::Tensor& t, int64_t numel, const char* what) {
  GB_CHECK(t.defined() && t.is_cpu() && t.scalar_type() == torch::kFloat32 && t.is_contiguous() && t.numel() == numel,
           "eager outer step: ", what, " must be ", numel, " contiguous fp32 values on the CPU");
}

}  // namespace

EagerOuter::EagerOuter(int64_t numel, size_t fragments)
    : others_(torch::zeros({numel}, torch::kFloat32)), others_tokens_(fragments, -1) {}

bool EagerOuter::estimate(size_t p, const Fragment& fragment, const torch::Tensor& own_delta, uint64_t own_tokens,
                          torch::Tensor& estimate) const {
  GB_CHECK(p < others_tokens_.size(), "eager outer step: fragment ", p, " of ", others_tokens_.size());
  if (others_tokens_[p] < 0 || others_tokens_[p] + static_cast<int64_t>(own_tokens) == 0) return false;
  check_cpu_fp32(own_delta, fragment.numel, "a Δ");
  if (!estimate.defined() || estimate.numel() != fragment.numel) estimate = torch::empty({fragment.numel}, torch::kFloat32);
  const double share = static_cast<double>(own_tokens) / static_cast<double>(others_tokens_[p] + static_cast<int64_t>(own_tokens));
  for_each_range(fragment, [&](int64_t begin, int64_t n, int64_t at) {
    kernels::scaled_add_cpu(others_.data_ptr<float>() + begin, own_delta.data_ptr<float>() + at,
                            static_cast<float>(share), estimate.data_ptr<float>() + at, n);
  });
  return true;
}

void EagerOuter::learn(size_t p, const Fragment& fragment, const torch::Tensor& average, const torch::Tensor& own_delta,
                       uint64_t own_tokens, uint64_t total_tokens) {
  GB_CHECK(p < others_tokens_.size(), "eager outer step: fragment ", p, " of ", others_tokens_.size());
  GB_CHECK(own_tokens <= total_tokens, "eager outer step: ", own_tokens, " own tokens of ", total_tokens);
  check_cpu_fp32(average, fragment.numel, "an average");
  if (own_tokens > 0) check_cpu_fp32(own_delta, fragment.numel, "a Δ");
  const double share = total_tokens > 0 ? static_cast<double>(own_tokens) / static_cast<double>(total_tokens) : 0.0;
  for_each_range(fragment, [&](int64_t begin, int64_t n, int64_t at) {
    float* others = others_.data_ptr<float>() + begin;
    if (own_tokens > 0) {
      kernels::scaled_add_cpu(average.data_ptr<float>() + at, own_delta.data_ptr<float>() + at,
                              -static_cast<float>(share), others, n);
    } else {
      std::copy_n(average.data_ptr<float>() + at, n, others);
    }
  });
  others_tokens_[p] = static_cast<int64_t>(total_tokens - own_tokens);
}

void EagerOuter::forget() {
  others_.zero_();
  std::fill(others_tokens_.begin(), others_tokens_.end(), -1);
}

}  // namespace gradbox::worker

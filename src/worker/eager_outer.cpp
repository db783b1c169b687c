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

EagerOuter::EagerOuter(int64_t numel, size_t fragments, OuterHyper hyper)
    : hyper_(hyper),
      offset_(torch::zeros({numel}, torch::kFloat32)),
      momentum_(torch::zeros({numel}, torch::kFloat32)),
      sent_share_(torch::zeros({numel}, torch::kFloat32)),
      shares_(fragments) {}

void EagerOuter::own_progress(const Fragment& fragment, torch::Tensor& delta) const {
  check_cpu_fp32(delta, fragment.numel, "a Δ");
  for_each_range(fragment, [&](int64_t begin, int64_t n, int64_t at) {
    kernels::scaled_add_cpu(delta.data_ptr<float>() + at, offset_.data_ptr<float>() + begin, 1.0f,
                            delta.data_ptr<float>() + at, n);
  });
}

bool EagerOuter::send(size_t p, const Fragment& fragment, const torch::Tensor& own_delta, uint64_t own_tokens,
                      const torch::Tensor& global, torch::Tensor& params) {
  const std::optional<float> share = shares_.share(p, own_tokens);
  if (!share) return false;
  check_cpu_fp32(own_delta, fragment.numel, "a Δ");
  torch::NoGradGuard no_grad;
  // On a GPU the step runs on host copies of θ_g and of the new parameters, range by range.
  const bool on_cpu = params.is_cpu() && global.is_cpu();
  for_each_range(fragment, [&](int64_t begin, int64_t n, int64_t at) {
    const torch::Tensor g = on_cpu ? global.narrow(0, begin, n) : global.narrow(0, begin, n).cpu().contiguous();
    torch::Tensor local = on_cpu ? params.narrow(0, begin, n) : torch::empty({n}, torch::kFloat32);
    kernels::eager_offset_step_cpu(offset_.data_ptr<float>() + begin, momentum_.data_ptr<float>() + begin,
                                   sent_share_.data_ptr<float>() + begin, own_delta.data_ptr<float>() + at, *share,
                                   g.data_ptr<float>(), local.data_ptr<float>(), n, static_cast<float>(hyper_.lr),
                                   static_cast<float>(hyper_.momentum), hyper_.nesterov);
    if (!on_cpu) params.narrow(0, begin, n).copy_(local);
  });
  return true;
}

void EagerOuter::agreed(size_t p, uint64_t own_tokens, uint64_t total_tokens) {
  shares_.agreed(p, own_tokens, total_tokens);
}

void EagerOuter::settle(const Fragment& fragment) {
  for_each_range(fragment, [&](int64_t begin, int64_t n, int64_t) {
    offset_.narrow(0, begin, n).zero_();
    momentum_.narrow(0, begin, n).zero_();
    sent_share_.narrow(0, begin, n).zero_();
  });
}

void EagerOuter::forget() {
  offset_.zero_();
  momentum_.zero_();
  sent_share_.zero_();
  shares_.forget();
}

}  // namespace gradbox::worker

#include <cmath>
#include <utility>

#include "codec/codec.h"
#include "common/error.h"

namespace gradbox::codec {

ErrorFeedbackEncoder::ErrorFeedbackEncoder(CodecOptions opt) : opt_(opt) {}

std::vector<uint8_t> ErrorFeedbackEncoder::encode(const float* grad, size_t n) {
  if (residual_.empty()) residual_.assign(n, 0.f);
  GB_REQUIRE(residual_.size() == n, "error feedback: the residual holds ", residual_.size(),
             " elements, the gradient ", n);
  // scratch = g + r; payload = encode(scratch); scratch -= decode(payload) is the new residual.
  scratch_.resize(n);
  {
    const float* __restrict__ g = grad;
    const float* __restrict__ r = residual_.data();
    float* __restrict__ s = scratch_.data();
    for (size_t i = 0; i < n; ++i) s[i] = g[i] + r[i];
  }
  std::vector<uint8_t> payload = codec::encode(scratch_.data(), n, opt_);
  decode_accumulate(payload.data(), payload.size(), opt_, -1.f, scratch_.data(), n);
  {
    float* __restrict__ s = scratch_.data();
    for (size_t i = 0; i < n; ++i) s[i] = std::isfinite(s[i]) ? s[i] : 0.f;
  }
  std::swap(residual_, scratch_);
  return payload;
}

const std::vector<float>& ErrorFeedbackEncoder::residual() const { return residual_; }

void ErrorFeedbackEncoder::set_residual(std::vector<float> residual) {
  residual_ = std::move(residual);
}

}  // namespace gradbox::codec

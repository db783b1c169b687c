#include <utility>

#include "codec/codec.h"
#include "common/error.h"

namespace gradbox::codec {

ErrorFeedbackEncoder::ErrorFeedbackEncoder(CodecOptions opt) : opt_(opt) {}

void ErrorFeedbackEncoder::encode_into(const float* grad, size_t n, std::string& out) {
  if (residual_.empty()) residual_.assign(n, 0.f);
  GB_REQUIRE(residual_.size() == n, "error feedback: the residual holds ", residual_.size(),
             " elements, the gradient ", n);
  encode_with_feedback(grad, residual_.data(), n, opt_, out);
}

std::vector<uint8_t> ErrorFeedbackEncoder::encode(const float* grad, size_t n) {
  std::string payload;
  encode_into(grad, n, payload);
  return {payload.begin(), payload.end()};
}

const std::vector<float>& ErrorFeedbackEncoder::residual() const { return residual_; }

void ErrorFeedbackEncoder::set_residual(std::vector<float> residual) {
  residual_ = std::move(residual);
}

}  // namespace gradbox::codec

#include "exchange/token_weighted_sum.h"

#include <algorithm>

#include "exchange/gradient_exchange.h"

namespace gradbox::exchange {

void TokenWeightedSum::add(std::string worker, uint64_t tokens, Accumulate accumulate) {
  parts_.push_back({std::move(worker), tokens, std::move(accumulate)});
  total_ += tokens;
}

void TokenWeightedSum::sum_into(float* out, size_t n) {
  std::fill(out, out + n, 0.0f);
  if (total_ == 0) return;
  std::stable_sort(parts_.begin(), parts_.end(), [](const Part& a, const Part& b) { return a.worker < b.worker; });
  for (const Part& part : parts_) part.accumulate(contribution_weight(part.tokens, total_), out, n);
}

TokenWeightedSum::Accumulate TokenWeightedSum::floats(const float* x) {
  return [x](float weight, float* sum, size_t n) { codec::accumulate(weight, x, n, sum); };
}

TokenWeightedSum::Accumulate TokenWeightedSum::encoded(const std::string& payload, const codec::CodecOptions& options) {
  return [&payload, options](float weight, float* sum, size_t n) {
    codec::decode_accumulate(reinterpret_cast<const uint8_t*>(payload.data()), payload.size(), options, weight, sum, n);
  };
}

}  // namespace gradbox::exchange

#pragma once
// The token-weighted average of a round's contributions, written once: every replica applying
// an all-gather commit, every sharded owner reducing its slice, and the emulated cluster
// (--emulate-workers) compute it with this code, so that they round alike and an fp32 cluster
// run reproduces the emulated one bit for bit. Contributions are summed in worker-name order,
// each with weight contribution_weight(tokens, total), as sum += weight * x in fp32
// (codec::accumulate). Torch- and protobuf-free.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "codec/codec.h"

namespace gradbox::exchange {

class TokenWeightedSum {
 public:
  // Adds weight * (the contribution) into sum[0, n); may throw (a payload that does not decode).
  using Accumulate = std::function<void(float weight, float* sum, size_t n)>;

  void add(std::string worker, uint64_t tokens, Accumulate accumulate);
  uint64_t total_tokens() const { return total_; }
  // out[0, n) = the weighted sum of what was added (zeros when nothing carries tokens).
  void sum_into(float* out, size_t n);

  // A contribution held as plain floats.
  static Accumulate floats(const float* x);
  // A contribution as the codec encoded it (decoded on the fly, a block at a time).
  static Accumulate encoded(const std::string& payload, const codec::CodecOptions& options);

 private:
  struct Part {
    std::string worker;
    uint64_t tokens;
    Accumulate accumulate;
  };
  std::vector<Part> parts_;
  uint64_t total_ = 0;
};

}  // namespace gradbox::exchange

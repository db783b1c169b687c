#pragma once
// What the training loop needs from its peers, and nothing more: "here is my gradient over
// T tokens; give me back the agreed, token-weighted average of this round". The folder
// exchange (files in a shared folder) implements it; so will the NCCL/Gloo fast path.
// No LibTorch and no protobuf here: the trainer includes this from torch translation units.
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>

namespace gradbox::exchange {

struct LocalContribution {
  uint64_t tokens = 0;    // tokens the gradient was computed on: its weight
  double loss = 0.0;      // mean loss over those tokens (reporting)
  bool overflow = false;  // non-finite gradient: every replica skips the round
};

struct RoundResult {
  bool skip = false;        // some agreed contributor overflowed: nobody applies this round
  uint64_t tokens = 0;      // tokens behind the average
  double loss = std::numeric_limits<double>::quiet_NaN();  // token-weighted mean of contributors' losses
  int contributors = 0;
  double wait_seconds = 0;  // time blocked on peers and the folder
};

class GradientExchange {
 public:
  virtual ~GradientExchange() = default;
  // grad[0, n) holds this worker's mean gradient over `mine.tokens` tokens; on return it holds
  // the average every live replica applies for `round` (identical bytes on every replica).
  virtual RoundResult all_reduce(uint64_t round, float* grad, size_t n, const LocalContribution& mine) = 0;
  // Called once the round's update is applied, with the new parameters (replica checks).
  virtual void after_update(uint64_t round, const float* params, size_t n) {}
  // A clean exit (end of run, Ctrl-C, SIGTERM): tell the peers this worker is gone.
  virtual void leave() {}
  virtual std::string describe() const = 0;
};

// The weight of one contribution in a token-weighted average. One function, so that every
// replica, the emulated cluster and the tests round it the same way.
inline float contribution_weight(uint64_t tokens, uint64_t total_tokens) {
  return static_cast<float>(static_cast<double>(tokens) / static_cast<double>(total_tokens));
}

}  // namespace gradbox::exchange

#pragma once
// Autoregressive sampling with temperature and top-k (nanoGPT's sample.py, without a KV cache).
#include <cstdint>
#include <vector>

#include "model/causal_lm.h"

namespace gradbox::worker {

struct SamplingOptions {
  int64_t max_new_tokens = 200;
  double temperature = 0.8;  // 0: greedy
  int64_t top_k = 200;       // 0: the whole vocabulary
  uint64_t seed = 1;
  int32_t stop_token = -1;   // stop early when sampled (e.g. end of text); -1: never
};

// Returns the prompt followed by the new tokens. The context is cropped to the model's block size.
std::vector<int32_t> generate(model::CausalLM& model, const std::vector<int32_t>& prompt, const SamplingOptions& options);

}  // namespace gradbox::worker

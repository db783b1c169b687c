#pragma once
// What a worker knows of the other workers' share of a DiLoCo round's average, for the eager
// rule of outer steps applied late.
//
// Note [Eager outer steps]
// With --overlap-steps τ a round's Δ goes out at the round's end and its outer step is applied τ
// inner steps later (Note [Streaming fragments] in worker/outer_optimizer.h); the headline's
// overlapped time boxes run τ up to H - 1. Meanwhile a worker trains on from its own local
// parameters, and the agreed step is merged under what it did (--late-outer-step delayed, the
// default). That costs loss: on the quality benchmark (gpt2-tiny, 4 workers, 20 tokens per
// parameter, H = 30) +14.0% against per-step with τ = 29, against +10.5% without overlap.
// --late-outer-step eager tries the eager-updates paper's idea (arXiv 2502.12996: +0.7% where a
// one-round delay cost +12.7%) while replicas keep agreeing on θ_g: at the round's end the worker
// estimates the average it cannot have yet, the last agreed average of the fragment with its own
// share taken out plus its fresh Δ at its share of the tokens,
//   Δ̂ = (Δ̄_prev - s_prev Δ_prev) + s_now Δ_now,
// s the worker's tokens over the round's (the paper's Δ^(t-H) + (Δ_m^(t) - Δ_m^(t-H))/M), moves
// its parameters to the θ_g that one outer step on Δ̂ would give (OuterOptimizer::preview), and
// when the agreed Δ̄ comes merges as before: θ_local = θ_g' + (θ_local - θ_preview). No replica
// applies the estimate to θ_g, so fingerprints, folder checkpoints and repair are unchanged.
// Measured, it is worse, not better: +44.4% at τ = 29 (round losses stuck near 6.5 while the
// delayed rule's fell to 5.2), and an estimate of the worker's own share alone (no stale others)
// did as badly at τ = 29 and at τ = 5 in 900-step runs. The paper's rule is not this one: it
// never corrects; each worker applies Δ̃ as its outer step, so the others' contribution enters one
// round late and exactly once, while here the τ steps computed at the previewed point are carried
// onto the agreed one. So the rule stays opt-in, for the exactness tests and the next try (the
// paper's bookkeeping as a per-worker offset from the agreed θ_g).
// A fragment's first round has no agreed average before it: its τ steps are plain delayed.
// The others' share is kept per element (flat, fp32, on the CPU: one more copy of the
// parameters in host memory) and saved with local checkpoints; a joiner or a replica that
// reloads the agreed state starts with nothing known.
#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "worker/fragments.h"

namespace gradbox::worker {

class EagerOuter {
 public:
  EagerOuter(int64_t numel, size_t fragments);

  // Fills `estimate` (fp32, CPU, concatenated like the fragment's Δ) with Δ̂ for fragment `p`
  // from this worker's fresh Δ over `own_tokens`; false before the fragment's first agreed round.
  bool estimate(size_t p, const Fragment& fragment, const torch::Tensor& own_delta, uint64_t own_tokens,
                torch::Tensor& estimate) const;
  // Fragment p's round was agreed: `average` over `total_tokens`, `own_tokens` of which were this
  // worker's Δ `own_delta` (0: it was not in the average).
  void learn(size_t p, const Fragment& fragment, const torch::Tensor& average, const torch::Tensor& own_delta,
             uint64_t own_tokens, uint64_t total_tokens);
  void forget();  // nothing known (a reload of the agreed state, a join)

  // For checkpoints: the others' share (flat), and per fragment the tokens behind it (-1: none known).
  torch::Tensor& others() { return others_; }
  std::vector<int64_t>& others_tokens() { return others_tokens_; }

 private:
  torch::Tensor others_;
  std::vector<int64_t> others_tokens_;
};

}  // namespace gradbox::worker

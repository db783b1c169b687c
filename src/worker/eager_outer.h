#pragma once
// The eager rule for outer steps applied late: a worker's own fresh Δ moves it at once, at its
// share of the average, while the agreed average is still in flight.
//
// Note [Eager outer steps]
// With --overlap-steps τ a round's Δ goes out at the round's end and its outer step is applied τ
// inner steps later (Note [Streaming fragments] in worker/outer_optimizer.h); the headline's
// overlapped time boxes run τ up to H - 1. With --late-outer-step delayed (the default) a worker
// trains on from its own parameters meanwhile, and the agreed step is merged under what it did.
// --late-outer-step eager is the eager-updates paper's rule (arXiv 2502.12996: +0.7% where a
// one-round delay cost +12.7%). There each worker m applies, at the end of round t, the outer
// step on
//   Δ̃_m = Δ̄^(t-1) + d_m^(t) - d_m^(t-1),   d_m = s_m Δ_m   (s_m its share of the tokens)
// with its own outer momentum, and starts round t+1 from there: its own progress counts at once
// at its share, the others' one round late, and each Δ enters exactly once. Every worker's
// parameters then differ from the others'. Here replicas still agree on θ_g and m (fingerprints,
// folder checkpoints and repair cover those): the outer step is linear in its inputs, so the
// paper's worker is θ_g plus an offset o that a second outer step (same lr and momentum, its
// own momentum e) takes on u = d^(t) - d^(t-1) alone. Per fragment, at its round's send:
//   Δ_m = θ_g + o - θ_local             (the worker's progress since its own start)
//   u = s Δ_m - d_prev;  d_prev = s Δ_m
//   e = μ e + u;  o -= lr (u + μ e)     (Nesterov; lr e without)
//   θ_local = θ_g + o                   (the round's progress now counts through d)
// and at the merge θ_local = θ_g' + (θ_local - θ_g): the agreed step moves the worker by exactly
// itself. So Σ u telescopes to the last d: the offset is only this worker's freshest Δ applied
// early, and nothing drifts when s was a wrong guess (s = own tokens over own plus the others'
// in the fragment's last agreed round; the first round of a fragment, with nothing agreed yet,
// runs the delayed rule). A round applied at once (the run's last) leaves θ_local = θ_g: the
// fragment's offset is settled to zero. A reload of the agreed state or a join forgets it all.
// The offset, its momentum and d_prev are three flat fp32 copies of the parameters in host
// memory, saved with local checkpoints.
// Measured (scripts/bench/quality_bench.sh, kjv, gpt2-tiny, 4 workers, H = 30, τ = 29, 900
// steps): it does not pay here. Eager 6.315 at outer momentum 0.9 (round losses oscillating),
// 5.348 at outer lr 0.3, 5.251 at momentum 0.6; the delayed rule 5.211 and 5.108; no overlap
// 5.118 and 5.042. The paper's baseline is not this delayed rule: its naive delay restarts each
// round from θ_g and so loses the worker's own progress for a round, which the eager rule gives
// back at 1/M; the delayed rule here keeps it whole (Note [Streaming fragments]). So the rule
// stays opt-in; what overlap costs is cut by overlapping fewer steps (a few steps hide a round's
// exchange through Drive, `gradbox simulate`).
#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "exchange/round_policy.h"
#include "worker/fragments.h"
#include "worker/outer_optimizer.h"

namespace gradbox::worker {

class EagerOuter {
 public:
  EagerOuter(int64_t numel, size_t fragments, OuterHyper hyper);

  // delta (θ_g - θ_local over the fragment, CPU fp32) += o: the worker's progress since its start.
  void own_progress(const Fragment& fragment, torch::Tensor& delta) const;
  // Fragment p's Δ goes out with `own_tokens` tokens: the offset steps on u and params over the
  // fragment become global + o. False (nothing changed) while the fragment's share is unknown.
  bool send(size_t p, const Fragment& fragment, const torch::Tensor& own_delta, uint64_t own_tokens,
            const torch::Tensor& global, torch::Tensor& params);
  // Fragment p's round was agreed over `total_tokens`, `own_tokens` of them this worker's.
  void agreed(size_t p, uint64_t own_tokens, uint64_t total_tokens);
  // The fragment's parameters were set to θ_g (a round applied at once): no offset there.
  void settle(const Fragment& fragment);
  void forget();  // nothing known (a reload of the agreed state, a join)

  // For checkpoints: o, e and d_prev (flat), and per fragment the others' tokens (-1: unknown).
  torch::Tensor& offset() { return offset_; }
  torch::Tensor& momentum() { return momentum_; }
  torch::Tensor& sent_share() { return sent_share_; }
  std::vector<int64_t>& others_tokens() { return shares_.others_tokens(); }

 private:
  OuterHyper hyper_;
  torch::Tensor offset_, momentum_, sent_share_;
  exchange::EagerShares shares_;  // the share rule, shared with the simulator
};

}  // namespace gradbox::worker

#pragma once
// The outer optimizer of DiLoCo rounds: the global parameters every replica agrees on, and
// the momentum of the outer SGD step applied to them.
//
// Note [DiLoCo rounds]
// With --sync diloco a round is --inner-steps (H) local steps, not one. Each worker starts the
// round from the global parameters θ_g, takes H steps with its own inner optimizer (AdamW,
// LAMB or SGD, its own moments) on its own data stream, and hands the exchange its
// pseudo-gradient Δ = θ_g - θ_local with the tokens of those H steps as its weight. The
// exchange agrees the token-weighted average Δ̄ exactly as it agrees a per-step gradient (same
// files, codecs, error feedback, membership and repair: GradientExchange is the one averaging
// interface), and every replica applies the same outer step to θ_g:
//   m = μ m + Δ̄;  θ_g -= η (Δ̄ + μ m)  (Nesterov; --outer-lr η = 0.7, --outer-momentum μ = 0.9)
// and continues from θ_local = θ_g. A round ends after step kH or at --max-steps. Rounds are
// counted apart from steps: the exchange's round k is the k-th outer round, and a checkpoint
// shared through the folder is keyed by the rounds it holds (with H = 1 both counts agree).
//
// The inner optimizer state is kept across an outer step, not reset and not averaged. Its
// moments describe the loss surface near θ_g, which moves by one averaged step; resetting
// them would restart bias correction and warm-up every round (DiLoCo's inner AdamW keeps its
// state too), and averaging them would double the bytes exchanged for no measured gain. The
// moments are therefore per worker: replicas agree on θ_g and m, not on inner state. A joiner
// starts from the publisher's inner moments, which are a better start than zeros.
//
// Replicas check the outer state, not just θ_g: fingerprints and the folder checkpoint's
// checksum cover θ_g followed by m (replica_state()). Local checkpoints may be taken inside a
// round (a stop): they hold θ_g, m, the inner state and the round's tokens so far, and the
// worker resumes the round where it was. Only checkpoints at a round's end go to the folder.
//
// A round in which some contributor's Δ was non-finite, or that nobody contributed to, is
// skipped by every replica: θ_local goes back to θ_g and the round's inner steps are lost (the
// per-step rule, one round wide; an outer step on an empty Δ would move θ_g by momentum alone).
//
// Deadlines do not scale with H. An owner's wait for a missing Δ runs from its own
// contribution, so it covers the spread of the workers' finish times plus the folder's lag,
// and adapts to what it observes (--deadline-floor .. --contribution-timeout): the ceiling is
// the slack one slow worker may cost the others per round. Members stay live between rounds
// (GradientExchange::between_rounds publishes heartbeats during the inner steps), and a
// follower waiting out a long round gives up only once nobody has been live for
// --give-up-timeout.
//
// Note [Time-boxed rounds]
// With --round-seconds S a worker computes as much of a round as fits in S seconds, so that a
// slow worker does not set the pace: each worker's box opens at its first unit of the round and
// it takes another unit while one more, as long as the mean so far, still ends inside the box
// (at least one unit). A DiLoCo unit is an inner step, up to H of them; a per-step unit is a
// micro-batch, up to --grad-accum of them (hivemind's target batch, per worker). Every worker
// then publishes about S after the round began, and the others wait on a slow one only for the
// spread of their finish times (about one of its units) plus the folder's lag.
// - The average is still token-weighted, which is now what makes it right: a worker with n
//   steps hands in a Δ of n steps' progress weighted by n steps' tokens, so Δ̄ is the mean
//   progress per token, and a slow worker's short Δ counts for what it computed, no more.
//   A per-step gradient is the mean over the micro-batches taken, weighted by their tokens.
// - The schedule counts nominal steps: a DiLoCo round is H steps long whatever a worker took
//   in it, its inner step k runs at the learning rate of the round's step k, and a round that
//   closes early skips the rest of its nominal steps. --max-steps, checkpoints and live control
//   keep their meaning (in rounds), and replicas agree on the step after every round. The slow
//   worker takes the schedule's first steps of each round only; its steps are few and small.
// - Tokens per round vary with speed, so the effective batch, and with it the right learning
//   rate, changes when workers join or leave; the box does not retune the learning rate.
// A box restarts on resume and at a late admission: such a worker's Δ comes up to S late.
//
// Note [Streaming fragments]
// --fragments F cuts the parameters into F fragments (worker/fragments.h: strided groups of
// layers, evened out by the embeddings and head, cut where need be) and gives each its own
// DiLoCo round, in turn, every H/F steps: fragment p's Δ covers the H inner steps since its
// own last round (the first ones fewer), weighted by their tokens.
// One exchange then carries ~1/F of the parameters, so the peak upload per round and the
// folder's burst drop by F while the bytes per token stay those of H; the outer momentum is per
// element, so each fragment's outer step is DiLoCo's on its slice. A round is one fragment's:
// rounds count fragment rounds, lossy codecs keep error feedback per fragment
// (LocalContribution::part), and at --max-steps every fragment goes out once more, so the run
// ends on θ_g everywhere.
// --overlap-steps τ sends a fragment's Δ and keeps training: its exchange runs in the background
// while the next τ inner steps compute, and only then is its outer step applied. The late outer
// step is merged, not assigned: θ_local = θ_g + (θ_local − θ_sent), so the τ steps' local
// progress on the fragment stays and counts in its next Δ (Streaming DiLoCo mixes with a factor
// instead; this keeps every token's update exactly once). Replicas still agree on θ_g and m
// only, which is what fingerprints and folder checkpoints cover; a joiner starts from θ_g.
// Folder checkpoints are taken after a fragment's round, with the round in flight applied first.
#include <torch/torch.h>

#include "worker/fragments.h"

namespace gradbox::worker {

// The fragment's elements of a flat buffer, concatenated in its ranges' order, on the CPU.
torch::Tensor gather_fragment(const torch::Tensor& flat, const Fragment& fragment);

struct OuterHyper {
  double lr = 0.7;
  double momentum = 0.9;
  bool nesterov = true;
};

class OuterOptimizer {
 public:
  // θ_g starts as a copy of `params`; the momentum as zeros.
  OuterOptimizer(const torch::Tensor& params, OuterHyper hyper);

  // delta (fp32, on the CPU) = θ_g - params over the whole vector or over one fragment
  // (its ranges, concatenated).
  void pseudo_gradient(const torch::Tensor& params, torch::Tensor& delta) const;
  void pseudo_gradient(const torch::Tensor& params, const Fragment& fragment, torch::Tensor& delta) const;
  // The outer step from the agreed average (fp32, on the CPU); params become θ_g. Over a
  // fragment with `sent` (params as they were when its Δ went out, concatenated like delta),
  // the local steps taken since are kept: params = θ_g + (params - sent) (Note [Streaming fragments]).
  void step(const torch::Tensor& average_delta, torch::Tensor& params);
  void step(const torch::Tensor& average_delta, const Fragment& fragment, torch::Tensor& params,
            const torch::Tensor* sent = nullptr);
  // The round was skipped: params go back to θ_g (plus, over a fragment, the steps since `sent`).
  void discard_round(torch::Tensor& params) const;
  void discard_round(const Fragment& fragment, torch::Tensor& params, const torch::Tensor* sent = nullptr) const;
  // params = θ_g + (params - sent) over the fragment (θ_g without `sent`): what step() leaves in
  // params, for replicas other than the one step() was given (the emulation's).
  void rebase(const Fragment& fragment, torch::Tensor& params, const torch::Tensor* sent) const;

  torch::Tensor& global() { return global_; }
  torch::Tensor& momentum() { return momentum_; }
  const OuterHyper& hyper() const { return hyper_; }

 private:
  OuterHyper hyper_;
  torch::Tensor global_;
  torch::Tensor momentum_;
};

}  // namespace gradbox::worker

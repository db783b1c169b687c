#pragma once
// Note [Token efficiency]
// A mode that averages less often than every step needs more tokens for the same loss. Its
// token efficiency is the tokens per-step averaging needs to reach the loss the mode reached,
// over the tokens the mode used (1: parity). A projection's tokens/s speed-up times the mode's
// token efficiency is its speed-up in time to a loss: the time one worker needs to reach the
// loss it reaches in some hours, over the time the cluster needs for that loss. (One worker
// trains per-step by definition; its own batch is taken as per-step's.)
//
// Nobody can train GPT-2-Large on these machines, so the efficiency at a projection's size
// comes from two published fits and one measurement, stated so that they can be checked and replaced:
//   - DiLoCo's validation-loss gap to data-parallel training at equal tokens, from scratch, at
//     20 tokens per parameter, H = 30 (the DiLoCo scaling-laws paper, arXiv 2503.09799, Table 4:
//     35M 2 workers +0.7%, 4 +2.0%, 8 +3.9%; 180M +0.3%, +1.1%, +2.3%), as a power law in the
//     parameters per worker count (exponents 0.52, 0.37, 0.32), interpolated in log2(workers).
//     At gpt2-tiny's 366k parameters it predicts +10.6% for 4 workers; scripts/bench/
//     quality_bench.sh measured +10.5% there (H = 30, kjv): at that size gradbox's DiLoCo is
//     where the paper's trend puts it (at 159k and 847k it measured +11.2% and +9.4%, where the
//     trend says +14.3% and +7.8%: its own slope is shallower);
//   - the tokens per-step needs for a loss that much higher, from Chinchilla's fitted loss law
//     L(N, D) = 1.69 + 406.4 / N^0.34 + 410.7 / D^0.28 (Hoffmann et al. 2022) at D = 20 N;
//   - overlapped rounds (--overlap-steps τ, the delayed rule of Note [Eager outer steps]) add to
//     the gap by how late the outer steps land: measured on the benchmark at H = 20 (kjv), +9.2%
//     without overlap, +9.4% with τ = 4, +10.1% with τ = 9, +13.5% with τ = 19 (H = 30, τ = 29:
//     +14.0% against +10.5%); the factor is read off those points, linear between them, at every
//     size: an assumption, as is the rest. Overlapped boxes apply a round once it is agreed, so
//     their lateness is the folder's lag in steps, which the projection measures
//     (Projection::overlap_fraction), not --overlap-steps.
// Both papers' figures are from scratch at their settings (H = 30, Nesterov 0.9, tuned outer
// lr); the round length is not modelled (the benchmark measured H = 20 at 0.88x H = 30's gap).
// A measured efficiency (the benchmark's token_efficiency.json, or --token-efficiency) replaces
// the estimate. Torch-free.

namespace gradbox::sim {

// DiLoCo's relative validation-loss gap to per-step (0.01: 1% higher) at this size.
double diloco_loss_gap(double parameters, int workers);
// The gap of overlapped rounds from the gap without overlap: overlap_fraction is how late the
// outer steps land, the inner steps run behind a round's exchange over H - 1 (τ / (H - 1) with a
// fixed τ; Projection::overlap_fraction for overlapped boxes, which apply a round once agreed).
double overlapped_loss_gap(double gap, double overlap_fraction);
// Per-step's tokens for a loss `gap` higher, over the tokens behind it, at 20 tokens per parameter.
double token_efficiency_from_gap(double parameters, double gap);

}  // namespace gradbox::sim

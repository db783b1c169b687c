#pragma once
// Note [Checked contributions]
// A signature (Note [Signed files]) says who wrote a file, not that its values are sane: a
// member with the secret, or with a broken GPU, can still send NaN or a gradient a million
// times too large, and one such contribution in an average ruins every replica. So before an
// owner sums (sharded) or pins (all-gather) a shard's contributions, it decodes each one and
// leaves out:
//   - one with a value that is not finite (NaN, Inf: also what a non-finite quantisation scale
//     decodes to). A contribution flagged `overflow` by its writer is not this: that skips the
//     whole round, as it always has;
//   - one whose L2 norm exceeds max_norm_ratio times the lower median of the finite norms of
//     the shard's contributions, own included. The lower median (of an even count, the smaller
//     middle one) keeps one member from setting the bar: with two contributors it is the
//     smaller norm, so a 1e6x gradient is refused, not averaged into half the bar.
// Only bigger is refused: a late entrant's or a partial Δ's smaller norm is expected. The
// decision is the owner's and is written into its agreement (Refusal, in proto/gradbox.proto),
// so every replica applies the same contributors; each replica counts and logs the refusals it
// applies. A scale that is finite but huge shows as a huge norm. Torch- and protobuf-free.
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace gradbox::exchange {

// What the check needs of a decoded contribution.
struct ContributionNorm {
  bool finite = true;
  double norm = 0;  // L2, in double; meaningless when !finite
};
ContributionNorm measure_contribution(const float* values, size_t n);
// The same from the sum of the values' squares (codec::decode_accumulate_measured's).
ContributionNorm norm_from_squares(double sum_of_squares);

// Why each of `norms` must be left out (nullopt: keep it); max_norm_ratio 0 compares no norms.
std::vector<std::optional<std::string>> contribution_refusals(const std::vector<ContributionNorm>& norms,
                                                              double max_norm_ratio);

}  // namespace gradbox::exchange

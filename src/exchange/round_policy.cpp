#include "exchange/round_policy.h"

#include <algorithm>

#include "common/error.h"

namespace gradbox::exchange {

bool RoundRules::partial_due(int64_t steps, bool round_in_flight) const {
  // In flight, the round before is not applied: a Δ so far would be measured from a θ_g that
  // is about to move.
  return partial_every > 0 && !round_in_flight && steps > 0 && steps % partial_every == 0;
}

int64_t RoundRules::apply_after_step(int64_t sent_after_step) const {
  return boxed_overlap() ? std::numeric_limits<int64_t>::max() : sent_after_step + overlap_steps;
}

bool RoundRules::apply_in_flight(int64_t done, int64_t apply_after, bool agreed) const {
  return done >= apply_after || (boxed_overlap() && agreed);
}

double RoundRules::seconds_behind_at_most(double step_s) const {
  const double steps = static_cast<double>(boxed_overlap() ? inner_steps : overlap_steps);
  return boxed_overlap() ? std::min(steps * step_s, round_seconds) : steps * step_s;
}

bool another_fits(double since_open_s, double since_first_s, int64_t done, double round_seconds) {
  return since_open_s + since_first_s / static_cast<double>(done) <= round_seconds;
}

void RoundBox::open(uint64_t round, double first_step_s, double opened_s) {
  round_ = round;
  steps_ = 0;
  first_step_s_ = first_step_s;
  opened_s_ = opened_s;
}

void RoundBox::reopen(uint64_t round, double opened_s) {
  if (rules_.boxed_overlap() && round == round_) opened_s_ = opened_s;
}

bool RoundBox::closes(double now_s) const {
  return rules_.boxed() && steps_ > 0 &&
         !another_fits(now_s - opened_s_, now_s - first_step_s_, steps_, rules_.round_seconds);
}

std::optional<AgreedControl> PendingControls::take_due(uint64_t round) {
  std::optional<AgreedControl> due;
  for (auto it = pending_.begin(); it != pending_.end() && it->first <= round;) due = it->second, it = pending_.erase(it);
  return due;
}

std::optional<float> EagerShares::share(size_t fragment, uint64_t own_tokens) const {
  GB_CHECK(fragment < others_.size(), "eager outer step: fragment ", fragment, " of ", others_.size());
  const int64_t total = others_[fragment] + static_cast<int64_t>(own_tokens);
  if (others_[fragment] < 0 || total == 0) return std::nullopt;
  return static_cast<float>(static_cast<double>(own_tokens) / static_cast<double>(total));
}

void EagerShares::agreed(size_t fragment, uint64_t own_tokens, uint64_t total_tokens) {
  GB_CHECK(fragment < others_.size(), "eager outer step: fragment ", fragment, " of ", others_.size());
  GB_CHECK(own_tokens <= total_tokens, "eager outer step: ", own_tokens, " own tokens of ", total_tokens);
  others_[fragment] = static_cast<int64_t>(total_tokens - own_tokens);
}

uint64_t own_tokens_agreed(const RoundResult& result, const std::string& worker, uint64_t sent_tokens) {
  if (result.contributions.empty()) return sent_tokens;
  uint64_t own = 0;
  for (const AgreedContribution& c : result.contributions)
    if (c.worker == worker) own = std::min(c.tokens, result.tokens);
  return own;
}

}  // namespace gradbox::exchange

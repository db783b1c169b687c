#pragma once
// Note [Round policy]
// The rules of a round that a worker decides alone, in one place that the trainer and the
// simulated worker (src/sim/sim_worker.cpp) both drive, so that `gradbox simulate` projects
// the rules the product runs:
//   - when a time box closes: another step fits while the box's age plus the mean step so far
//     stays within --round-seconds (a late entrant's box opened before its first step: Note
//     [Late entry]; with overlapped boxes the round before's agreement reopens it: Note
//     [Overlapped time-boxed rounds]);
//   - when a partial Δ goes: every --partial-every inner steps while the box is open and no
//     round is in flight (Note [Partial deltas]);
//   - when a round sent in the background is applied: after --overlap-steps more inner steps,
//     or with overlapped boxes as soon as it is agreed (and at the latest when the next round
//     goes), so a round runs behind at most that many steps;
//   - when agreed live control switches: at the first step of the round it names (Note [Live
//     control]).
// How the round's arithmetic is done (the outer step, the eager correction) stays with the
// trainer; the simulator's is a toy. Times are seconds on the caller's clock (steady or
// virtual). Torch-free.

#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "exchange/gradient_exchange.h"

namespace gradbox::exchange {

struct RoundRules {
  int64_t inner_steps = 1;    // a round's nominal steps (per fragment's round with fragments)
  double round_seconds = 0;   // > 0: time-boxed rounds
  int64_t overlap_steps = 0;  // > 0: a round's exchange runs behind the next inner steps
  int64_t partial_every = 0;  // > 0: a partial Δ every so many inner steps

  bool boxed() const { return round_seconds > 0; }
  bool boxed_overlap() const { return boxed() && overlap_steps > 0; }
  // After `steps` inner steps of an open box, with or without a round in flight.
  bool partial_due(int64_t steps, bool round_in_flight) const;
  // The step after which a round sent in the background once `sent_after_step` was done must
  // be applied (overlapped boxes: none, it applies once agreed or when the next round goes).
  int64_t apply_after_step(int64_t sent_after_step) const;
  bool apply_in_flight(int64_t done, int64_t apply_after, bool agreed) const;
  // The most compute, at step_s a step, that runs while a sent round is not yet applied:
  // --overlap-steps steps; with overlapped boxes the next round's steps that fit a box opened
  // at its first step (it reopens at the agreement), at most H.
  double seconds_behind_at_most(double step_s) const;
};

// Whether one more unit of work (an inner step, a micro-batch), as long as the mean of the
// `done` units taken since `since_first_s` ago, still ends inside a box of `round_seconds`
// opened `since_open_s` ago.
bool another_fits(double since_open_s, double since_first_s, int64_t done, double round_seconds);

// One worker's time box for the round it computes in.
class RoundBox {
 public:
  RoundBox() = default;
  explicit RoundBox(const RoundRules& rules) : rules_(rules) {}

  // Whether `round`'s first step is yet to open the box.
  bool opens_with(uint64_t round) const { return round != round_; }
  // `round`'s first inner step began at first_step_s; the box opened at opened_s (earlier for
  // a late entrant, whose round had been open a while). It counts its steps from none.
  void open(uint64_t round, double first_step_s, double opened_s);
  // Overlapped boxes: the round before was agreed, and this round's box opens then.
  void reopen(uint64_t round, double opened_s);
  void stepped() { ++steps_; }
  // The round went out: the steps from here on count for the next one.
  void sent() { steps_ = 0; }
  // A resumed or reloaded run: the next step opens a new box.
  void forget() { round_ = 0, steps_ = 0; }

  int64_t steps() const { return steps_; }
  // At now_s, after a step that did not end the round: whether the box closes (another step
  // at the mean so far would overrun it).
  bool closes(double now_s) const;

 private:
  RoundRules rules_;
  uint64_t round_ = 0;  // the round whose box this is (0: none)
  int64_t steps_ = 0;
  double opened_s_ = 0, first_step_s_ = 0;
};

// The eager rule's share of each fragment's average (Note [Eager outer steps] in
// worker/eager_outer.h): this worker's tokens over its own plus the others' in the fragment's
// last agreed round. Unknown before a fragment's first agreement and after a reload or a join;
// such a round runs the delayed rule.
class EagerShares {
 public:
  explicit EagerShares(size_t fragments = 1) : others_(fragments, -1) {}

  // The share of a Δ of own_tokens going out for `fragment`; none while unknown.
  std::optional<float> share(size_t fragment, uint64_t own_tokens) const;
  // `fragment`'s round was agreed over total_tokens, own_tokens of them this worker's.
  void agreed(size_t fragment, uint64_t own_tokens, uint64_t total_tokens);
  void forget() { others_.assign(others_.size(), -1); }
  // Per fragment the others' tokens (-1: unknown), as checkpoints keep them.
  std::vector<int64_t>& others_tokens() { return others_; }
  const std::vector<int64_t>& others_tokens() const { return others_; }

 private:
  std::vector<int64_t> others_;
};

// This worker's tokens in an agreed round's average: what the agreement names (a partial Δ of
// its that stood in counts its tokens), else, when the exchange names nobody, all it sent.
uint64_t own_tokens_agreed(const RoundResult& result, const std::string& worker, uint64_t sent_tokens);

// Agreed live control waiting for the round it names.
class PendingControls {
 public:
  void add(const AgreedControl& control) { pending_[control.from_round] = control; }
  // The newest control due by `round` (older ones due by then are dropped).
  std::optional<AgreedControl> take_due(uint64_t round);
  void clear() { pending_.clear(); }

 private:
  std::map<uint64_t, AgreedControl> pending_;
};

}  // namespace gradbox::exchange

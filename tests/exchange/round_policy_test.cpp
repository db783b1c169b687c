// Note [Round policy]: the rules the trainer and the simulated worker both run, on explicit
// times (a virtual clock: each step below is 10 s).
#include "exchange/round_policy.h"

#include <gtest/gtest.h>

namespace gradbox::exchange {
namespace {

constexpr double kStep = 10;

// Steps of kStep from first_step_s until the box closes or H steps are done; the steps taken.
int64_t steps_that_fit(RoundBox& box, int64_t inner_steps, double first_step_s) {
  double now = first_step_s;
  while (box.steps() < inner_steps) {
    now += kStep;
    box.stepped();
    if (box.steps() < inner_steps && box.closes(now)) break;
  }
  return box.steps();
}

TEST(RoundPolicy, ABoxClosesWhenTheNextStepAtTheMeanSoFarWouldOverrunIt) {
  RoundBox box(RoundRules{.inner_steps = 20, .round_seconds = 35});
  ASSERT_TRUE(box.opens_with(1));
  box.open(1, 0, 0);
  EXPECT_FALSE(box.opens_with(1));
  // 10 + 10, 20 + 10, 30 + 10 > 35: the third step is the last.
  EXPECT_EQ(steps_that_fit(box, 20, 0), 3);
  // A box that fits every step does not close: the round ends at its H-th.
  RoundBox roomy(RoundRules{.inner_steps = 4, .round_seconds = 1000});
  roomy.open(1, 0, 0);
  EXPECT_EQ(steps_that_fit(roomy, 4, 0), 4);
  // Rounds without a box never close early.
  RoundBox unboxed(RoundRules{.inner_steps = 20});
  unboxed.open(1, 0, 0);
  EXPECT_EQ(steps_that_fit(unboxed, 20, 0), 20);
}

TEST(RoundPolicy, ALateEntrantsBoxOpenedBeforeItsFirstStep) {
  RoundBox box(RoundRules{.inner_steps = 20, .round_seconds = 35});
  box.open(7, 20, 0);  // the round had been open 20 s: one step fits
  EXPECT_EQ(steps_that_fit(box, 20, 20), 1);
  RoundBox later(RoundRules{.inner_steps = 20, .round_seconds = 35});
  later.open(7, 40, 0);  // past the box already: the first step is its only one
  EXPECT_EQ(steps_that_fit(later, 20, 40), 1);
}

TEST(RoundPolicy, OverlappedBoxesReopenAtTheRoundBeforesAgreement) {
  const RoundRules overlapped{.inner_steps = 20, .round_seconds = 35, .overlap_steps = 19};
  RoundBox box(overlapped);
  box.open(5, 0, 0);
  box.reopen(5, 15);  // round 4 was agreed at 15 s: round 5's box closes at 50 s
  // At 40 s: 25 + 10 fits; at 50 s: 35 + 10 does not. Five steps, the first behind round 4.
  EXPECT_EQ(steps_that_fit(box, 20, 0), 5);
  // Another round's agreement does not move this box.
  RoundBox other(overlapped);
  other.open(5, 0, 0);
  other.reopen(6, 15);
  EXPECT_EQ(steps_that_fit(other, 20, 0), 3);
  // Nor does one in boxes without overlap: they open at the worker's own first step.
  RoundBox plain(RoundRules{.inner_steps = 20, .round_seconds = 35});
  plain.open(5, 0, 0);
  plain.reopen(5, 15);
  EXPECT_EQ(steps_that_fit(plain, 20, 0), 3);
}

TEST(RoundPolicy, SentAndForgottenBoxesCountAgain) {
  RoundBox box(RoundRules{.inner_steps = 20, .round_seconds = 35});
  box.open(1, 0, 0);
  box.stepped();
  box.stepped();
  box.sent();
  EXPECT_EQ(box.steps(), 0);
  EXPECT_FALSE(box.opens_with(1));  // the round's box stays until the next round's first step
  EXPECT_FALSE(box.closes(1000));   // no step yet: nothing to judge the next by
  box.forget();
  EXPECT_TRUE(box.opens_with(1));
  // A new round's box counts its own steps, whatever the last one left.
  box.open(2, 0, 0);
  box.stepped();
  box.open(3, 100, 100);
  EXPECT_EQ(box.steps(), 0);
  EXPECT_EQ(steps_that_fit(box, 20, 100), 3);
}

TEST(RoundPolicy, PartialDeltasGoEveryKStepsWhileNoRoundIsInFlight) {
  const RoundRules rules{.inner_steps = 20, .round_seconds = 35, .overlap_steps = 19, .partial_every = 2};
  EXPECT_FALSE(rules.partial_due(0, false));
  EXPECT_FALSE(rules.partial_due(1, false));
  EXPECT_TRUE(rules.partial_due(2, false));
  EXPECT_FALSE(rules.partial_due(2, true));
  EXPECT_FALSE(rules.partial_due(3, false));
  EXPECT_TRUE(rules.partial_due(4, false));
  EXPECT_FALSE(RoundRules{.inner_steps = 20}.partial_due(2, false));
}

TEST(RoundPolicy, ARoundInFlightIsAppliedAfterTauStepsOrInOverlappedBoxesOnceAgreed) {
  const RoundRules overlapped{.inner_steps = 20, .overlap_steps = 4};
  const int64_t after = overlapped.apply_after_step(100);
  EXPECT_EQ(after, 104);
  EXPECT_FALSE(overlapped.apply_in_flight(103, after, true));  // agreed, but tau steps first
  EXPECT_TRUE(overlapped.apply_in_flight(104, after, false));  // then it is waited for
  EXPECT_DOUBLE_EQ(overlapped.seconds_behind_at_most(kStep), 40);

  const RoundRules boxed{.inner_steps = 20, .round_seconds = 600, .overlap_steps = 4};
  const int64_t never = boxed.apply_after_step(100);
  EXPECT_FALSE(boxed.apply_in_flight(10'000, never, false));  // no count: until agreed
  EXPECT_TRUE(boxed.apply_in_flight(101, never, true));
  // It may run behind the next round's steps that fit a box, the whole round at most: that
  // round's send applies it at the latest.
  EXPECT_DOUBLE_EQ(boxed.seconds_behind_at_most(kStep), 200);
  const RoundRules short_box{.inner_steps = 20, .round_seconds = 45, .overlap_steps = 4};
  EXPECT_DOUBLE_EQ(short_box.seconds_behind_at_most(kStep), 45);
}

TEST(RoundPolicy, AnotherUnitFitsWhileTheBoxsAgePlusTheMeanUnitIsWithinIt) {
  EXPECT_TRUE(another_fits(20, 20, 2, 30));   // 20 + 10 = 30
  EXPECT_FALSE(another_fits(21, 21, 2, 30));  // 21 + 10.5
  EXPECT_FALSE(another_fits(25, 5, 1, 29));   // a late entrant: the box is older than its first unit
}

TEST(RoundPolicy, ControlSwitchesAtTheRoundItNamesTheNewestWinning) {
  PendingControls pending;
  pending.add({1, 5, R"({"grad_accum":2})"});
  pending.add({2, 7, R"({"grad_accum":4})"});
  EXPECT_FALSE(pending.take_due(4).has_value());
  const std::optional<AgreedControl> due = pending.take_due(6);
  ASSERT_TRUE(due.has_value());
  EXPECT_EQ(due->version, 1u);
  EXPECT_FALSE(pending.take_due(6).has_value());  // taken once
  const std::optional<AgreedControl> later = pending.take_due(9);
  ASSERT_TRUE(later.has_value());
  EXPECT_EQ(later->version, 2u);
  // Both due at once: the newer round's wins, the older is dropped.
  pending.add({3, 10, "{}"});
  pending.add({4, 11, "{}"});
  EXPECT_EQ(pending.take_due(12)->version, 4u);
  EXPECT_FALSE(pending.take_due(12).has_value());
}

TEST(RoundPolicy, TheEagerShareIsOwnTokensOverOwnAndTheOthersOfTheLastAgreedRound) {
  EagerShares shares(2);
  EXPECT_FALSE(shares.share(0, 100).has_value());  // nothing agreed yet: the delayed rule
  shares.agreed(0, 100, 400);                      // the others had 300
  ASSERT_TRUE(shares.share(0, 100).has_value());
  EXPECT_FLOAT_EQ(*shares.share(0, 100), 0.25f);
  EXPECT_FLOAT_EQ(*shares.share(0, 300), 0.5f);   // this round's own tokens, the others' last
  EXPECT_FALSE(shares.share(1, 100).has_value());  // per fragment
  shares.forget();
  EXPECT_FALSE(shares.share(0, 100).has_value());
  EXPECT_THROW(shares.agreed(0, 500, 400), std::exception);
  EXPECT_THROW(shares.share(2, 1), std::exception);
}

TEST(RoundPolicy, OwnTokensInAnAgreementAreWhatItNamesElseAllThatWasSent) {
  RoundResult result;
  result.tokens = 900;
  EXPECT_EQ(own_tokens_agreed(result, "a", 300), 300u);  // the exchange names nobody
  result.contributions = {{"a", 200, true}, {"b", 700, false}};
  EXPECT_EQ(own_tokens_agreed(result, "a", 300), 200u);  // its partial Δ stood in
  EXPECT_EQ(own_tokens_agreed(result, "c", 300), 0u);    // left out
}

}  // namespace
}  // namespace gradbox::exchange

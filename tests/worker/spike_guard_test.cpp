// Note [Spike guard]: z-scores against the applied steps' window, skips that stay out of it,
// rollback after K skips within a window, a reset without rollback, and state that replays
// identically after a checkpoint.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "common/error.h"
#include "worker/spike_guard.h"

namespace gradbox::worker {
namespace {

using Verdict = SpikeGuard::Verdict;

// A loss falling slowly with a little wobble, and a steady gradient norm.
double loss_at(int i) { return 4.0 - 0.001 * i + 0.01 * std::sin(i * 1.7); }
double norm_at(int i) { return 1.0 + 0.05 * std::cos(i * 0.9); }

void fill(SpikeGuard& guard, int steps, int from = 0) {
  for (int i = from; i < from + steps; ++i) ASSERT_EQ(guard.judge(loss_at(i), norm_at(i)).verdict, Verdict::apply) << i;
}

TEST(SpikeGuard, JudgesNothingUntilTheWindowIsFullThenSkipsALossOrNormSpike) {
  SpikeGuard guard({6, 16, 0});
  EXPECT_EQ(guard.judge(1e6, 1e6).verdict, Verdict::apply);  // the window is empty: no statistics yet
  SpikeGuard fresh({6, 16, 0});
  fill(fresh, 16);
  const SpikeGuard::Judgement loss_spike = fresh.judge(40.0, norm_at(16));
  EXPECT_EQ(loss_spike.verdict, Verdict::skip);
  EXPECT_GT(loss_spike.loss_z, 6);
  const SpikeGuard::Judgement norm_spike = fresh.judge(loss_at(16), 50.0);
  EXPECT_EQ(norm_spike.verdict, Verdict::skip);
  EXPECT_GT(norm_spike.norm_z, 6);
  EXPECT_LT(norm_spike.loss_z, 6);
  EXPECT_EQ(fresh.window_size(), 16u);  // skipped values stay out of the statistics
  // A lower loss is progress, never a spike; non-finite values are not judged (overflow is).
  EXPECT_EQ(fresh.judge(0.5, norm_at(17)).verdict, Verdict::apply);
  EXPECT_EQ(fresh.judge(NAN, 1.0).verdict, Verdict::apply);
  EXPECT_EQ(SpikeGuard({0, 16, 0}).judge(1e9, 1e9).verdict, Verdict::apply);  // off
}

TEST(SpikeGuard, TheKthSkipWithinAWindowRollsBackAndOlderSkipsAreForgotten) {
  SpikeGuard guard({6, 16, 3});
  fill(guard, 16);
  EXPECT_EQ(guard.judge(40, 1).verdict, Verdict::skip);
  EXPECT_EQ(guard.judge(40, 1).verdict, Verdict::skip);
  fill(guard, 20, 16);  // the two skips leave the window
  EXPECT_EQ(guard.judge(40, 1).verdict, Verdict::skip);
  EXPECT_EQ(guard.judge(40, 1).verdict, Verdict::skip);
  EXPECT_EQ(guard.judge(40, 1).verdict, Verdict::roll_back);
  EXPECT_EQ(guard.judge(40, 1).verdict, Verdict::skip);  // counting starts again after a rollback
}

TEST(SpikeGuard, WithoutRollbackRepeatedSkipsMeanANewLevelAndTheWindowIsLearntAgain) {
  SpikeGuard guard({6, 16, 0});
  fill(guard, 16);
  for (int i = 0; i < SpikeGuard::kResetAfter; ++i) EXPECT_EQ(guard.judge(9.0, 1.0).verdict, Verdict::skip) << i;
  EXPECT_EQ(guard.window_size(), 0u);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(guard.judge(9.0 + 0.01 * (i % 3), 1.0).verdict, Verdict::apply) << i;
}

// A window that barely moves has a deviation of at least 5% of its mean: noise is not a spike
// (early training's steady gradient norms made 9% more look like 32 deviations), a jump is.
TEST(SpikeGuard, AWindowThatBarelyMovesStillTakesNoiseForNoise) {
  SpikeGuard guard({6, 8, 0});
  for (int i = 0; i < 8; ++i) guard.judge(2.0, 1.0);
  SpikeGuard same = guard;
  const SpikeGuard::Judgement noise = guard.judge(2.5, 1.09);
  EXPECT_EQ(noise.verdict, Verdict::apply);
  EXPECT_NEAR(noise.loss_z, 5.0, 1e-9);  // 0.5 above, in deviations of 0.1
  EXPECT_NEAR(noise.norm_z, 1.8, 1e-9);
  const SpikeGuard::Judgement jump = same.judge(2.7, 1.0);
  EXPECT_EQ(jump.verdict, Verdict::skip);
  EXPECT_NEAR(jump.loss_z, 7.0, 1e-9);
}

// What a checkpoint keeps makes a resumed (or joining) replica judge exactly as the one that
// wrote it: identical verdicts and z-scores from then on.
TEST(SpikeGuard, ARestoredGuardJudgesExactlyAsTheOriginal) {
  SpikeGuard original({5, 32, 4});
  fill(original, 40);
  original.judge(30, 1);
  SpikeGuard restored({5, 32, 4});
  restored.restore(nlohmann::json::parse(original.to_json().dump()));
  for (int i = 40; i < 120; ++i) {
    const double loss = i % 17 == 0 ? 30.0 : loss_at(i), norm = i % 23 == 0 ? 40.0 : norm_at(i);
    const SpikeGuard::Judgement a = original.judge(loss, norm), b = restored.judge(loss, norm);
    ASSERT_EQ(a.verdict, b.verdict) << i;
    ASSERT_EQ(a.loss_z, b.loss_z) << i;
    ASSERT_EQ(a.norm_z, b.norm_z) << i;
  }
  SpikeGuard smaller({5, 8, 0});
  smaller.restore(original.to_json());
  EXPECT_EQ(smaller.window_size(), 8u);  // another --spike-window keeps the newest
  SpikeGuard untouched({5, 8, 0});
  untouched.restore(nullptr);  // a checkpoint from before the guard
  EXPECT_EQ(untouched.window_size(), 0u);
  EXPECT_THROW(untouched.restore({{"losses", {1.0}}, {"norms", {}}, {"skips", {}}, {"judged", 1}}), InputError);
  EXPECT_THROW(untouched.restore({{"losses", "x"}}), InputError);
}

TEST(SpikeGuard, BadSettingsAreNamed) {
  try {
    SpikeGuard({-1, 16, 0});
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("--spike-z"), std::string::npos);
  }
  EXPECT_THROW(SpikeGuard({6, 4, 0}), InputError);
  EXPECT_THROW(SpikeGuard({6, 16, 17}), InputError);
}

}  // namespace
}  // namespace gradbox::worker

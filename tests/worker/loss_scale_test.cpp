// Note [Mixed precision] in src/worker/loss_scale.h: the dynamic loss scale's rule, and the
// precision --precision auto picks per device.
#include "worker/loss_scale.h"

#include <gtest/gtest.h>

#include "common/error.h"
#include "worker/runtime.h"

namespace gradbox::worker {
namespace {

TEST(LossScaler, StartsAt2To16BacksOffOnOverflowAndGrowsEvery2000GoodSteps) {
  LossScaler s(true);
  EXPECT_EQ(s.scale(), 65536.0);
  for (int i = 0; i < 1999; ++i) s.applied();
  EXPECT_EQ(s.scale(), 65536.0);
  s.applied();
  EXPECT_EQ(s.scale(), 131072.0);
  for (int i = 0; i < 1500; ++i) s.applied();
  s.overflowed();  // also forgets the good steps since the last growth
  EXPECT_EQ(s.scale(), 65536.0);
  EXPECT_EQ(s.good_steps(), 0);
  for (int i = 0; i < 1999; ++i) s.applied();
  EXPECT_EQ(s.scale(), 65536.0);
  for (int i = 0; i < 40; ++i) s.overflowed();
  EXPECT_EQ(s.scale(), LossScaler::kMin) << "never below 1";
  LossScaler top(true);
  top.restore(LossScaler::kMax, 1999);
  top.applied();
  EXPECT_EQ(top.scale(), LossScaler::kMax) << "never above 2^24";
}

// Two replicas that see the same agreed rounds hold the same scale; a joiner that restores it
// from a checkpoint follows the same sequence from there.
TEST(LossScaler, ReplicasOnTheSameRoundsAndAJoinerFromTheirCheckpointAgree) {
  LossScaler a(true), b(true), joiner(true);
  auto round = [](LossScaler& s, int r) { (r % 37 == 0) ? s.overflowed() : s.applied(); };
  for (int r = 1; r <= 5000; ++r) {
    round(a, r);
    round(b, r);
    if (r == 3000) joiner.restore(a.scale(), a.good_steps());
    if (r > 3000) round(joiner, r);
    ASSERT_EQ(a.scale(), b.scale()) << "round " << r;
    if (r >= 3000) {  // braces: gtest's ASSERT_EQ is an if/else inside
      ASSERT_EQ(joiner.scale(), a.scale()) << "round " << r;
    }
  }
}

TEST(LossScaler, OtherPrecisionsKeepOneAndRefuseNonsense) {
  LossScaler fixed(false);
  fixed.overflowed();
  for (int i = 0; i < 5000; ++i) fixed.applied();
  EXPECT_EQ(fixed.scale(), 1.0);
  LossScaler s(true);
  EXPECT_THROW(s.restore(0.0, 0), InputError);
  EXPECT_THROW(s.restore(std::nan(""), 0), InputError);
  EXPECT_THROW(s.restore(1024, -1), InputError);
}

TEST(AutoPrecision, Fp16OnT4ClassBf16OnAmpereAndNewerFp32OnCpu) {
  EXPECT_EQ(auto_precision(false, 0), Precision::fp32);
  EXPECT_EQ(auto_precision(true, 6), Precision::fp16);  // P100
  EXPECT_EQ(auto_precision(true, 7), Precision::fp16);  // T4, V100
  EXPECT_EQ(auto_precision(true, 8), Precision::bf16);  // A100, L4
  EXPECT_EQ(auto_precision(true, 9), Precision::bf16);  // H100, H200
}

}  // namespace
}  // namespace gradbox::worker

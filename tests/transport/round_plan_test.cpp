// Note [Round plan]: how parts become buckets, and what the fingerprint tells apart.
#include "transport/round_plan.h"

#include <gtest/gtest.h>

#include <stdexcept>

namespace gradbox::transport {
namespace {

using exchange::Span;

std::vector<std::pair<size_t, size_t>> spans(const RoundPlan& plan) {
  std::vector<std::pair<size_t, size_t>> out;
  for (const Span& b : plan.buckets) out.emplace_back(b.begin, b.end);
  return out;
}

TEST(RoundPlan, AdjacentPartsLastFirstMergeIntoBucketsUpToTheSize) {
  // Three parameters of 30, last first: 60 fits two, the third starts a bucket.
  const RoundPlan plan = plan_round(90, {{60, 90}, {30, 60}, {0, 30}}, 60);
  EXPECT_EQ(spans(plan), (std::vector<std::pair<size_t, size_t>>{{30, 90}, {0, 30}}));
  EXPECT_EQ(plan.chunks_in_bucket, (std::vector<size_t>{2, 1}));
  EXPECT_EQ(plan.part_buckets, (std::vector<std::vector<size_t>>{{0}, {0}, {1}}));
}

TEST(RoundPlan, APartLargerThanABucketIsCutAndOnlyTheBucketJustBeforeInOrderIsMergedWith) {
  // An embedding of 250 with buckets of 100, then [280, 300), which does not touch the bucket
  // before it ([200, 250)), then [250, 280), which touches [280, 300): one bucket of 50.
  const RoundPlan plan = plan_round(300, {{0, 250}, {280, 300}, {250, 280}}, 100);
  EXPECT_EQ(spans(plan), (std::vector<std::pair<size_t, size_t>>{{0, 100}, {100, 200}, {200, 250}, {250, 300}}));
  EXPECT_EQ(plan.part_buckets, (std::vector<std::vector<size_t>>{{0, 1, 2}, {3}, {3}}));
}

TEST(RoundPlan, TheWholeVectorGoesInAscendingBuckets) {
  const RoundPlan plan = plan_round(250, 100);
  EXPECT_EQ(spans(plan), (std::vector<std::pair<size_t, size_t>>{{0, 100}, {100, 200}, {200, 250}}));
  EXPECT_TRUE(plan_round(0, 100).buckets.empty());
}

TEST(RoundPlan, PartsThatDoNotTileTheVectorAreABug) {
  EXPECT_THROW(plan_round(100, {{0, 40}, {50, 100}}, 64), std::logic_error);   // a gap
  EXPECT_THROW(plan_round(100, {{0, 60}, {50, 100}}, 64), std::logic_error);   // an overlap
  EXPECT_THROW(plan_round(100, {{0, 60}, {60, 120}}, 64), std::logic_error);  // past the end
}

TEST(RoundPlan, TheFingerprintTellsPlansApartAndAgreesForTheSamePlan) {
  const std::vector<Span> parts{{60, 90}, {30, 60}, {0, 30}};
  EXPECT_EQ(plan_round(90, parts, 60).fingerprint, plan_round(90, parts, 60).fingerprint);
  EXPECT_NE(plan_round(90, parts, 60).fingerprint, plan_round(90, 60).fingerprint);
  EXPECT_NE(plan_round(90, parts, 60).fingerprint, plan_round(90, parts, 30).fingerprint);
  EXPECT_LT(plan_round(90, parts, 60).fingerprint, 1u << 16);
}

}  // namespace
}  // namespace gradbox::transport

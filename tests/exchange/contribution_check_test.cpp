// The rule an owner applies before it averages (Note [Checked contributions]): non-finite values
// always out, a norm above the ratio times the lower median out, nothing smaller ever out.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "exchange/contribution_check.h"

namespace gradbox::exchange {
namespace {

std::vector<bool> refused(const std::vector<ContributionNorm>& norms, double ratio) {
  std::vector<bool> out;
  for (const auto& why : contribution_refusals(norms, ratio)) out.push_back(why.has_value());
  return out;
}

TEST(ContributionCheck, MeasuresTheNormAndFindsAnyNonFiniteValue) {
  std::vector<float> x(1001, 0.5f);
  ContributionNorm n = measure_contribution(x.data(), x.size());
  EXPECT_TRUE(n.finite);
  EXPECT_NEAR(n.norm, 0.5 * std::sqrt(1001.0), 1e-9);
  EXPECT_EQ(measure_contribution(x.data(), 0).norm, 0.0);
  for (size_t at : {size_t{0}, size_t{3}, size_t{1000}}) {  // in the vector body and in the tail
    for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                      -std::numeric_limits<float>::infinity()}) {
      std::vector<float> y = x;
      y[at] = bad;
      EXPECT_FALSE(measure_contribution(y.data(), y.size()).finite) << at << " " << bad;
    }
  }
  // The largest floats square past float's range but not double's: finite, and huge.
  std::vector<float> big(4, std::numeric_limits<float>::max());
  n = measure_contribution(big.data(), big.size());
  EXPECT_TRUE(n.finite);
  EXPECT_GT(n.norm, 1e38);
}

TEST(ContributionCheck, TheLowerMedianSetsTheBar) {
  const ContributionNorm nan{false, 0};
  // Two members: the smaller norm is the median, so a 1e6x one is out, however the pair is ordered.
  EXPECT_EQ(refused({{true, 1.0}, {true, 1e6}}, 10), (std::vector<bool>{false, true}));
  EXPECT_EQ(refused({{true, 1e6}, {true, 1.0}}, 10), (std::vector<bool>{true, false}));
  EXPECT_EQ(refused({{true, 1.0}, {true, 9.0}}, 10), (std::vector<bool>{false, false}));
  // Smaller is never out (a late entrant's few steps, a partial delta).
  EXPECT_EQ(refused({{true, 1.0}, {true, 1.2}, {true, 1e-6}}, 10), (std::vector<bool>{false, false, false}));
  // Many honest ones outvote one bad one; two bad of five do not move the bar.
  EXPECT_EQ(refused({{true, 2}, {true, 3}, {true, 2.5}, {true, 3e3}, {true, 4e3}}, 10),
            (std::vector<bool>{false, false, false, true, true}));
  // Non-finite: always out, and no part of the median.
  EXPECT_EQ(refused({nan, {true, 1.0}, {true, 50.0}}, 10), (std::vector<bool>{true, false, true}));
  EXPECT_EQ(refused({nan, {true, 1.0}, {true, 50.0}}, 0), (std::vector<bool>{true, false, false}));  // norms not compared
  // Alone, or beside zero updates, a norm has nothing to be compared with.
  EXPECT_EQ(refused({{true, 1e9}}, 10), (std::vector<bool>{false}));
  EXPECT_EQ(refused({{true, 0.0}, {true, 5.0}}, 10), (std::vector<bool>{false, false}));
  EXPECT_TRUE(refused({}, 10).empty());
  // The reason names the norm and the median.
  const auto why = contribution_refusals({{true, 1.0}, {true, 1e6}}, 10);
  ASSERT_TRUE(why[1].has_value());
  EXPECT_NE(why[1]->find("1e+06"), std::string::npos) << *why[1];
}

}  // namespace
}  // namespace gradbox::exchange

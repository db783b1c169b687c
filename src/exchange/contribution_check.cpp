#include "exchange/contribution_check.h"

#include <algorithm>
#include <cmath>

#include "codec/codec.h"
#include "common/error.h"

namespace gradbox::exchange {

ContributionNorm measure_contribution(const float* values, size_t n) {
  return norm_from_squares(codec::sum_of_squares(values, n));
}

ContributionNorm norm_from_squares(double sum_of_squares) {
  if (!std::isfinite(sum_of_squares)) return ContributionNorm{false, 0};
  return ContributionNorm{true, std::sqrt(sum_of_squares)};
}

std::vector<std::optional<std::string>> contribution_refusals(const std::vector<ContributionNorm>& norms,
                                                              double max_norm_ratio) {
  std::vector<std::optional<std::string>> refusals(norms.size());
  std::vector<double> finite;
  for (size_t i = 0; i < norms.size(); ++i) {
    if (norms[i].finite) finite.push_back(norms[i].norm);
    else refusals[i] = "a value that is not finite (NaN or Inf)";
  }
  if (max_norm_ratio <= 0 || finite.size() < 2) return refusals;
  std::sort(finite.begin(), finite.end());
  const double median = finite[(finite.size() - 1) / 2];  // the lower median
  if (median <= 0) return refusals;  // zero updates say nothing about the scale of the others
  const double bound = max_norm_ratio * median;
  for (size_t i = 0; i < norms.size(); ++i)
    if (norms[i].finite && norms[i].norm > bound)
      refusals[i] = str("L2 norm ", norms[i].norm, " is over ", max_norm_ratio, "x the median contribution's (",
                        median, ")");
  return refusals;
}

}  // namespace gradbox::exchange

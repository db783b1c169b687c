#include "sim/token_efficiency.h"

#include <algorithm>
#include <cmath>
#include <iterator>

#include "common/error.h"

namespace gradbox::sim {
namespace {

// arXiv 2503.09799, Table 4 (percent above data-parallel at 35M and 180M parameters).
struct GapRow {
  double log2_workers, at_35m, at_180m;
};
constexpr GapRow kRows[] = {{1, 0.7, 0.3}, {2, 2.0, 1.1}, {3, 3.9, 2.3}};

// Chinchilla's fitted law (Hoffmann et al. 2022, approach 3).
constexpr double kE = 1.69, kA = 406.4, kB = 410.7, kAlpha = 0.34, kBeta = 0.28;

}  // namespace

double diloco_loss_gap(double parameters, int workers) {
  GB_REQUIRE(parameters > 0 && workers >= 1, "token efficiency: ", parameters, " parameters, ", workers, " workers");
  if (workers == 1) return 0.0;  // the paper's one-replica DiLoCo is as good as data-parallel
  // Between the rows, or beyond the last two: linear in log2(workers), for the gap at 35M and
  // for the exponent of the size trend alike.
  const double x = std::log2(static_cast<double>(workers));
  const size_t i = x <= kRows[1].log2_workers ? 0 : 1;
  const GapRow& a = kRows[i];
  const GapRow& b = kRows[i + 1];
  const double t = (x - a.log2_workers) / (b.log2_workers - a.log2_workers);
  auto exponent = [](const GapRow& r) { return std::log(r.at_35m / r.at_180m) / std::log(180.0 / 35.0); };
  const double at_35m = a.at_35m + t * (b.at_35m - a.at_35m);
  const double power = exponent(a) + t * (exponent(b) - exponent(a));
  return std::max(0.0, at_35m) / 100 * std::pow(35e6 / parameters, power);
}

double overlapped_loss_gap(double gap, double overlap_fraction) {
  GB_REQUIRE(overlap_fraction >= 0 && overlap_fraction <= 1, "token efficiency: an overlap of ", overlap_fraction,
             " of a round (0 to 1)");
  // quality_bench, kjv, H = 20, the delayed rule: the gap with τ overlapped steps over the gap
  // without (+9.2%), at τ / (H - 1); linear between the measured points.
  struct Point {
    double fraction, factor;
  };
  constexpr Point kMeasured[] = {{0.0, 1.0}, {4.0 / 19, 9.4 / 9.2}, {9.0 / 19, 10.1 / 9.2}, {1.0, 13.5 / 9.2}};
  size_t i = 1;
  while (i + 1 < std::size(kMeasured) && overlap_fraction > kMeasured[i].fraction) ++i;
  const Point& a = kMeasured[i - 1];
  const Point& b = kMeasured[i];
  return gap * (a.factor + (b.factor - a.factor) * (overlap_fraction - a.fraction) / (b.fraction - a.fraction));
}

double token_efficiency_from_gap(double parameters, double gap) {
  GB_REQUIRE(parameters > 0 && gap >= 0, "token efficiency: ", parameters, " parameters, gap ", gap);
  const double tokens = 20 * parameters;
  const double data_term = kB / std::pow(tokens, kBeta);
  const double loss = kE + kA / std::pow(parameters, kAlpha) + data_term;
  // B / D*^β = B / D^β + gap · L, so D* / D = (1 + gap · L / (B / D^β))^(-1/β).
  return std::pow(1 + gap * loss / data_term, -1 / kBeta);
}

}  // namespace gradbox::sim

#include "worker/spike_guard.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"

namespace gradbox::worker {

SpikeGuard::SpikeGuard(SpikeGuardConfig config) : config_(config) {
  GB_REQUIRE(config_.z >= 0 && std::isfinite(config_.z), "--spike-z ", config_.z, ": must be >= 0 (0: off)");
  GB_REQUIRE(config_.window >= 8, "--spike-window ", config_.window, ": must be >= 8 steps");
  GB_REQUIRE(config_.rollback_after >= 0 && config_.rollback_after <= config_.window, "--spike-rollback ",
             config_.rollback_after, ": must be between 0 (never) and --spike-window ", config_.window);
}

double SpikeGuard::z_score(const std::deque<double>& values, double x) {
  double mean = 0;
  for (double v : values) mean += v;
  mean /= static_cast<double>(values.size());
  double var = 0;
  for (double v : values) var += (v - mean) * (v - mean);
  // A window that barely moves (the steady gradient norms of early training, a flat loss) would
  // turn noise into spikes: the deviation is at least kMinRelativeDeviation of the mean.
  const double sd = std::max(std::sqrt(var / static_cast<double>(values.size())), kMinRelativeDeviation * std::fabs(mean));
  if (sd > 0) return (x - mean) / sd;
  return x > mean ? INFINITY : 0;
}

SpikeGuard::Judgement SpikeGuard::judge(double loss, double grad_norm) {
  Judgement j;
  if (!enabled() || !std::isfinite(loss) || !std::isfinite(grad_norm)) return j;
  ++judged_;
  while (!skips_.empty() && skips_.front() <= judged_ - config_.window) skips_.pop_front();
  const bool full = static_cast<int64_t>(losses_.size()) >= config_.window;
  if (full) {
    j.loss_z = z_score(losses_, loss);
    j.norm_z = z_score(norms_, grad_norm);
  }
  if (full && (j.loss_z > config_.z || j.norm_z > config_.z)) {
    skips_.push_back(judged_);
    const int64_t skips = static_cast<int64_t>(skips_.size());
    if (config_.rollback_after > 0 && skips >= config_.rollback_after) {
      j.verdict = Verdict::roll_back;
      skips_.clear();
    } else if (config_.rollback_after == 0 && skips >= kResetAfter) {
      // Not a spike but a new level: learn the statistics again from here.
      losses_.clear();
      norms_.clear();
      skips_.clear();
      j.verdict = Verdict::skip;
    } else {
      j.verdict = Verdict::skip;
    }
    return j;
  }
  losses_.push_back(loss);
  norms_.push_back(grad_norm);
  if (static_cast<int64_t>(losses_.size()) > config_.window) {
    losses_.pop_front();
    norms_.pop_front();
  }
  return j;
}

nlohmann::json SpikeGuard::to_json() const {
  return {{"losses", losses_}, {"norms", norms_}, {"skips", skips_}, {"judged", judged_}};
}

void SpikeGuard::restore(const nlohmann::json& state) {
  if (state.is_null()) return;  // a checkpoint from before the guard: start learning
  try {
    std::deque<double> losses = state.at("losses").get<std::deque<double>>();
    std::deque<double> norms = state.at("norms").get<std::deque<double>>();
    std::deque<int64_t> skips = state.at("skips").get<std::deque<int64_t>>();
    const int64_t judged = state.at("judged").get<int64_t>();
    GB_REQUIRE(losses.size() == norms.size(), "checkpoint: spike guard with ", losses.size(), " losses and ",
               norms.size(), " norms");
    // Another --spike-window: keep the newest that fit.
    while (static_cast<int64_t>(losses.size()) > config_.window) {
      losses.pop_front();
      norms.pop_front();
    }
    losses_ = std::move(losses);
    norms_ = std::move(norms);
    skips_ = std::move(skips);
    judged_ = judged;
  } catch (const nlohmann::json::exception& e) {
    throw InputError(str("checkpoint: malformed spike guard state (", e.what(), ")"));
  }
}

}  // namespace gradbox::worker

#pragma once
// Note [Spike guard]
// llm.c's outlier detector and YaLM's rollback, made safe for replicas that must stay identical.
// Each step about to be applied is judged by the z-scores of its loss and of its gradient norm
// (before clipping) against the last `window` applied steps (mean and population deviation,
// the deviation at least 5% of the mean so that a window that barely moves does not make noise
// a spike; nothing is judged until the window is full). Either z above --spike-z: the step is skipped,
// and its values stay out of the window. --spike-rollback K: the K-th skip within `window`
// judged steps rolls the run back to its newest checkpoint (weights, optimizer moments, loss
// scale) while the step count, and with it the data and the schedule, goes on: the batches
// since the checkpoint are skipped, as YaLM did. Without rollback, kResetAfter skips within a
// window mean the statistics no longer describe training (a curriculum step, a live change of
// the batch): the window is emptied and learnt again.
//
// Why replicas agree without a message: in per-step rounds every replica judges the agreed
// round's loss and the norm of the same averaged gradient with the same rule and the same window
// (replica state: in every checkpoint, so a joiner takes it with the weights), so all skip, or
// roll back at, the same round. The rollback target is the newest local checkpoint at a multiple
// of --checkpoint-interval, the step every member wrote one at; a member without that one (it
// joined later) takes its newest, and the replica check repairs the difference. In DiLoCo the
// guard judges inner steps, which are each worker's own; rollback is per-step only. Torch-free.
#include <cstdint>
#include <deque>

#include <nlohmann/json.hpp>

namespace gradbox::worker {

struct SpikeGuardConfig {
  double z = 0;          // 0: off
  int64_t window = 128;  // applied steps the statistics cover
  int64_t rollback_after = 0;  // skips within a window that roll back; 0: never
};

class SpikeGuard {
 public:
  static constexpr int64_t kResetAfter = 8;
  static constexpr double kMinRelativeDeviation = 0.05;  // of the window's mean (see z_score)

  enum class Verdict { apply, skip, roll_back };
  struct Judgement {
    Verdict verdict = Verdict::apply;
    double loss_z = 0, norm_z = 0;  // 0 until the window is full
  };

  explicit SpikeGuard(SpikeGuardConfig config);
  bool enabled() const { return config_.z > 0; }
  // A step about to be applied. Non-finite values are not judged (overflow skips them first).
  Judgement judge(double loss, double grad_norm);
  // After a rollback or a reset: no skips remembered (the window stays: it describes the state
  // rolled back to).
  void forget_skips() { skips_.clear(); }

  nlohmann::json to_json() const;             // for checkpoints
  void restore(const nlohmann::json& state);  // InputError on a malformed one

  size_t window_size() const { return losses_.size(); }

 private:
  static double z_score(const std::deque<double>& values, double x);
  SpikeGuardConfig config_;
  std::deque<double> losses_, norms_;  // applied steps, oldest first
  std::deque<int64_t> skips_;          // judged-step numbers of the skips within the window
  int64_t judged_ = 0;
};

}  // namespace gradbox::worker

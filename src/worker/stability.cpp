// The trainer's spike guard (Note [Spike guard] in worker/spike_guard.h): the verdict on a step
// about to be applied, and the rollback after repeated spikes.
#include <cstdio>

#include "common/error.h"
#include "common/log.h"
#include "worker/checkpoint.h"
#include "worker/trainer.h"

namespace gradbox::worker {
namespace {

const log::Logger& logger() {
  static const log::Logger instance("train");
  return instance;
}

std::string z_text(double z) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", z);
  return text;
}

}  // namespace

bool Trainer::passes_spike_guard(double loss, double grad_norm) {
  const SpikeGuard::Judgement j = spike_guard_.judge(loss, grad_norm);
  if (j.verdict == SpikeGuard::Verdict::apply) return true;
  const bool roll_back = j.verdict == SpikeGuard::Verdict::roll_back;
  spike_event_ = {{"loss_z", j.loss_z}, {"norm_z", j.norm_z}, {"action", roll_back ? "rolled back" : "skipped"}};
  logger().warn(str("step ", step_ + 1, ": a spike (loss ", loss, ", ", z_text(j.loss_z), " deviations above the last ",
                    config_.spike_window, " steps'; gradient norm ", grad_norm, ", ", z_text(j.norm_z),
                    "): the update is skipped"));
  if (roll_back) roll_back_after_spikes();
  return false;
}

void Trainer::roll_back_after_spikes() {
  const std::optional<std::filesystem::path> dir =
      find_rollback_checkpoint(config_.out_dir, step_, config_.checkpoint_interval);
  if (!dir) {
    logger().warn(str("step ", step_ + 1, ": ", config_.spike_rollback, " spikes within ", config_.spike_window,
                      " steps, but no checkpoint to roll back to: going on"));
    return;
  }
  // The state goes back; the step count does not, so the batches since the checkpoint (which
  // led here) are not seen again and the schedule goes on (YaLM's rollback and skip).
  CheckpointData ckpt = load_checkpoint(*dir);
  restore_parameters(ckpt, *flat_, *dir);
  optimizer_->load_moment_tensors(ckpt.moments, (*dir / "optimizer.safetensors").string());
  optimizer_->set_step_count(ckpt.state.optimizer_step);
  scaler_.restore(ckpt.state.loss_scale, ckpt.state.loss_scale_good_steps);
  spike_event_["rolled_back_to_step"] = ckpt.state.step;
  logger().warn(str("step ", step_ + 1, ": ", config_.spike_rollback, " spikes within ", config_.spike_window,
                    " steps: rolled back to ", dir->string(), " (step ", ckpt.state.step, "); the batches of steps ",
                    ckpt.state.step + 1, "-", step_ + 1, " are skipped"));
}

}  // namespace gradbox::worker

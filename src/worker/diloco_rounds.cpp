// The trainer's DiLoCo rounds (Note [DiLoCo rounds] in worker/outer_optimizer.h): inner steps,
// the emulated workers' own inner state, and the outer round at a round's end. The per-step
// strategy, checkpoints and the loop are in trainer.cpp.
#include <chrono>
#include <cmath>
#include <cstdio>

#include "common/error.h"
#include "common/log.h"
#include "exchange/token_weighted_sum.h"
#include "worker/trainer.h"

namespace gradbox::worker {
namespace {

const log::Logger& logger() {
  static const log::Logger instance("train");
  return instance;
}

std::string format_number(double value, const char* format) {
  char text[64];
  std::snprintf(text, sizeof text, format, value);
  return text;
}

}  // namespace

bool Trainer::round_ends_after_step(int64_t step) const {
  return step == config_.max_steps || (step - config_.sync_warmup_steps) % config_.inner_steps == 0;
}

int64_t Trainer::round_end_after(int64_t step) const {
  const int64_t rounds_before = (step - config_.sync_warmup_steps) / config_.inner_steps;
  return std::min(config_.max_steps, config_.sync_warmup_steps + (rounds_before + 1) * config_.inner_steps);
}

bool Trainer::mid_round() const {
  return in_diloco_phase() && step_ > config_.sync_warmup_steps && !round_ends_after_step(step_);
}

bool Trainer::interval_checkpoint_due() const {
  const int64_t every = config_.checkpoint_interval;
  if (every <= 0) return false;
  if (!in_diloco_phase() || step_ <= config_.sync_warmup_steps) return step_ % every == 0;
  if (mid_round()) return false;
  const int64_t round_start =
      config_.sync_warmup_steps + (step_ - config_.sync_warmup_steps - 1) / config_.inner_steps * config_.inner_steps;
  return step_ / every > round_start / every;
}

double Trainer::diloco_step(double lr) {
  model_->train();
  const uint64_t round = static_cast<uint64_t>(round_ + 1);
  const bool first_inner_step = step_ == config_.sync_warmup_steps || round_ends_after_step(step_);
  if (step_ == config_.sync_warmup_steps && round_tokens_ == 0) {
    // The first DiLoCo round starts from the (warmed-up) parameters, with no outer momentum yet.
    torch::NoGradGuard no_grad;
    outer_->global().copy_(flat_->params());
    outer_->momentum().zero_();
  }
  if (first_inner_step) apply_due_control(round);
  // A follower only applies the agreed outer step: its inner steps would be thrown away. Asked
  // every step: one let in during a round contributes the inner steps that are left.
  const bool contributes = !exchange_ || exchange_->will_contribute(round);
  LocalGradient local{std::numeric_limits<double>::quiet_NaN(), 0};
  if (contributes) {
    // The box opens at this worker's first inner step of the round (a resumed or late-admitted
    // worker's too: it has its own full box).
    if (round_box_of_ != round) round_box_of_ = round, round_box_opened_ = std::chrono::steady_clock::now();
    ++round_inner_steps_;
    if (!emulated_.empty()) {
      local = emulated_inner_step(lr);
    } else {
      local = compute_gradient(*train_sampler_, config_.micro_batch);
      apply_gradient(lr, loss_scale_);
    }
    round_tokens_ += static_cast<int64_t>(local.tokens);
    round_loss_sum_ += local.loss * static_cast<double>(local.tokens);
  }
  if (exchange_) exchange_->between_rounds(static_cast<uint64_t>(step_ + 1));
  const bool box_closed = contributes && config_.round_seconds > 0 && !round_ends_after_step(step_ + 1) &&
                          !another_fits(round_box_opened_, round_inner_steps_);
  if (box_closed) {
    // The round's other nominal steps are not taken: the schedule, the run's length and the
    // checkpoints count nominal steps, so every worker is at the same step after the round.
    const int64_t end = round_end_after(step_);
    logger().info(str("round ", round, ": ", round_inner_steps_, " inner step(s) fit in --round-seconds ",
                      config_.round_seconds, "; steps ", step_ + 2, "-", end, " are not taken"));
    step_advance_ = end - step_;
  }
  if (box_closed || round_ends_after_step(step_ + 1)) outer_round(round);
  return local.loss;
}

Trainer::LocalGradient Trainer::emulated_inner_step(double lr) {
  auto copy = [](torch::Tensor& to, const torch::Tensor& from) {
    torch::NoGradGuard no_grad;
    to.copy_(from);
  };
  if (replicas_.empty())  // every worker starts the first round from the same state
    for (size_t i = 0; i < emulated_.size(); ++i)
      replicas_.push_back({flat_->params().clone(), optimizer_->exp_avg().clone(), optimizer_->exp_avg_sq().clone(),
                           optimizer_->step_count(), 0});
  LocalGradient total{0.0, 0};
  for (size_t i = 0; i < emulated_.size(); ++i) {
    EmulatedReplica& r = replicas_[i];
    copy(flat_->params(), r.params);
    copy(optimizer_->exp_avg(), r.exp_avg);
    copy(optimizer_->exp_avg_sq(), r.exp_avg_sq);
    optimizer_->set_step_count(r.optimizer_step);
    const LocalGradient g = compute_gradient(emulated_samplers_[i], emulated_[i].micro_batch);
    apply_gradient(lr, loss_scale_);
    copy(r.params, flat_->params());
    copy(r.exp_avg, optimizer_->exp_avg());
    copy(r.exp_avg_sq, optimizer_->exp_avg_sq());
    r.optimizer_step = optimizer_->step_count();
    r.round_tokens += static_cast<int64_t>(g.tokens);
    total.loss += g.loss * static_cast<double>(g.tokens);
    total.tokens += g.tokens;
  }
  total.loss /= static_cast<double>(total.tokens);
  return total;
}

// The exchange's arithmetic (exchange::TokenWeightedSum over the replicas' deltas), so that an
// fp32 cluster run reproduces the emulation bit for bit.
void Trainer::emulated_average(torch::Tensor& delta, exchange::RoundResult& result) {
  std::vector<torch::Tensor> deltas(replicas_.size());
  exchange::TokenWeightedSum average;
  for (size_t i = 0; i < replicas_.size(); ++i) {
    outer_->pseudo_gradient(replicas_[i].params.cpu(), deltas[i]);
    average.add(emulated_[i].name, static_cast<uint64_t>(replicas_[i].round_tokens),
                exchange::TokenWeightedSum::floats(deltas[i].data_ptr<float>()));
    result.tokens += static_cast<uint64_t>(replicas_[i].round_tokens);
    replicas_[i].round_tokens = 0;
  }
  result.contributors = static_cast<int>(replicas_.size());
  if (!delta.defined() || delta.numel() != flat_->numel()) delta = torch::empty({flat_->numel()}, torch::kFloat32);
  average.sum_into(delta.data_ptr<float>(), static_cast<size_t>(delta.numel()));
}

void Trainer::outer_round(uint64_t round) {
  const auto start = std::chrono::steady_clock::now();
  exchange::RoundResult result;
  result.loss = round_tokens_ > 0 ? round_loss_sum_ / static_cast<double>(round_tokens_) : result.loss;
  if (!emulated_.empty()) {
    emulated_average(delta_, result);
  } else {
    outer_->pseudo_gradient(flat_->params(), delta_);
    if (exchange_) {
      const bool overflow = !std::isfinite(delta_.norm().item<double>());
      const exchange::LocalContribution mine{static_cast<uint64_t>(round_tokens_), result.loss, overflow};
      result = exchange_->all_reduce(round, delta_.data_ptr<float>(), static_cast<size_t>(delta_.numel()), mine);
    } else {
      result.tokens = static_cast<uint64_t>(round_tokens_);
      result.contributors = 1;
    }
  }
  if (result.resync) {
    reload_agreed_state();
    return;
  }
  if (result.control) pending_controls_[result.control->from_round] = *result.control;
  tokens_ += static_cast<int64_t>(result.tokens);
  round_tokens_ = 0;
  round_loss_sum_ = 0.0;
  // A round nobody contributed to (a worker resuming the run alone only followed it) has no
  // delta: an outer step would move the parameters by the momentum alone.
  const bool empty = result.tokens == 0;
  const bool skip = empty || result.skip || !std::isfinite(delta_.norm().item<double>());
  if (skip) {
    logger().warn(str("round ", round, empty ? ": nobody contributed" : ": a contributor's delta was not finite",
                      "; every replica goes back to the round's start"));
    outer_->discard_round(flat_->params());
  } else {
    outer_->step(delta_, flat_->params());
  }
  for (EmulatedReplica& r : replicas_) {
    torch::NoGradGuard no_grad;
    r.params.copy_(flat_->params());
  }
  round_ = static_cast<int64_t>(round);
  if (!skip)
    logger().info(str("round ", round, " (steps to ", step_ + step_advance_, "): outer step on the delta of ", result.contributors,
                      " worker(s), ", result.tokens, " tokens, round loss ", format_number(result.loss, "%.4f"),
                      ", waited ", format_number(result.wait_seconds, "%.2f"), " s"));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  metrics_->write({{"step", step_ + step_advance_}, {"round", round}, {"round_loss", result.loss},
                   {"round_tokens", result.tokens}, {"contributors", result.contributors},
                   {"inner_steps", round_inner_steps_}, {"round_seconds", seconds},
                   {"wait_seconds", result.wait_seconds}});
  round_inner_steps_ = 0;
  if (exchange_ && !skip) {
    const torch::Tensor state = replica_state();
    exchange_->after_update(round, state.data_ptr<float>(), static_cast<size_t>(state.numel()));
  }
}

}  // namespace gradbox::worker

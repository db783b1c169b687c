// The trainer's DiLoCo rounds (Note [DiLoCo rounds] in worker/outer_optimizer.h): inner steps,
// the emulated workers' own inner state, and the outer round at a round's end. The per-step
// strategy, checkpoints and the loop are in trainer.cpp.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <future>
#include <limits>

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

// Steady time in seconds: the clock the round policy's boxes are read on.
double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

std::string format_number(double value, const char* format) {
  char text[64];
  std::snprintf(text, sizeof text, format, value);
  return text;
}

}  // namespace

bool Trainer::round_ends_after_step(int64_t step) const {
  return step == config_.max_steps || (step - config_.sync_warmup_steps) % sync_period() == 0;
}

size_t Trainer::fragment_due_after(int64_t step) const {
  const int64_t period = sync_period();
  const int64_t rounds_before = (step - config_.sync_warmup_steps + period - 1) / period - 1;
  return static_cast<size_t>(rounds_before % static_cast<int64_t>(fragments_.size()));
}

int64_t Trainer::round_end_after(int64_t step) const {
  const int64_t rounds_before = (step - config_.sync_warmup_steps) / sync_period();
  return std::min(config_.max_steps, config_.sync_warmup_steps + (rounds_before + 1) * sync_period());
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
      config_.sync_warmup_steps + (step_ - config_.sync_warmup_steps - 1) / sync_period() * sync_period();
  return step_ / every > round_start / every;
}

double Trainer::diloco_step(double lr) {
  model_->train();
  const uint64_t round = next_round();
  const bool first_inner_step = step_ == config_.sync_warmup_steps || round_ends_after_step(step_);
  const bool nothing_yet = std::all_of(round_tokens_.begin(), round_tokens_.end(), [](int64_t t) { return t == 0; });
  if (step_ == config_.sync_warmup_steps && nothing_yet) {
    // The first DiLoCo round starts from the (warmed-up) parameters, with no outer momentum yet.
    torch::NoGradGuard no_grad;
    outer_->global().copy_(flat_->params());
    outer_->momentum().zero_();
  }
  if (first_inner_step) apply_due_control(round);
  // A follower only applies the agreed outer step: its inner steps would be thrown away. Asked
  // every step (not while a round runs in the background): one let in during a round
  // contributes the inner steps that are left.
  if (!in_flight_) contributing_ = !exchange_ || exchange_->will_contribute(round);
  const bool contributes = contributing_;
  LocalGradient local{std::numeric_limits<double>::quiet_NaN(), 0};
  if (contributes) {
    // The box opens at this worker's first inner step of the round; one entering a round
    // already open (Note [Late entry] in exchange/folder_exchange.h) has what is left of it.
    if (box_.opens_with(round)) {
      // Not while a round runs in the background (another thread owns the exchange then):
      // reanchor_box() times the box once that round is applied.
      const double age = exchange_ && !in_flight_ ? exchange_->round_age_s(round) : 0.0;
      const double now = now_s();
      box_.open(round, now, now - age);
    }
    box_.stepped();
    if (!emulated_.empty()) {
      local = emulated_inner_step(lr);
    } else {
      local = compute_gradient(*train_sampler_, config_.micro_batch);
      apply_gradient(lr, scaler_.scale(), local.loss);
    }
    // Every fragment's next Δ holds this step.
    for (size_t p = 0; p < fragments_.size(); ++p) {
      round_tokens_[p] += static_cast<int64_t>(local.tokens);
      round_loss_sum_[p] += local.loss * static_cast<double>(local.tokens);
    }
  }
  const int64_t done = step_ + 1;
  if (exchange_ && !in_flight_) exchange_->between_rounds(static_cast<uint64_t>(done));
  // Overlapped time-boxed rounds apply the round before as soon as it is agreed: its agreement
  // times this round's box (Note [Overlapped time-boxed rounds] in exchange/folder_exchange.h).
  const exchange::RoundRules rules = round_rules();
  if (in_flight_ && rules.apply_in_flight(done, in_flight_->apply_after_step, in_flight_agreed())) {
    apply_fragment_round();
    reanchor_box(round);
  }
  if (reloaded_) return local.loss;
  bool box_closed = contributes && !round_ends_after_step(done) && box_.closes(now_s());
  if (box_closed && in_flight_) {  // its agreement first: it may move the box
    apply_fragment_round();
    if (reloaded_) return local.loss;
    reanchor_box(round);
    box_closed = box_.closes(now_s());
  }
  if (box_closed) {
    // The round's other nominal steps are not taken: the schedule, the run's length and the
    // checkpoints count nominal steps, so every worker is at the same step after the round.
    const int64_t end = round_end_after(step_);
    logger().info(str("round ", round, ": ", box_.steps(), " inner step(s) fit in --round-seconds ",
                      config_.round_seconds, "; steps ", done + 1, "-", end, " are not taken"));
    step_advance_ = end - step_;
    outer_round(round, 0, config_.overlap_steps > 0);
  } else if (done == config_.max_steps) {
    // The run's end: every fragment's last steps go out, one round each, in their turn.
    if (in_flight_) apply_fragment_round();
    const size_t first = fragment_due_after(done);
    for (size_t i = 0; i < fragments_.size() && !reloaded_; ++i)
      outer_round(next_round(), (first + i) % fragments_.size());
  } else if (round_ends_after_step(done)) {
    // Overlapped boxes: H steps fit in this box before the round before was agreed. That round
    // is applied first, as when a box closes: the exchange serves one round at a time, and the
    // two rounds' deltas share delta_.
    if (in_flight_) {
      apply_fragment_round();
      if (reloaded_) return local.loss;
    }
    outer_round(round, fragment_due_after(done), config_.overlap_steps > 0);
  } else if (contributes) {
    offer_partial_delta(round);
  }
  return local.loss;
}

void Trainer::offer_partial_delta(uint64_t round) {
  if (!exchange_ || !round_rules().partial_due(box_.steps(), in_flight_.has_value())) return;
  // delta_ is free while no round is in flight; the round's own Δ overwrites it when it goes.
  outer_->pseudo_gradient(flat_->params(), fragments_[0], delta_);
  if (eager_) eager_->own_progress(fragments_[0], delta_);  // as the whole Δ
  if (!std::isfinite(delta_.norm().item<double>())) return;  // the whole Δ will say so
  const int64_t tokens = round_tokens_[0];
  const exchange::LocalContribution mine{static_cast<uint64_t>(tokens),
                                         tokens > 0 ? round_loss_sum_[0] / static_cast<double>(tokens) : 0.0};
  exchange_->offer_partial(round, delta_.data_ptr<float>(), static_cast<size_t>(delta_.numel()), mine);
}

exchange::RoundRules Trainer::round_rules() const {
  return {sync_period(), config_.round_seconds, config_.overlap_steps, config_.partial_every};
}

bool Trainer::in_flight_agreed() const {
  return !in_flight_->pending.valid() ||
         in_flight_->pending.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
}

// The box of `round` opens with its shard-0 agreement of the round before, once that is known.
void Trainer::reanchor_box(uint64_t round) {
  if (!round_rules().boxed_overlap() || !exchange_ || box_.opens_with(round)) return;
  const double age = exchange_->round_age_s(round);
  if (age > 0) box_.reopen(round, now_s() - age);
}

Trainer::LocalGradient Trainer::emulated_inner_step(double lr) {
  auto copy = [](torch::Tensor& to, const torch::Tensor& from) {
    torch::NoGradGuard no_grad;
    to.copy_(from);
  };
  if (replicas_.empty())  // every worker starts the first round from the same state
    for (size_t i = 0; i < emulated_.size(); ++i) {
      EmulatedReplica& r = replicas_.emplace_back();
      r.params = flat_->params().clone();
      r.exp_avg = optimizer_->exp_avg().clone();
      r.exp_avg_sq = optimizer_->exp_avg_sq().clone();
      r.optimizer_step = optimizer_->step_count();
      r.round_tokens.assign(fragments_.size(), 0);
      if (eager_) r.eager.emplace(flat_->numel(), fragments_.size(), outer_->hyper());
    }
  LocalGradient total{0.0, 0};
  for (size_t i = 0; i < emulated_.size(); ++i) {
    EmulatedReplica& r = replicas_[i];
    copy(flat_->params(), r.params);
    copy(optimizer_->exp_avg(), r.exp_avg);
    copy(optimizer_->exp_avg_sq(), r.exp_avg_sq);
    optimizer_->set_step_count(r.optimizer_step);
    const LocalGradient g = compute_gradient(emulated_samplers_[i], emulated_[i].micro_batch);
    // One guard cannot follow several replicas' streams: the emulation's inner steps go unjudged.
    apply_gradient(lr, scaler_.scale(), std::numeric_limits<double>::quiet_NaN());
    copy(r.params, flat_->params());
    copy(r.exp_avg, optimizer_->exp_avg());
    copy(r.exp_avg_sq, optimizer_->exp_avg_sq());
    r.optimizer_step = optimizer_->step_count();
    for (int64_t& tokens : r.round_tokens) tokens += static_cast<int64_t>(g.tokens);
    total.loss += g.loss * static_cast<double>(g.tokens);
    total.tokens += g.tokens;
  }
  total.loss /= static_cast<double>(total.tokens);
  return total;
}

// The exchange's arithmetic (exchange::TokenWeightedSum over the replicas' deltas), so that an
// fp32 cluster run reproduces the emulation bit for bit.
void Trainer::emulated_average(torch::Tensor& delta, exchange::RoundResult& result, size_t fragment,
                               bool in_background) {
  std::vector<torch::Tensor> deltas(replicas_.size());
  exchange::TokenWeightedSum average;
  for (size_t i = 0; i < replicas_.size(); ++i) {
    EmulatedReplica& r = replicas_[i];
    outer_->pseudo_gradient(r.params.cpu(), fragments_[fragment], deltas[i]);
    if (r.eager) r.eager->own_progress(fragments_[fragment], deltas[i]);
    const auto tokens = static_cast<uint64_t>(r.round_tokens[fragment]);
    average.add(emulated_[i].name, tokens, exchange::TokenWeightedSum::floats(deltas[i].data_ptr<float>()));
    result.tokens += tokens;
    r.round_tokens[fragment] = 0;
    r.own_tokens = tokens;
    if (in_background)  // each replica as a cluster's worker at outer_round
      r.sent = point_of_merge(r.eager ? &*r.eager : nullptr, fragment, deltas[i], tokens, r.params);
  }
  result.contributors = static_cast<int>(replicas_.size());
  const int64_t n = fragments_[fragment].numel;
  if (!delta.defined() || delta.numel() != n) delta = torch::empty({n}, torch::kFloat32);
  average.sum_into(delta.data_ptr<float>(), static_cast<size_t>(delta.numel()));
}

torch::Tensor Trainer::point_of_merge(EagerOuter* eager, size_t fragment, const torch::Tensor& own_delta,
                                     uint64_t tokens, torch::Tensor& params) {
  const Fragment& f = fragments_[fragment];
  if (eager && eager->send(fragment, f, own_delta, tokens, outer_->global(), params))
    return gather_fragment(outer_->global(), f);  // the merge keeps the offset and the steps after it
  return gather_fragment(params, f);               // the merge keeps the steps taken after the send
}

void Trainer::outer_round(uint64_t round, size_t fragment, bool in_background) {
  FragmentRound r;
  r.round = round;
  r.fragment = fragment;
  // A box that closed early skips nominal steps: such a round is applied once agreed (or when
  // the next box closes), not after a count of steps (the round policy says so).
  r.apply_after_step = in_background ? round_rules().apply_after_step(step_ + 1) : step_ + 1;
  r.inner_steps = box_.steps();
  r.started = std::chrono::steady_clock::now();
  const int64_t tokens = round_tokens_[fragment];
  r.loss = tokens > 0 ? round_loss_sum_[fragment] / static_cast<double>(tokens) : r.ready.loss;
  r.ready.loss = r.loss;
  if (!emulated_.empty()) {
    emulated_average(delta_, r.ready, fragment, in_background);
  } else {
    outer_->pseudo_gradient(flat_->params(), fragments_[fragment], delta_);
    if (eager_) eager_->own_progress(fragments_[fragment], delta_);
    const bool overflow = !std::isfinite(delta_.norm().item<double>());
    r.own_tokens = static_cast<uint64_t>(tokens);
    if (in_background) {
      // What the late step merges against: the steps taken after it are kept (Note [Streaming
      // fragments]; with the eager rule, its offset too).
      r.sent = point_of_merge(overflow ? nullptr : eager_ ? &*eager_ : nullptr, fragment, delta_, r.own_tokens,
                              flat_->params());
    }
    if (exchange_) {
      const exchange::LocalContribution mine{static_cast<uint64_t>(tokens), r.loss, overflow,
                                             static_cast<uint32_t>(fragment)};
      if (in_background) {
        r.pending = std::async(std::launch::async, [this, round, mine] {
          return exchange_->all_reduce(round, delta_.data_ptr<float>(), static_cast<size_t>(delta_.numel()), mine);
        });
      } else {
        r.ready = waiting_on_exchange([&] {
          return exchange_->all_reduce(round, delta_.data_ptr<float>(), static_cast<size_t>(delta_.numel()), mine);
        });
      }
    } else {
      r.ready.tokens = static_cast<uint64_t>(tokens);
      r.ready.contributors = 1;
    }
  }
  // The steps from here on count for the fragment's next round.
  round_tokens_[fragment] = 0;
  round_loss_sum_[fragment] = 0.0;
  box_.sent();
  in_flight_ = std::move(r);
  if (!in_background) apply_fragment_round();
}

void Trainer::apply_fragment_round() {
  FragmentRound r = std::move(*in_flight_);
  in_flight_.reset();
  const exchange::RoundResult result = r.pending.valid() ? waiting_on_exchange([&] { return r.pending.get(); }) : r.ready;
  if (result.resync) {
    reload_agreed_state();
    return;
  }
  if (result.control) pending_controls_.add(*result.control);
  // Every step is in one round of each fragment: fragment 0's rounds count each token once.
  if (r.fragment == 0) tokens_ += static_cast<int64_t>(result.tokens);
  const Fragment& fragment = fragments_[r.fragment];
  const torch::Tensor* sent = r.sent.defined() ? &r.sent : nullptr;
  // A round nobody contributed to (a worker resuming the run alone only followed it) has no
  // delta: an outer step would move the parameters by the momentum alone.
  const bool empty = result.tokens == 0;
  const bool skip = empty || result.skip || !std::isfinite(delta_.norm().item<double>());
  if (skip) {
    logger().warn(str("round ", r.round, empty ? ": nobody contributed" : ": a contributor's delta was not finite",
                      "; every replica goes back to the round's start"));
    outer_->discard_round(fragment, flat_->params(), sent);
  } else {
    outer_->step(delta_, fragment, flat_->params(), sent);
  }
  if (!replicas_.empty()) {
    // The emulation's workers each merge as a cluster's worker does in step() above; flat_ then
    // holds the first one's parameters, as a cluster's first worker evaluates its own.
    for (EmulatedReplica& e : replicas_) {
      outer_->rebase(fragment, e.params, e.sent.defined() ? &e.sent : nullptr);
      if (e.eager && !e.sent.defined()) e.eager->settle(fragment);
      if (e.eager && !skip) e.eager->agreed(r.fragment, e.own_tokens, result.tokens);
      e.sent = torch::Tensor();
    }
    torch::NoGradGuard no_grad;
    flat_->params().copy_(replicas_[0].params);
  } else if (eager_ && !sent) {
    eager_->settle(fragment);  // a round applied at once left θ_g
  }
  if (replicas_.empty() && eager_ && !skip) {
    // This worker's share of the average: what the agreement names (a partial Δ of its stood in
    // for it: its tokens, with the whole Δ as the nearest known), else all of its tokens.
    eager_->agreed(r.fragment, exchange::own_tokens_agreed(result, config_.worker, r.own_tokens), result.tokens);
  }
  round_ = static_cast<int64_t>(r.round);
  const std::string part = fragments_.size() > 1 ? str(" fragment ", r.fragment, ":") : "";
  if (!skip)
    logger().info(str("round ", r.round, " (steps to ", step_ + step_advance_, "):", part, " outer step on the delta of ",
                      result.contributors, " worker(s), ", result.tokens, " tokens, round loss ",
                      format_number(result.loss, "%.4f"), ", waited ", format_number(result.wait_seconds, "%.2f"), " s"));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - r.started).count();
  nlohmann::json line = {{"step", step_ + step_advance_}, {"round", r.round}, {"round_loss", result.loss},
                         {"round_tokens", result.tokens}, {"contributors", result.contributors},
                         {"inner_steps", r.inner_steps}, {"round_seconds", seconds},
                         {"wait_seconds", result.wait_seconds}, {"bytes_written", result.bytes_written}};
  if (fragments_.size() > 1) line["fragment"] = r.fragment;
  // Note [Partial deltas] in exchange/folder_exchange.h: workers whose Δ so far stood in.
  const auto partial = std::count_if(result.contributions.begin(), result.contributions.end(),
                                     [](const exchange::AgreedContribution& c) { return c.partial; });
  if (partial > 0) line["partial_contributors"] = partial;
  metrics_->write(line);
  if (exchange_ && !skip) report_state_after(r.round);
}

}  // namespace gradbox::worker

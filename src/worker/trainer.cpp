// Over 700 lines because Trainer still holds every sync strategy's state; issue 41 splits it
// into a session and strategies.
// The training loop: per-step rounds, checkpoints, joining and repair. DiLoCo rounds are in
// diloco_rounds.cpp (Note [DiLoCo rounds] in worker/outer_optimizer.h).
#include "worker/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <utility>

#include <unistd.h>

#include "common/atomic_file.h"
#include "common/checksum.h"
#include "common/disk_space.h"
#include "common/error.h"
#include "common/json_file.h"
#include "common/log.h"
#include "exchange/token_weighted_sum.h"
#include "model/hf.h"
#include "worker/checkpoint.h"

namespace gradbox::worker {
namespace {

using Clock = std::chrono::steady_clock;

const log::Logger& logger() {
  static const log::Logger instance("train");
  return instance;
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Whether going from step `before` to `after` passed a multiple of `every` (a time-boxed DiLoCo
// round moves several steps at once).
bool passed_multiple(int64_t before, int64_t after, int64_t every) {
  return after / every > before / every;
}

std::string format_duration(double seconds) {
  const auto total = static_cast<int64_t>(seconds + 0.5);
  if (total >= 3600) return str(total / 3600, "h", (total % 3600) / 60, "m");
  if (total >= 60) return str(total / 60, "m", total % 60, "s");
  return str(total, "s");
}

std::string format_number(double value, const char* format) {
  char text[64];
  std::snprintf(text, sizeof text, format, value);
  return text;
}

// Dropout is changeable between restarts (and live, later): it is not part of a model's identity.
nlohmann::json identity(nlohmann::json model_config) {
  model_config.erase("dropout");
  return model_config;
}

// The run keeps its own copy of the tokenizer so that `sample` and `export` need only the run.
void copy_tokenizer(const std::filesystem::path& data_dir, const std::filesystem::path& out_dir) {
  const auto source = data_dir / "tokenizer";
  const auto target = out_dir / "tokenizer";
  if (!std::filesystem::is_directory(source) || std::filesystem::exists(target)) return;
  const auto temp = out_dir / str("tokenizer.tmp.", ::getpid());
  std::filesystem::remove_all(temp);
  std::filesystem::copy(source, temp, std::filesystem::copy_options::recursive);
  std::filesystem::rename(temp, target);
}

}  // namespace

model::ModelConfig resolve_model_config(const TrainConfig& config, const data::DatasetInfo& data) {
  model::ModelConfig mc;
  const bool from_file = config.model.ends_with(".json") || std::filesystem::is_regular_file(config.model);
  if (from_file) {
    mc = model::ModelConfig::from_json(read_json_file(config.model), config.model);
    GB_REQUIRE(config.block_size <= mc.block_size, "--block-size ", config.block_size, ": larger than ", config.model,
               "'s block_size ", mc.block_size);
  } else {
    mc = model::ModelConfig::preset(config.model);
    mc.vocab_size = data.vocab_size;  // a preset takes the data's tokenizer
    if (config.block_size > 0) mc.block_size = config.block_size;
  }
  GB_REQUIRE(mc.vocab_size >= data.vocab_size, "--model ", config.model, ": vocab_size ", mc.vocab_size,
             " is smaller than the data's ", data.vocab_size, " (", data.dir.string(), ")");
  mc.dropout = config.dropout;
  mc.validate();
  return mc;
}

Trainer::Trainer(TrainConfig config) : config_(std::move(config)) {
  config_.validate();
  runtime_ = resolve_runtime(config_.device, config_.precision, config_.threads, config_.local_workers);
  scaler_ = LossScaler(runtime_.precision == Precision::fp16);
  spike_guard_ = SpikeGuard(SpikeGuardConfig{config_.spike_z, config_.spike_window, config_.spike_rollback});
  data_info_ = data::read_dataset_info(config_.data_dir);
  train_file_.emplace(data::TokenFile::open(data_info_, "train"));
  if (data_info_.val_tokens > 0) val_file_.emplace(data::TokenFile::open(data_info_, "val"));

  // LibTorch seeds its default generator from the OS: seed it, or dropout differs run to run.
  torch::manual_seed(config_.seed);
  if (config_.init_from.empty()) {
    model_ = model::make_model(resolve_model_config(config_, data_info_), config_.seed);
  } else {
    model_ = model::import_hf(config_.init_from);
    GB_REQUIRE(model_->config().vocab_size >= data_info_.vocab_size, "--init-from ", config_.init_from.string(),
               ": vocab_size ", model_->config().vocab_size, " is smaller than the data's ", data_info_.vocab_size);
    model_->set_dropout(config_.dropout);
  }
  const model::ModelConfig& mc = model_->config();
  const int64_t block = config_.block_size > 0 ? config_.block_size : mc.block_size;
  GB_REQUIRE(block <= mc.block_size, "--block-size ", block, ": the model's block_size is ", mc.block_size);
  model_->set_activation_checkpointing(model::ActivationCheckpointing::parse(config_.activation_checkpointing));
  model_->to(runtime_.device);
  flat_ = std::make_unique<FlatParameters>(*model_, [&](const std::string& name) { return model_->is_no_decay(name); });
  model_->set_kept_grad_buffers(true);  // every .grad is a view into flat_ now
  optimizer_ = std::make_unique<Optimizer>(
      *flat_, OptimizerHyper{config_.optimizer, config_.beta1, config_.beta2, config_.eps, config_.moments});
  schedule_ = LrSchedule{config_.lr, config_.min_lr, config_.warmup_steps, config_.max_steps};
  if (config_.sync == SyncMode::diloco) {
    outer_ = std::make_unique<OuterOptimizer>(
        flat_->params(), OuterHyper{config_.outer_lr, config_.outer_momentum, config_.outer_nesterov});
    fragments_ = partition_fragments(flat_->segments(), config_.fragments);
    round_tokens_.assign(fragments_.size(), 0);
    round_loss_sum_.assign(fragments_.size(), 0.0);
    box_ = exchange::RoundBox(round_rules());
    if (config_.overlap_steps > 0 && config_.late_outer_step == LateOuterStep::eager)
      eager_.emplace(flat_->numel(), fragments_.size(), outer_->hyper());
    if (fragments_.size() > 1) {
      std::string sizes;
      for (const Fragment& f : fragments_) sizes += str(sizes.empty() ? "" : ", ", f.numel);
      logger().info(str("streaming DiLoCo: ", fragments_.size(), " fragments of ", sizes, " parameters, one every ",
                        sync_period(), " steps, overlapped with ", config_.overlap_steps, " inner step(s)"));
    }
  }

  flags_ = config_;
  std::filesystem::create_directories(config_.out_dir);
  if (std::optional<std::filesystem::path> latest = find_latest_checkpoint(config_.out_dir)) {
    const std::string writer = restore(*latest, mc);
    // A folder checkpoint adopted at a join (and not yet replaced by one of this worker's own)
    // holds its publisher's progress in its rounds: this worker takes only the run's state.
    if (outer_ && writer != config_.worker) {
      logger().info(str(latest->string(), " was written by ", writer.empty() ? "an unnamed worker" : writer,
                        ": resuming from the run's state (θ_g), without that worker's progress in its rounds"));
      keep_only_the_runs_state();
    }
    resumed_ = true;
  }

  // Each worker draws from its own stream: no coordination of data is needed.
  const std::string stream = config_.worker.empty() ? "train" : "train/" + config_.worker;
  train_sampler_.emplace(*train_file_, block, config_.seed, stream_id(stream));
  curriculum_ = Curriculum::parse(config_.curriculum, block);
  if (!config_.emulate_workers.empty()) {
    emulated_ = parse_emulated_workers(config_.emulate_workers);
    // Each emulated worker's inner state lives in memory only (a test reference, not a run).
    GB_REQUIRE(!outer_ || !resumed_, "--emulate-workers with --sync diloco: ", config_.out_dir.string(),
               " holds a checkpoint; the emulation starts from scratch only");
    emulated_samplers_.reserve(emulated_.size());
    for (const EmulatedWorker& w : emulated_)
      emulated_samplers_.emplace_back(*train_file_, block, config_.seed, stream_id("train/" + w.name));
  }
  if (val_file_ && val_file_->size() > block) val_sampler_.emplace(*val_file_, block, config_.seed, stream_id("val"));
  metrics_ = std::make_unique<MetricsWriter>(config_.out_dir / "metrics.jsonl");
  write_file_atomic(config_.out_dir / "train_config.json", config_.to_json().dump(2));
  write_file_atomic(config_.out_dir / "model_config.json", mc.to_json().dump(2));
  copy_tokenizer(config_.data_dir, config_.out_dir);
  logger().info(str("config: ", config_.to_json().dump()));
  logger().info(str("model: ", mc.to_json().dump(), " (", flat_->numel(), " parameters)"));
}

std::string Trainer::restore(const std::filesystem::path& dir, const model::ModelConfig& mc) {
  CheckpointData ckpt = load_checkpoint(dir);
  GB_REQUIRE(identity(ckpt.state.model_config) == identity(mc.to_json()), "--model ", config_.model, ": run folder ",
             config_.out_dir.string(), " holds a checkpoint of a different model (", dir.string(),
             "); use another --out or the same model");
  restore_parameters(ckpt, *flat_, dir);
  optimizer_->load_moment_tensors(ckpt.moments, (dir / "optimizer.safetensors").string());
  optimizer_->set_step_count(ckpt.state.optimizer_step);
  scaler_.restore(ckpt.state.loss_scale, ckpt.state.loss_scale_good_steps);
  spike_guard_.restore(ckpt.state.spike_guard);
  step_ = ckpt.state.step;
  round_ = ckpt.state.round;
  tokens_ = ckpt.state.tokens;
  if (outer_) {
    torch::NoGradGuard no_grad;
    // A checkpoint without outer state (a per-step run's) starts DiLoCo from its parameters;
    // one that saved θ_g once has it as its parameters.
    outer_->global().copy_(ckpt.outer && ckpt.outer->global.defined() ? ckpt.outer->global : flat_->params());
    if (ckpt.outer) outer_->momentum().copy_(ckpt.outer->momentum);
    else outer_->momentum().zero_();
    const size_t fragments = fragments_.size();
    round_tokens_.assign(fragments, 0);
    round_loss_sum_.assign(fragments, 0.0);
    if (ckpt.outer && ckpt.outer->round_tokens.size() == fragments) {
      round_tokens_ = ckpt.outer->round_tokens;
      round_loss_sum_ = ckpt.outer->round_loss_sum;
    } else if (ckpt.outer) {  // another --fragments: every fragment's round restarts from the checkpoint's progress
      round_tokens_.assign(fragments, ckpt.outer->round_tokens[0]);
      round_loss_sum_.assign(fragments, ckpt.outer->round_loss_sum[0]);
    }
    box_.forget();  // a resumed round opens a new box
    if (eager_) {
      eager_->forget();
      const bool kept = ckpt.outer && ckpt.outer->eager_offset.defined() && ckpt.outer->eager_tokens.size() == fragments;
      if (kept) {
        const std::pair<const char*, const torch::Tensor*> saved[] = {
            {"outer.eager_offset", &ckpt.outer->eager_offset},
            {"outer.eager_momentum", &ckpt.outer->eager_momentum},
            {"outer.eager_sent_share", &ckpt.outer->eager_sent_share}};
        torch::Tensor* into[] = {&eager_->offset(), &eager_->momentum(), &eager_->sent_share()};
        for (size_t i = 0; i < 3; ++i) {
          const torch::Tensor& t = *saved[i].second;
          GB_REQUIRE(t.scalar_type() == torch::kFloat32 && t.numel() == flat_->numel(), dir.string(), ": tensor '",
                     saved[i].first, "' holds ", t.numel(), " values of ", t.scalar_type(), "; the model has ",
                     flat_->numel(), " fp32 parameters");
          into[i]->copy_(t.reshape({-1}));
        }
        eager_->others_tokens() = ckpt.outer->eager_tokens;
      }
    } else if (ckpt.outer && ckpt.outer->eager_offset.defined() && ckpt.outer->eager_offset.numel() == flat_->numel()) {
      // Saved under the eager rule, resumed under another: the offset is not this worker's progress.
      flat_->params().sub_(ckpt.outer->eager_offset.reshape({-1}).to(flat_->params().device()));
    }
  }
  restore_rng(ckpt);  // last: model construction above consumed random numbers
  pending_controls_.clear();
  apply_control(ckpt.state.control.dump(), "from the checkpoint");
  logger().info(str("resumed from ", dir.string(), " at step ", step_));
  return ckpt.state.train_config.value("worker", std::string());
}

void Trainer::apply_control(const std::string& json, const char* why) {
  const exchange::LiveControl before = exchange::LiveControl::parse(control_json_, "live control");
  const exchange::LiveControl after = exchange::LiveControl::parse(json, "live control");
  control_json_ = after.to_json().dump();
  config_.micro_batch = after.micro_batch.value_or(flags_.micro_batch);
  config_.grad_accum = after.grad_accum.value_or(base_grad_accum());
  config_.weight_decay = after.weight_decay.value_or(flags_.weight_decay);
  config_.dropout = after.dropout.value_or(flags_.dropout);
  lr_multiplier_ = after.lr_multiplier.value_or(1.0);
  model_->set_dropout(config_.dropout);
  if (!(before == after))
    logger().info(str("step ", step_ + 1, ": live control ", why, ": ", exchange::describe_change(before, after)));
}

int64_t Trainer::base_grad_accum() const {
  return stage_ && stage_->grad_accum ? *stage_->grad_accum : flags_.grad_accum;
}

void Trainer::apply_curriculum(int64_t step) {
  const std::optional<CurriculumStage> stage = curriculum_.at(step);
  if (stage == stage_) return;
  stage_ = stage;
  block_now_ = stage ? stage->block : 0;
  const exchange::LiveControl live = exchange::LiveControl::parse(control_json_, "live control");
  config_.grad_accum = live.grad_accum.value_or(base_grad_accum());
  logger().info(str("step ", step, ": curriculum stage: sequences of ", block_now_ > 0 ? block_now_ : train_sampler_->block_size(),
                    " tokens, ", config_.grad_accum, " micro-batch(es) a step"));
}

// Every replica switches at the control's from_round, before computing that round.
void Trainer::apply_due_control(uint64_t round) {
  const std::optional<exchange::AgreedControl> due = pending_controls_.take_due(round);
  if (!due || due->json == control_json_) return;
  apply_control(due->json, str("version ", due->version, " from round ", due->from_round).c_str());
  metrics_->write({{"step", step_ + 1}, {"control", nlohmann::json::parse(control_json_)}});
}

Trainer::LocalGradient Trainer::compute_gradient(const BatchSampler& sampler, int64_t micro_batch,
                                                 const BeforeLastBackward& before_last_backward) {
  flat_->zero_grad();
  const int64_t accum = config_.grad_accum;  // time-boxed per-step rounds: the most they take
  const bool boxed = config_.round_seconds > 0 && config_.sync == SyncMode::gradient;
  const auto start = Clock::now();
  // The losses add up on the device, in double: one read per step rather than a synchronising
  // .item() per micro-batch (a time box reads the clock after each one, so it syncs anyway).
  torch::Tensor loss_total = torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat64).device(runtime_.device));
  // --inject-spike-steps: this step's batches act as poisoned ones (a test of Note [Spike guard]).
  const auto& poisoned = config_.inject_spike_steps;
  const bool poison = std::find(poisoned.begin(), poisoned.end(), step_ + 1) != poisoned.end();
  const int64_t block = block_now_ > 0 ? block_now_ : sampler.block_size();  // Note [Curriculum]
  int64_t micro = 0;
  while (micro < accum) {
    Batch batch = sampler.batch(step_ * accum + micro, micro_batch, block_now_);
    torch::Tensor inputs = batch.inputs.to(runtime_.device);
    torch::Tensor targets = batch.targets.to(runtime_.device);
    torch::Tensor loss;
    {
      AutocastScope autocast(runtime_);
      loss = model_->loss(inputs, targets, config_.lm_head_chunk);
    }
    if (poison) loss = loss * config_.inject_spike_factor;
    loss_total.add_(loss.detach().to(torch::kFloat64));
    if (before_last_backward && micro + 1 == accum)
      before_last_backward(loss_total.item<double>() / static_cast<double>(accum),
                           static_cast<uint64_t>(accum * micro_batch * block));
    (loss * (scaler_.scale() / static_cast<double>(accum))).backward();
    ++micro;
    if (boxed) {
      if (runtime_.device.is_cuda()) torch::cuda::synchronize();
      if (!exchange::another_fits(seconds_since(start), seconds_since(start), micro, config_.round_seconds)) break;
    }
  }
  const double loss_sum = loss_total.item<double>();
  // The mean over the micro-batches taken; the exchange weights it by their tokens.
  if (micro < accum) flat_->grads().mul_(static_cast<double>(accum) / static_cast<double>(micro));
  micro_batches_ = micro;
  return {loss_sum / static_cast<double>(micro), static_cast<uint64_t>(micro * micro_batch * block)};
}

Trainer::LocalGradient Trainer::emulated_gradient() {
  std::vector<torch::Tensor> grads;
  std::vector<LocalGradient> parts;
  uint64_t total = 0;
  for (size_t i = 0; i < emulated_.size(); ++i) {
    parts.push_back(compute_gradient(emulated_samplers_[i], emulated_[i].micro_batch));
    grads.push_back(flat_->grads().to(torch::kCPU, /*non_blocking=*/false, /*copy=*/true));
    total += parts.back().tokens;
  }
  // The exchange's own arithmetic (exchange::TokenWeightedSum), so that an fp32 cluster run
  // reproduces this bit for bit.
  exchange::TokenWeightedSum average;
  LocalGradient result{0.0, total};
  for (size_t i = 0; i < emulated_.size(); ++i) {
    average.add(emulated_[i].name, parts[i].tokens, exchange::TokenWeightedSum::floats(grads[i].data_ptr<float>()));
    result.loss += parts[i].loss * static_cast<double>(parts[i].tokens);
  }
  result.loss /= static_cast<double>(total);
  torch::Tensor sum = torch::empty({flat_->numel()}, torch::kFloat32);
  average.sum_into(sum.data_ptr<float>(), static_cast<size_t>(sum.numel()));
  flat_->grads().copy_(sum);
  return result;
}

void Trainer::skip_step(const char* why) {
  // Never let a NaN or Inf into the weights: skip the step (fp16 also backs off its scale).
  if (scaler_.dynamic()) {
    scaler_.overflowed();
    logger().warn(str("step ", step_ + 1, ": ", why, ", skipped; loss scale now ", scaler_.scale()));
  } else {
    logger().warn(str("step ", step_ + 1, ": ", why, ", step skipped"));
  }
}

double Trainer::train_step(double lr) {
  if (in_diloco_phase()) return diloco_step(lr * config_.inner_lr_scale);
  model_->train();
  const uint64_t round = static_cast<uint64_t>(round_ + 1);
  apply_due_control(round);
  // A follower (joining, catching up) only applies the agreed average: no gradient needed.
  const bool contributes = !exchange_ || overlap_ || exchange_->will_contribute(round);
  LocalGradient local;
  if (!contributes) {
    flat_->zero_grad();
  } else if (backward_stream_) {
    if (std::optional<exchange::RoundResult> result = streamed_round(round, local)) return apply_round(*result, round, lr);
  } else {
    local = emulated_.empty() ? compute_gradient(*train_sampler_, config_.micro_batch) : emulated_gradient();
  }
  if (!exchange_) {
    tokens_ += static_cast<int64_t>(local.tokens);
    apply_gradient(lr, scaler_.scale(), local.loss);
    return local.loss;
  }

  // Peers weight contributions by tokens, so they must see unscaled gradients.
  torch::Tensor grads = flat_->grads();
  const bool overflow = !std::isfinite(gradient_norm(*flat_));
  if (!overflow && scaler_.scale() != 1.0) grads.div_(scaler_.scale());
  const exchange::LocalContribution mine{local.tokens, local.loss, overflow};

  if (!overlap_) {
    const bool on_host = grads.device().is_cpu();
    if (!on_host) host_buffer(0, grads).copy_(grads);
    torch::Tensor& host = on_host ? grads : exchange_buffers_[0];
    const exchange::RoundResult result = waiting_on_exchange(
        [&] { return exchange_->all_reduce(round, host.data_ptr<float>(), static_cast<size_t>(host.numel()), mine); });
    if (!on_host) grads.copy_(host);
    return apply_round(result, round, lr);
  }

  // Overlap: this step's gradient goes out in the background while the update applied now is
  // the previous round's average (a one-step-delayed update). Two host buffers alternate.
  std::optional<exchange::RoundResult> previous = finish_pending_round();
  // The buffer's last round (two steps ago) is finished by now.
  torch::Tensor& send = host_buffer(round % 2, grads);
  send.copy_(grads);
  if (previous) grads.copy_(exchange_buffers_[(round + 1) % 2]);
  const double loss = previous ? apply_round(*previous, round - 1, lr) : local.loss;
  if (reloaded_) return loss;  // this step's gradient belongs to the abandoned state
  pending_round_ = std::async(std::launch::async, [this, round, mine, &send] {
    return exchange_->all_reduce(round, send.data_ptr<float>(), static_cast<size_t>(send.numel()), mine);
  });
  return loss;
}

std::optional<exchange::RoundResult> Trainer::streamed_round(uint64_t round, LocalGradient& local) {
  std::unique_ptr<exchange::StreamedRound> streamed;
  torch::Tensor grads = flat_->grads();
  local = compute_gradient(*train_sampler_, config_.micro_batch, [&](double loss, uint64_t tokens) {
    // Its header waits for every member to arrive: exchange time, as the round's end is.
    streamed = waiting_on_exchange([&] {
      return exchange_->begin_streamed_round(round, grads.data_ptr<float>(), static_cast<size_t>(grads.numel()),
                                             backward_stream_->parts(), {tokens, loss, false},
                                             static_cast<float>(1.0 / scaler_.scale()));
    });
    backward_stream_->attach(streamed.get());
  });
  backward_stream_->detach();
  if (!streamed) {
    // The exchange cannot stream: the gradient is computed, and goes the usual way from now on.
    backward_stream_.reset();
    return std::nullopt;
  }
  return waiting_on_exchange([&] { return streamed->finish(); });
}

torch::Tensor& Trainer::host_buffer(size_t i, const torch::Tensor& like) {
  // Kept across steps: a fresh tensor of the model's size each step would cost its pages'
  // zeroing on the compute thread.
  torch::Tensor& buffer = exchange_buffers_[i];
  if (!buffer.defined() || buffer.numel() != like.numel()) buffer = torch::empty(like.sizes(), like.options().device(torch::kCPU));
  return buffer;
}

std::optional<exchange::RoundResult> Trainer::finish_pending_round() {
  if (!pending_round_.valid()) return std::nullopt;
  return waiting_on_exchange([&] { return pending_round_.get(); });
}

double Trainer::apply_round(const exchange::RoundResult& result, uint64_t round, double lr) {
  if (result.resync) {
    reload_agreed_state();
    return std::numeric_limits<double>::quiet_NaN();
  }
  if (result.control) pending_controls_.add(*result.control);
  step_round_ = StepRound{result.contributors, result.bytes_written};
  tokens_ += static_cast<int64_t>(result.tokens);
  if (result.skip) {
    // Some worker of the agreed set overflowed: every replica skips this round together.
    last_grad_norm_ = std::numeric_limits<double>::infinity();
    skip_step("a contributor's gradient overflowed");
    return result.loss;
  }
  if (apply_gradient(lr, 1.0, result.loss)) report_state_after(round);
  return result.loss;
}

void Trainer::report_state_after(uint64_t round) {
  if (!exchange_->wants_state_after(round)) return;
  const torch::Tensor state = replica_state();
  exchange_->after_update(round, state.data_ptr<float>(), static_cast<size_t>(state.numel()));
}

const torch::Tensor& Trainer::agreed_parameters() const {
  GB_CHECK(outer_, "agreed_parameters: not a DiLoCo run");
  const bool before_first_round =
      step_ <= config_.sync_warmup_steps &&
      std::all_of(round_tokens_.begin(), round_tokens_.end(), [](int64_t t) { return t == 0; });
  return before_first_round ? flat_->params() : outer_->global();
}

torch::Tensor Trainer::replica_state() const {
  if (outer_) return torch::cat({agreed_parameters().to(torch::kCPU), outer_->momentum().to(torch::kCPU)});
  return flat_->params().device().is_cpu() ? flat_->params() : flat_->params().to(torch::kCPU);
}

uint64_t Trainer::replica_state_checksum() const {
  const torch::Tensor state = replica_state();
  return checksum64(state.data_ptr<float>(), static_cast<size_t>(state.numel()) * sizeof(float));
}

bool Trainer::apply_gradient(double lr, double grad_scale, double loss) {
  const double scaled_norm = gradient_norm(*flat_);
  if (!std::isfinite(scaled_norm)) {
    last_grad_norm_ = scaled_norm;
    skip_step(runtime_.precision == Precision::fp16 ? "gradient overflow" : "non-finite gradient norm");
    return false;
  }
  const double norm = scaled_norm / grad_scale;
  if (!passes_spike_guard(loss, norm)) {
    last_grad_norm_ = norm;
    return false;
  }
  const double clip = (config_.grad_clip > 0 && norm > config_.grad_clip) ? config_.grad_clip / (norm + 1e-6) : 1.0;
  optimizer_->step(lr * lr_multiplier_, config_.weight_decay, clip / grad_scale);
  scaler_.applied();
  last_grad_norm_ = norm;
  return true;
}

void Trainer::drain_exchange(double lr) {
  if (in_flight_) apply_fragment_round();  // a checkpoint holds θ_g after every round sent
  if (std::optional<exchange::RoundResult> last = finish_pending_round()) {
    flat_->grads().copy_(exchange_buffers_[static_cast<uint64_t>(step_) % 2]);
    apply_round(*last, static_cast<uint64_t>(step_), lr);
  }
}

void Trainer::join_run(std::unique_ptr<exchange::GradientExchange> exchange, bool overlap) {
  const exchange::JoinPlan plan = exchange->join(config_.out_dir, resumed_ ? round_ : -1);
  if (plan.checkpoint) adopt_fetched(*plan.checkpoint);
  attach_exchange(std::move(exchange), overlap);
  {
    torch::NoGradGuard no_grad;
    torch::Tensor params = flat_->params().to(torch::kCPU).contiguous();
    exchange_->agree_initial_state(static_cast<uint64_t>(round_), params.data_ptr<float>(),
                                   static_cast<size_t>(params.numel()));
    if (!params.is_same(flat_->params())) flat_->params().copy_(params);
  }
  if (plan.founder && !plan.checkpoint && !plan.own_initial_state && step_ == 0) checkpoint_now();
}

void Trainer::attach_exchange(std::unique_ptr<exchange::GradientExchange> exchange, bool overlap) {
  GB_REQUIRE(emulated_.empty(), "--emulate-workers: not with a shared folder");
  exchange_ = std::move(exchange);
  overlap_ = overlap;
  // Per-step rounds that are neither one step late nor time-boxed may stream with backward.
  const bool boxed = config_.round_seconds > 0;
  if (!overlap && !boxed && flat_->grads().is_cpu())
    backward_stream_ = std::make_unique<BackwardStream>(*model_, *flat_);
  logger().info(str("exchange: ", exchange_->describe(), overlap ? ", overlapped with the next step (one-step-delayed update)" : ""));
}

uint64_t model_fingerprint(const model::ModelConfig& config) {
  const std::string text = identity(config.to_json()).dump();
  return checksum64(text.data(), text.size());
}

// The same sequences on every worker, whatever its micro-batch (which only sets how many rows
// go through the model at once): replicas holding the same parameters print the same loss.
double Trainer::evaluate() {
  if (!val_sampler_) return std::numeric_limits<double>::quiet_NaN();
  model_->eval();
  torch::NoGradGuard no_grad;
  double total = 0.0;
  for (int64_t i = 0; i < config_.eval_batches; ++i) {
    Batch batch = val_sampler_->batch(i, kEvalRows);
    for (int64_t row = 0; row < kEvalRows; row += config_.micro_batch) {
      const int64_t rows = std::min(config_.micro_batch, kEvalRows - row);
      AutocastScope autocast(runtime_);
      const torch::Tensor inputs = batch.inputs.narrow(0, row, rows).to(runtime_.device);
      const torch::Tensor targets = batch.targets.narrow(0, row, rows).to(runtime_.device);
      total += model_->loss(inputs, targets, config_.lm_head_chunk).item<double>() * static_cast<double>(rows);
    }
  }
  model_->train();
  return total / static_cast<double>(config_.eval_batches * kEvalRows);
}

void Trainer::reload_agreed_state() {
  std::optional<std::filesystem::path> dir = exchange_->fetch_agreed_state(config_.out_dir);
  GB_CHECK(dir.has_value(), "the exchange has no agreed state to reload");
  adopt_fetched(*dir);
  reloaded_ = true;
}

void Trainer::keep_only_the_runs_state() {
  if (!outer_) return;
  // The run's state is θ_g: the publisher's local progress on fragments between their rounds
  // is its own, and would be counted twice (one fragment: they are equal anyway).
  torch::NoGradGuard no_grad;
  flat_->params().copy_(outer_->global());
  std::fill(round_tokens_.begin(), round_tokens_.end(), 0);
  std::fill(round_loss_sum_.begin(), round_loss_sum_.end(), 0.0);
  if (eager_) eager_->forget();  // another worker's view of the others
}

void Trainer::adopt_fetched(const std::filesystem::path& dir) {
  restore(dir, model_->config());
  keep_only_the_runs_state();
  // Local checkpoints past the agreed state hold the abandoned one: a restart must not resume
  // them. The fetched folder is named by its rounds; it becomes this step's checkpoint.
  adopt_checkpoint(config_.out_dir, dir, step_);
}

std::filesystem::path Trainer::checkpoint() {
  const auto start = Clock::now();
  CheckpointState state;
  state.step = step_;
  state.round = round_;
  state.tokens = tokens_;
  state.optimizer_step = optimizer_->step_count();
  state.loss_scale = scaler_.scale();
  state.loss_scale_good_steps = scaler_.good_steps();
  state.model_config = model_->config().to_json();
  state.train_config = config_.to_json();
  state.control = nlohmann::json::parse(control_json_);
  if (spike_guard_.enabled()) state.spike_guard = spike_guard_.to_json();
  std::optional<OuterState> outer;
  if (outer_) {
    outer.emplace();
    outer->global = agreed_parameters();  // what a joiner or a reload adopts
    outer->momentum = outer_->momentum();
    outer->round_tokens = round_tokens_;
    outer->round_loss_sum = round_loss_sum_;
    if (eager_) {
      outer->eager_offset = eager_->offset();
      outer->eager_momentum = eager_->momentum();
      outer->eager_sent_share = eager_->sent_share();
      outer->eager_tokens = eager_->others_tokens();
    }
  }
  std::filesystem::path dir =
      save_checkpoint(config_.out_dir, state, *flat_, optimizer_->moment_tensors(), outer ? &*outer : nullptr);
  prune_checkpoints(config_.out_dir, config_.keep_checkpoints);
  // Only the state after a whole round is the run's: one taken inside a DiLoCo round is local.
  if (exchange_ && !mid_round())
    exchange_->after_checkpoint(static_cast<uint64_t>(round_), dir, static_cast<uint64_t>(tokens_),
                                replica_state_checksum());
  logger().info(str("checkpoint ", dir.string(), " written in ", format_number(seconds_since(start), "%.2f"), " s"));
  warn_if_disk_low(dir);
  return dir;
}

// Note [A full disk] in common/disk_space.h: said while one more checkpoint still fits, once
// until the space comes back. A folder checkpoint's publisher needs the size again for parts.
void Trainer::warn_if_disk_low(const std::filesystem::path& checkpoint_dir) {
  uint64_t bytes = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(checkpoint_dir, ec))
    if (entry.is_regular_file(ec)) bytes += entry.file_size(ec);
  const std::optional<uint64_t> free = free_bytes(checkpoint_dir);
  if (!free) return;
  const bool low = *free < 2 * bytes;
  if (low && !disk_low_warned_)
    logger().warn(str("the disk of ", config_.out_dir.string(), " is nearly full: ", bytes_text(*free),
                      " free, and a checkpoint takes ", bytes_text(bytes), " (twice that on the worker that publishes it "
                      "to the shared folder). Free space, lower --keep-checkpoints or move --out before it fills"));
  disk_low_warned_ = low;
}

void Trainer::log_progress(double loss, double lr, double interval_seconds, int64_t interval_steps,
                           int64_t interval_tokens) {
  const double tokens_per_second = interval_seconds > 0 ? static_cast<double>(interval_tokens) / interval_seconds : 0.0;
  const double seconds_per_step = interval_seconds / static_cast<double>(std::max<int64_t>(1, interval_steps));
  const double eta = seconds_per_step * static_cast<double>(config_.max_steps - step_);
  logger().info(str("step ", step_, "/", config_.max_steps, " | loss ", format_number(loss, "%.4f"), " | lr ",
                    format_number(lr, "%.2e"), " | norm ", format_number(last_grad_norm_, "%.3f"), " | ",
                    format_number(tokens_per_second, "%.0f"), " tok/s | ETA ", format_duration(eta)));
}

TrainSummary Trainer::run(const StopPredicate& should_stop) {
  TrainSummary summary;
  summary.start_step = step_;
  const int64_t tokens_per_step = config_.micro_batch * train_sampler_->block_size() * config_.grad_accum;
  logger().info(str("training on ", runtime_.describe(), ": steps ", step_, " -> ", config_.max_steps, ", ",
                    tokens_per_step, " tokens per step", exchange_ ? " on this worker" : ""));
  int64_t interval_steps = 0;
  double train_seconds = 0.0;
  int64_t train_tokens = 0;
  double interval_seconds = 0.0;
  int64_t interval_tokens = 0;
  for (int final_checks = 0;; ++final_checks) {
    while (step_ < config_.max_steps) {
      const double lr = schedule_.at(step_);
      const auto start = Clock::now();
      apply_curriculum(step_ + 1);
      const int64_t tokens_before = tokens_;
      step_exchange_wait_s_ = 0;
      step_round_.reset();
      const bool gradient_round = !in_diloco_phase();
      const bool measured = config_.thermometer_interval > 0 && (step_ + 1) % config_.thermometer_interval == 0;
      if (measured) {
        thermometer_.reset(model_->config().n_layer, runtime_.device);
        model_->set_thermometer(&thermometer_);
      }
      const double loss = train_step(lr);
      if (measured) model_->set_thermometer(nullptr);
      if (reloaded_) {  // the step went back to the agreed state's
        reloaded_ = false;
        step_advance_ = 1;
        continue;
      }
      if (gradient_round) ++round_;
      const int64_t step_tokens = tokens_ - tokens_before;  // all workers' when exchanging
      const int64_t step_before = step_;
      step_ += step_advance_;
      step_advance_ = 1;
      const double seconds = seconds_since(start);
      train_seconds += seconds;
      train_tokens += step_tokens;
      interval_seconds += seconds;
      interval_tokens += step_tokens;
      ++interval_steps;
      summary.last_loss = loss;
      nlohmann::json line = {{"step", step_}, {"loss", loss}, {"lr", lr * lr_multiplier_}, {"grad_norm", last_grad_norm_},
                             {"tokens", tokens_}, {"step_seconds", seconds}};
      if (exchange_) line["exchange_wait_seconds"] = step_exchange_wait_s_;
      if (step_round_) {
        line["contributors"] = step_round_->contributors;
        line["exchange_bytes_written"] = step_round_->bytes_written;
      }
      if (config_.round_seconds > 0 && gradient_round) line["micro_batches"] = micro_batches_;
      if (measured) line["thermometer"] = thermometer_.read();
      if (!spike_event_.is_null()) line["spike"] = std::exchange(spike_event_, nullptr);
      metrics_->write(line);
      if (passed_multiple(step_before, step_, config_.log_interval) || step_ == config_.max_steps) {
        log_progress(loss, lr * lr_multiplier_, interval_seconds, interval_steps, interval_tokens);
        interval_steps = 0;
        interval_seconds = 0.0;
        interval_tokens = 0;
      }
      if (config_.eval_interval > 0 &&
          (passed_multiple(step_before, step_, config_.eval_interval) || step_ == config_.max_steps)) {
        summary.last_val_loss = evaluate();
        metrics_->write({{"step", step_}, {"val_loss", summary.last_val_loss}});
        logger().info(str("step ", step_, " | val loss ", format_number(summary.last_val_loss, "%.4f")));
      }
      const bool stop = should_stop && should_stop(step_);
      const bool checkpoint_due = interval_checkpoint_due() || step_ == config_.max_steps || stop;
      if (checkpoint_due && config_.checkpoint_interval >= 0) {
        drain_exchange(lr);  // a checkpoint holds every round up to its step
        summary.last_checkpoint = checkpoint();
      }
      if (stop && step_ < config_.max_steps) {
        summary.stopped_early = true;
        logger().info(str("stopped at step ", step_, "; resume with the same command"));
        break;
      }
    }
    drain_exchange(schedule_.at(step_));
    // The replicas compare notes after the last round (GradientExchange::final_check); a minority
    // one reloads the agreed state and replays the rounds it lacks, a bounded number of times.
    if (!exchange_ || summary.stopped_early || final_checks >= 3) break;
    const torch::Tensor state = replica_state();
    if (!exchange_->final_check(static_cast<uint64_t>(round_), state.data_ptr<float>(), static_cast<size_t>(state.numel())))
      break;
    reload_agreed_state();
    reloaded_ = false;
  }
  if (exchange_) exchange_->leave();  // done or stopped: the peers see "left", not a stale heartbeat
  summary.end_step = step_;
  summary.tokens_per_second = train_seconds > 0 ? static_cast<double>(train_tokens) / train_seconds : 0.0;
  return summary;
}

}  // namespace gradbox::worker

#include "worker/train_config.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/error.h"
#include "common/whole_number.h"
#include "worker/curriculum.h"

namespace gradbox::worker {

std::string to_string(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::adamw: return "adamw";
    case OptimizerKind::lamb: return "lamb";
    case OptimizerKind::sgd: return "sgd";
  }
  return "adamw";
}

std::string to_string(SyncMode mode) { return mode == SyncMode::diloco ? "diloco" : "gradient"; }

std::string describe_sync(const TrainConfig& c) {
  // The spike guard decides on agreed rounds with settings every replica must share (Note [Spike guard]),
  // and replicas that step the same gradient must keep their moments alike.
  if (c.sync == SyncMode::gradient)
    return str("gradient",
               c.spike_z > 0 ? str(" spike-z=", c.spike_z, " window=", c.spike_window, " rollback=", c.spike_rollback) : "",
               c.moments == MomentStorage::int8 ? " moments=int8" : "");
  return str("diloco H=", c.inner_steps, " warmup=", c.sync_warmup_steps, " lr=", c.outer_lr, " momentum=", c.outer_momentum,
             c.inner_lr_scale != 1.0 ? str(" inner-lr-scale=", c.inner_lr_scale) : "",
             c.outer_nesterov ? " nesterov" : " heavy-ball",
             c.fragments > 1 || c.overlap_steps > 0 ? str(" fragments=", c.fragments, " overlap=", c.overlap_steps) : "");
}

std::string to_string(MomentStorage storage) { return storage == MomentStorage::int8 ? "int8" : "fp32"; }

MomentStorage parse_moments(const std::string& name) {
  if (name == "fp32") return MomentStorage::fp32;
  if (name == "int8") return MomentStorage::int8;
  throw InputError(str("--moments: unknown storage '", name, "' (fp32, int8)"));
}

std::string to_string(LateOuterStep rule) { return rule == LateOuterStep::delayed ? "delayed" : "eager"; }

LateOuterStep parse_late_outer_step(const std::string& name) {
  if (name == "eager") return LateOuterStep::eager;
  if (name == "delayed") return LateOuterStep::delayed;
  throw InputError(str("--late-outer-step: unknown rule '", name, "' (eager, delayed)"));
}

SyncMode parse_sync(const std::string& name) {
  if (name == "gradient") return SyncMode::gradient;
  if (name == "diloco") return SyncMode::diloco;
  throw InputError(str("--sync: unknown mode '", name, "' (gradient, diloco)"));
}

std::string to_string(Precision precision) {
  switch (precision) {
    case Precision::auto_select: return "auto";
    case Precision::fp32: return "fp32";
    case Precision::bf16: return "bf16";
    case Precision::fp16: return "fp16";
  }
  return "auto";
}

OptimizerKind parse_optimizer(const std::string& name) {
  if (name == "adamw") return OptimizerKind::adamw;
  if (name == "lamb") return OptimizerKind::lamb;
  if (name == "sgd") return OptimizerKind::sgd;
  throw InputError(str("--optimizer: unknown optimizer '", name, "' (adamw, lamb, sgd)"));
}

Precision parse_precision(const std::string& name) {
  if (name == "auto") return Precision::auto_select;
  if (name == "fp32") return Precision::fp32;
  if (name == "bf16") return Precision::bf16;
  if (name == "fp16") return Precision::fp16;
  throw InputError(str("--precision: unknown precision '", name, "' (auto, fp32, bf16, fp16)"));
}

void TrainConfig::validate() const {
  GB_REQUIRE(!data_dir.empty(), "--data: a prepared data folder is required (gradbox prepare)");
  GB_REQUIRE(micro_batch >= 1, "--micro-batch: must be >= 1, got ", micro_batch);
  GB_REQUIRE(block_size >= 0, "--block-size: must be >= 0, got ", block_size);
  GB_REQUIRE(grad_accum >= 1, "--grad-accum: must be >= 1, got ", grad_accum);
  GB_REQUIRE(max_steps >= 1, "--max-steps: must be >= 1, got ", max_steps);
  Curriculum::parse(curriculum, std::numeric_limits<int64_t>::max());  // its blocks are checked against the model's later
  GB_REQUIRE(lr > 0, "--lr: must be > 0, got ", lr);
  GB_REQUIRE(min_lr >= 0 && min_lr <= lr, "--min-lr: must be in [0, lr], got ", min_lr);
  GB_REQUIRE(warmup_steps >= 0, "--warmup-steps: must be >= 0, got ", warmup_steps);
  GB_REQUIRE(weight_decay >= 0, "--weight-decay: must be >= 0, got ", weight_decay);
  GB_REQUIRE(beta1 >= 0 && beta1 < 1, "--beta1: must be in [0, 1), got ", beta1);
  GB_REQUIRE(beta2 >= 0 && beta2 < 1, "--beta2: must be in [0, 1), got ", beta2);
  GB_REQUIRE(eps > 0, "--eps: must be > 0, got ", eps);
  GB_REQUIRE(moments == MomentStorage::fp32 || optimizer == OptimizerKind::adamw,
             "--moments int8: AdamW's moments only (--optimizer adamw), got --optimizer ", to_string(optimizer));
  GB_REQUIRE(moments == MomentStorage::fp32 || emulate_workers.empty(),
             "--moments int8: not with --emulate-workers (the emulation is an fp32 reference)");
  GB_REQUIRE(grad_clip >= 0, "--grad-clip: must be >= 0, got ", grad_clip);
  GB_REQUIRE(dropout >= 0 && dropout < 1, "--dropout: must be in [0, 1), got ", dropout);
  GB_REQUIRE(thermometer_interval >= 0, "--thermometer-interval: must be >= 0 (0: off), got ", thermometer_interval);
  GB_REQUIRE(lm_head_chunk >= 0, "--lm-head-chunk: must be >= 0 (0: off), got ", lm_head_chunk);
  GB_REQUIRE(std::isfinite(spike_z) && spike_z >= 0, "--spike-z: must be >= 0 (0: off), got ", spike_z);
  GB_REQUIRE(spike_window >= 8, "--spike-window: must be >= 8 steps, got ", spike_window);
  GB_REQUIRE(spike_rollback >= 0 && spike_rollback <= spike_window, "--spike-rollback: must be between 0 (never) and "
             "--spike-window ", spike_window, ", got ", spike_rollback);
  GB_REQUIRE(spike_rollback == 0 || spike_z > 0, "--spike-rollback: needs the guard on (--spike-z > 0)");
  GB_REQUIRE(spike_rollback == 0 || sync == SyncMode::gradient, "--spike-rollback: per-step rounds only (--sync gradient); "
             "DiLoCo's inner steps are each worker's own, the guard skips them without rolling back");
  GB_REQUIRE(spike_rollback == 0 || checkpoint_interval > 0, "--spike-rollback: rolls back to the checkpoints of "
             "--checkpoint-interval, which must be > 0, got ", checkpoint_interval);
  for (int64_t step : inject_spike_steps) GB_REQUIRE(step >= 1, "--inject-spike-steps: steps count from 1, got ", step);
  GB_REQUIRE(std::isfinite(inject_spike_factor) && inject_spike_factor > 0, "--inject-spike-factor: must be > 0, got ",
             inject_spike_factor);
  GB_REQUIRE(eval_interval >= 0, "--eval-interval: must be >= 0, got ", eval_interval);
  GB_REQUIRE(eval_batches >= 1, "--eval-batches: must be >= 1, got ", eval_batches);
  GB_REQUIRE(checkpoint_interval >= -1, "--checkpoint-interval: must be >= -1, got ", checkpoint_interval);
  GB_REQUIRE(keep_checkpoints >= 1, "--keep-checkpoints: must be >= 1, got ", keep_checkpoints);
  GB_REQUIRE(log_interval >= 1, "--log-interval: must be >= 1, got ", log_interval);
  GB_REQUIRE(threads >= 0, "--threads: must be >= 0, got ", threads);
  GB_REQUIRE(local_workers >= 1, "--local-workers: must be >= 1, got ", local_workers);
  GB_REQUIRE(worker.empty() || emulate_workers.empty(), "--emulate-workers: not with --worker (emulation is one process)");
  if (!emulate_workers.empty()) parse_emulated_workers(emulate_workers);
  GB_REQUIRE(inner_steps >= 1, "--inner-steps: must be >= 1, got ", inner_steps);
  GB_REQUIRE(outer_lr > 0, "--outer-lr: must be > 0, got ", outer_lr);
  GB_REQUIRE(std::isfinite(inner_lr_scale) && inner_lr_scale > 0, "--inner-lr-scale: must be > 0, got ", inner_lr_scale);
  GB_REQUIRE(sync_warmup_steps >= 0, "--sync-warmup-steps: must be >= 0, got ", sync_warmup_steps);
  GB_REQUIRE(outer_momentum >= 0 && outer_momentum < 1, "--outer-momentum: must be in [0, 1), got ", outer_momentum);
  GB_REQUIRE(fragments >= 1, "--fragments: must be >= 1, got ", fragments);
  GB_REQUIRE(overlap_steps >= 0, "--overlap-steps: must be >= 0, got ", overlap_steps);
  if (fragments > 1 || overlap_steps > 0) {
    GB_REQUIRE(sync == SyncMode::diloco, fragments > 1 ? "--fragments" : "--overlap-steps", ": only with --sync diloco");
    GB_REQUIRE(inner_steps % fragments == 0, "--fragments ", fragments, ": must divide --inner-steps ", inner_steps,
               " (a fragment's round every inner_steps / fragments steps)");
    GB_REQUIRE(overlap_steps < inner_steps / fragments, "--overlap-steps ", overlap_steps,
               ": must be less than --inner-steps / --fragments = ", inner_steps / fragments,
               " (one fragment's round in flight at a time)");
    GB_REQUIRE(round_seconds == 0 || fragments == 1, "--round-seconds: not with --fragments");
  }
  GB_REQUIRE(std::isfinite(round_seconds) && round_seconds >= 0, "--round-seconds: must be >= 0, got ", round_seconds);
  if (round_seconds > 0) {
    // The box ends a round early; with room for one unit only it would never do anything.
    if (sync == SyncMode::diloco)
      GB_REQUIRE(inner_steps >= 2, "--round-seconds: with --sync diloco a round takes up to --inner-steps steps; give "
                                   "--inner-steps the most a round may take (more than 1)");
    else
      GB_REQUIRE(grad_accum >= 2, "--round-seconds: per-step rounds accumulate up to --grad-accum micro-batches; give "
                                  "--grad-accum the most a round may take (more than 1)");
    GB_REQUIRE(emulate_workers.empty(), "--round-seconds: not with --emulate-workers (the emulation has no clock)");
  }
  GB_REQUIRE(partial_every >= 0, "--partial-every: must be >= 0, got ", partial_every);
  GB_REQUIRE(partial_every == 0 || (sync == SyncMode::diloco && round_seconds > 0 && overlap_steps > 0),
             "--partial-every: only with overlapped time-boxed DiLoCo rounds (--sync diloco --round-seconds S "
             "--overlap-steps T)");
}

std::vector<int64_t> parse_step_list(const std::string& text) {
  std::vector<int64_t> steps;
  size_t at = 0;
  while (at < text.size()) {
    const size_t comma = std::min(text.find(',', at), text.size());
    const std::string item = text.substr(at, comma - at);
    const std::optional<int64_t> step = parse_whole_number(item);
    GB_REQUIRE(step.has_value(), "--inject-spike-steps ", text, ": '", item, "' is not a step number");
    steps.push_back(*step);
    at = comma + 1;
  }
  return steps;
}

std::vector<EmulatedWorker> parse_emulated_workers(const std::string& spec) {
  std::vector<EmulatedWorker> workers;
  size_t start = 0;
  while (start <= spec.size()) {
    const size_t end = std::min(spec.find(',', start), spec.size());
    const std::string item = spec.substr(start, end - start);
    const size_t colon = item.find(':');
    GB_REQUIRE(colon != std::string::npos && colon > 0, "--emulate-workers ", spec, ": '", item,
               "' is not name:micro_batch");
    EmulatedWorker w{item.substr(0, colon), 0};
    try {
      w.micro_batch = std::stoll(item.substr(colon + 1));
    } catch (const std::exception&) {
      throw InputError(str("--emulate-workers ", spec, ": '", item, "' has no micro-batch number"));
    }
    GB_REQUIRE(w.micro_batch >= 1, "--emulate-workers ", spec, ": micro-batch of ", w.name, " must be >= 1");
    for (const EmulatedWorker& other : workers) GB_REQUIRE(other.name != w.name, "--emulate-workers ", spec, ": ", w.name, " twice");
    workers.push_back(w);
    start = end + 1;
  }
  std::sort(workers.begin(), workers.end(), [](const EmulatedWorker& a, const EmulatedWorker& b) { return a.name < b.name; });
  return workers;
}

nlohmann::json TrainConfig::to_json() const {
  return {
      {"data_dir", data_dir.string()},
      {"out_dir", out_dir.string()},
      {"model", model},
      {"init_from", init_from.string()},
      {"micro_batch", micro_batch},
      {"block_size", block_size},
      {"grad_accum", grad_accum},
      {"max_steps", max_steps},
      {"curriculum", curriculum},
      {"optimizer", to_string(optimizer)},
      {"moments", to_string(moments)},
      {"lr", lr},
      {"min_lr", min_lr},
      {"warmup_steps", warmup_steps},
      {"weight_decay", weight_decay},
      {"beta1", beta1},
      {"beta2", beta2},
      {"eps", eps},
      {"grad_clip", grad_clip},
      {"dropout", dropout},
      {"activation_checkpointing", activation_checkpointing},
      {"lm_head_chunk", lm_head_chunk},
      {"thermometer_interval", thermometer_interval},
      {"spike_z", spike_z},
      {"spike_window", spike_window},
      {"spike_rollback", spike_rollback},
      {"inject_spike_steps", inject_spike_steps},
      {"inject_spike_factor", inject_spike_factor},
      {"eval_interval", eval_interval},
      {"eval_batches", eval_batches},
      {"checkpoint_interval", checkpoint_interval},
      {"keep_checkpoints", keep_checkpoints},
      {"log_interval", log_interval},
      {"seed", seed},
      {"device", device},
      {"precision", to_string(precision)},
      {"threads", threads},
      {"local_workers", local_workers},
      {"worker", worker},
      {"emulate_workers", emulate_workers},
      {"sync", to_string(sync)},
      {"inner_steps", inner_steps},
      {"outer_lr", outer_lr},
      {"inner_lr_scale", inner_lr_scale},
      {"outer_momentum", outer_momentum},
      {"outer_nesterov", outer_nesterov},
      {"sync_warmup_steps", sync_warmup_steps},
      {"round_seconds", round_seconds},
      {"fragments", fragments},
      {"overlap_steps", overlap_steps},
      {"late_outer_step", to_string(late_outer_step)},
      {"partial_every", partial_every},
  };
}

TrainConfig TrainConfig::from_json(const nlohmann::json& j, const std::string& where) {
  GB_REQUIRE(j.is_object(), where, ": a train config must be a JSON object");
  TrainConfig c;
  const nlohmann::json defaults = c.to_json();  // its keys are the known keys
  for (const auto& [key, value] : j.items())
    GB_REQUIRE(defaults.contains(key), where, ": unknown key '", key, "'");
  auto get = [&](const char* key, auto& field) {
    if (!j.contains(key)) return;
    try {
      j.at(key).get_to(field);
    } catch (const nlohmann::json::exception& e) {
      throw InputError(str(where, ": key '", key, "': ", e.what()));
    }
  };
  std::string text;
  if (j.contains("data_dir")) { get("data_dir", text); c.data_dir = text; }
  if (j.contains("out_dir")) { get("out_dir", text); c.out_dir = text; }
  if (j.contains("init_from")) { get("init_from", text); c.init_from = text; }
  get("model", c.model);
  get("micro_batch", c.micro_batch);
  get("block_size", c.block_size);
  get("grad_accum", c.grad_accum);
  get("max_steps", c.max_steps);
  get("curriculum", c.curriculum);
  if (j.contains("optimizer")) { get("optimizer", text); c.optimizer = parse_optimizer(text); }
  if (j.contains("moments")) { get("moments", text); c.moments = parse_moments(text); }
  get("lr", c.lr);
  get("min_lr", c.min_lr);
  get("warmup_steps", c.warmup_steps);
  get("weight_decay", c.weight_decay);
  get("beta1", c.beta1);
  get("beta2", c.beta2);
  get("eps", c.eps);
  get("grad_clip", c.grad_clip);
  get("dropout", c.dropout);
  get("activation_checkpointing", c.activation_checkpointing);
  get("lm_head_chunk", c.lm_head_chunk);
  get("thermometer_interval", c.thermometer_interval);
  get("spike_z", c.spike_z);
  get("spike_window", c.spike_window);
  get("spike_rollback", c.spike_rollback);
  get("inject_spike_steps", c.inject_spike_steps);
  get("inject_spike_factor", c.inject_spike_factor);
  get("eval_interval", c.eval_interval);
  get("eval_batches", c.eval_batches);
  get("checkpoint_interval", c.checkpoint_interval);
  get("keep_checkpoints", c.keep_checkpoints);
  get("log_interval", c.log_interval);
  get("seed", c.seed);
  get("device", c.device);
  if (j.contains("precision")) { get("precision", text); c.precision = parse_precision(text); }
  get("threads", c.threads);
  get("local_workers", c.local_workers);
  get("worker", c.worker);
  get("emulate_workers", c.emulate_workers);
  if (j.contains("sync")) { get("sync", text); c.sync = parse_sync(text); }
  get("inner_steps", c.inner_steps);
  get("outer_lr", c.outer_lr);
  get("inner_lr_scale", c.inner_lr_scale);
  get("outer_momentum", c.outer_momentum);
  get("outer_nesterov", c.outer_nesterov);
  get("sync_warmup_steps", c.sync_warmup_steps);
  get("round_seconds", c.round_seconds);
  get("fragments", c.fragments);
  get("overlap_steps", c.overlap_steps);
  if (j.contains("late_outer_step")) { get("late_outer_step", text); c.late_outer_step = parse_late_outer_step(text); }
  get("partial_every", c.partial_every);
  return c;
}

}  // namespace gradbox::worker

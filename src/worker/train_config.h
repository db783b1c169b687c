#pragma once
// Everything `gradbox train` can be told, in one place: defaults live here, the CLI overrides
// them, unknown keys in a config file are errors, and the resolved config is saved with the run.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace gradbox::worker {

enum class OptimizerKind { adamw, lamb, sgd };
// How many workers combine their work (Note [DiLoCo rounds] in worker/outer_optimizer.h):
// gradient: every step is a round that averages gradients (exact data parallelism);
// diloco: every inner_steps local steps are a round that averages parameter deltas.
enum class SyncMode { gradient, diloco };
enum class Precision { auto_select, fp32, bf16, fp16 };
// How AdamW keeps its moments: fp32, or 8 bits a value (Note [8-bit moments] in kernels/adamw_q8.h).
enum class MomentStorage { fp32, int8 };
// How a DiLoCo outer step applied late (--overlap-steps) is bridged (Note [Eager outer steps]).
enum class LateOuterStep { eager, delayed };

struct TrainConfig {
  // What to train on and where to write.
  std::filesystem::path data_dir;
  std::filesystem::path out_dir = "runs/default";
  std::string model = "gpt2-mini";  // a preset, or a path to a model config .json
  std::filesystem::path init_from;  // a Hugging Face folder to fine-tune from (gradbox import)

  // Batch: tokens per optimizer step = micro_batch * block_size * grad_accum.
  int64_t micro_batch = 8;
  int64_t block_size = 0;  // 0: the model's block_size
  int64_t grad_accum = 1;
  int64_t max_steps = 1000;
  // Short sequences and small batches first (Note [Curriculum] in worker/curriculum.h):
  // "STEP:BLOCK[:ACCUM],..."; empty: the flags throughout.
  std::string curriculum;

  // Optimizer and schedule.
  OptimizerKind optimizer = OptimizerKind::adamw;
  MomentStorage moments = MomentStorage::fp32;
  double lr = 6e-4;
  double min_lr = 6e-5;
  int64_t warmup_steps = 100;
  double weight_decay = 0.1;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double grad_clip = 1.0;  // global norm; 0 disables
  double dropout = 0.0;
  std::string activation_checkpointing = "none";
  int64_t thermometer_interval = 0;  // steps between thermometer readings (Note [Thermometers]); 0: off
  int64_t lm_head_chunk = 0;  // token positions per block of the chunked LM head (0: unchunked)
  // Spike guard (Note [Spike guard] in worker/spike_guard.h): skip a step whose loss or
  // gradient norm is more than spike_z deviations above the last spike_window steps' (0: off);
  // roll back to the newest checkpoint after spike_rollback skips in a window (0: never).
  double spike_z = 0;
  int64_t spike_window = 128;
  int64_t spike_rollback = 0;
  // Fault injection for tests: the loss (and so the gradient) of these steps is multiplied by
  // inject_spike_factor, as a poisoned batch would make it.
  std::vector<int64_t> inject_spike_steps;
  double inject_spike_factor = 1000;

  // Evaluation, checkpoints, logging.
  int64_t eval_interval = 200;  // 0 disables validation
  int64_t eval_batches = 8;
  int64_t checkpoint_interval = 500;  // 0: only at the end; -1: never (benchmarks)
  int64_t keep_checkpoints = 2;
  int64_t log_interval = 10;

  // Machine.
  uint64_t seed = 1337;
  std::string device = "auto";  // auto, cpu, cuda, cuda:N
  Precision precision = Precision::auto_select;
  int64_t threads = 0;        // 0: this machine's cores / local_workers
  int64_t local_workers = 1;  // gradbox processes sharing this machine's cores

  // Many workers. `worker` names this process's data stream ("train/<worker>"); empty means the
  // single-process stream "train". `emulate_workers` ("a:4,b:2,c:3": name:micro_batch) trains
  // one process on the union of those workers' batches, token-weighted as the exchange does:
  // the reference a cluster run is checked against.
  std::string worker;
  std::string emulate_workers;

  // Synchronisation: per-step gradients, or DiLoCo rounds of inner_steps local steps followed
  // by one outer SGD step (Nesterov momentum) on the averaged delta.
  SyncMode sync = SyncMode::gradient;
  int64_t inner_steps = 50;
  double outer_lr = 0.7;
  double inner_lr_scale = 1.0;  // diloco: the inner steps' learning rate, as a multiple of the lr schedule
  double outer_momentum = 0.9;
  bool outer_nesterov = true;
  int64_t sync_warmup_steps = 0;  // diloco: per-step gradient rounds first (DiLoCo starts from a data-parallel state)
  // > 0: time-boxed rounds (Note [Time-boxed rounds] in worker/outer_optimizer.h). Each worker
  // computes as much of a round as fits in this many seconds (at least one micro-batch or inner
  // step): DiLoCo takes up to inner_steps inner steps, per-step rounds up to grad_accum
  // micro-batches, so that a slow worker does not set the pace.
  double round_seconds = 0;
  // Streaming DiLoCo (Note [Streaming fragments] in worker/outer_optimizer.h): the parameters in
  // `fragments` strided groups of layers, one of which goes through the exchange every
  // inner_steps / fragments steps; a fragment's round runs while the next overlap_steps inner
  // steps compute, and its outer step is merged into the weights then.
  int64_t fragments = 1;
  int64_t overlap_steps = 0;
  // The overlapped steps start from the worker's own parameters (delayed), or from θ_g moved by
  // the worker's own fresh Δ at its share (eager, Note [Eager outer steps]). Local to a worker.
  LateOuterStep late_outer_step = LateOuterStep::delayed;
  // > 0, with overlapped time-boxed rounds: the Δ so far goes into the folder every this many
  // inner steps, so a session that dies mid-round still contributes its steps (Note [Partial
  // deltas] in exchange/folder_exchange.h).
  int64_t partial_every = 0;

  void validate() const;  // throws InputError naming the flag
  nlohmann::json to_json() const;
  // Unknown keys and wrong types are InputErrors naming `where` and the key.
  static TrainConfig from_json(const nlohmann::json& j, const std::string& where);
};

struct EmulatedWorker {
  std::string name;
  int64_t micro_batch = 0;
};
// Sorted by name (the exchange's summation order); InputError naming --emulate-workers.
std::vector<EmulatedWorker> parse_emulated_workers(const std::string& spec);

std::string to_string(OptimizerKind kind);
std::string to_string(Precision precision);
std::string to_string(SyncMode mode);
SyncMode parse_sync(const std::string& name);            // InputError naming --sync
// What every worker of a run must agree on about its rounds: "gradient" (with the spike guard's
// settings when it is on), or DiLoCo's settings.
std::string describe_sync(const TrainConfig& config);
OptimizerKind parse_optimizer(const std::string& name);  // InputError naming --optimizer
Precision parse_precision(const std::string& name);      // InputError naming --precision
std::string to_string(MomentStorage storage);
MomentStorage parse_moments(const std::string& name);    // InputError naming --moments
std::string to_string(LateOuterStep rule);
LateOuterStep parse_late_outer_step(const std::string& name);  // InputError naming --late-outer-step
// "30,31" -> {30, 31}; "" -> {}. InputError naming --inject-spike-steps.
std::vector<int64_t> parse_step_list(const std::string& text);

}  // namespace gradbox::worker

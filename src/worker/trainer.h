#pragma once
// The single-process training loop: data -> model -> loss -> backward -> clip -> step, with
// validation, checkpoints, metrics and exact resume. The exchange issues make it many workers.
#include <torch/torch.h>

#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <optional>

#include "data/token_dataset.h"
#include "exchange/gradient_exchange.h"
#include "exchange/live_control.h"
#include "exchange/round_policy.h"
#include "model/causal_lm.h"
#include "worker/backward_stream.h"
#include "worker/batch_sampler.h"
#include "worker/curriculum.h"
#include "worker/eager_outer.h"
#include "worker/flat_parameters.h"
#include "worker/loss_scale.h"
#include "worker/lr_schedule.h"
#include "worker/metrics.h"
#include "worker/optimizer.h"
#include "worker/outer_optimizer.h"
#include "worker/runtime.h"
#include "worker/spike_guard.h"
#include "worker/train_config.h"

namespace gradbox::worker {

struct TrainSummary {
  int64_t start_step = 0;  // > 0 when the run resumed
  int64_t end_step = 0;
  double last_loss = std::numeric_limits<double>::quiet_NaN();
  double last_val_loss = std::numeric_limits<double>::quiet_NaN();
  double tokens_per_second = 0.0;
  std::filesystem::path last_checkpoint;
  bool stopped_early = false;
};

// Called after every optimizer step; returning true stops the run with a checkpoint.
using StopPredicate = std::function<bool(int64_t step)>;

// The model config a run trains: a preset adapted to the data (vocabulary, block size, dropout)
// or a JSON file taken as written.
model::ModelConfig resolve_model_config(const TrainConfig& config, const data::DatasetInfo& data);

// What makes two replicas' parameters interchangeable: the model's shape (not dropout).
// Files in a shared folder carry it, and a worker refuses files for another model.
uint64_t model_fingerprint(const model::ModelConfig& config);

class Trainer {
 public:
  // Sets up runtime, data, model and optimizer, and resumes from the run folder's newest
  // checkpoint when there is one (its model must match: InputError otherwise).
  explicit Trainer(TrainConfig config);

  TrainSummary run(const StopPredicate& should_stop = {});
  // From now on every step is a round of `exchange`: the local gradient is replaced by the
  // agreed average of all workers' before clipping and the optimizer step.
  // overlap: round r's exchange runs while step r+1 computes; the update applied at each step
  // is the previous round's average (one step late), and the last one is applied at the end.
  void attach_exchange(std::unique_ptr<exchange::GradientExchange> exchange, bool overlap = false);
  // Enters a many-worker run through `exchange` (Note [Elastic membership]): finds the run and
  // its newest state, continues from it when it is newer than this worker's own, attaches the
  // exchange, and, as the founder of a new run, publishes the initial weights (the step-0
  // checkpoint every other worker starts from).
  void join_run(std::unique_ptr<exchange::GradientExchange> exchange, bool overlap = false);
  double evaluate();  // mean validation loss over the fixed eval batches
  static constexpr int64_t kEvalRows = 8;  // sequences per eval batch, on every worker
  // Continues from a checkpoint folder (one fetched from a shared folder when joining a run).
  void resume_from(const std::filesystem::path& dir) { restore(dir, model_->config()); }
  // Writes a checkpoint of the current step now (a founder's initial weights, step 0).
  std::filesystem::path checkpoint_now() { return checkpoint(); }

  model::CausalLM& model() { return *model_; }
  FlatParameters& flat() { return *flat_; }
  int64_t step() const { return step_; }
  bool resumed() const { return resumed_; }  // started from a checkpoint in its run folder
  // The checksum of this worker's own step-0 state, 0 once resumed or stepped: what a founding
  // member offers (Note [Founders' own initial weights] in exchange/folder_exchange.h).
  uint64_t initial_state_checksum() const { return resumed_ || step_ != 0 ? 0 : replica_state_checksum(); }
  const Runtime& runtime() const { return runtime_; }

 private:
  double train_step(double lr);  // one optimizer step over grad_accum micro-batches; returns mean loss
  struct LocalGradient {
    double loss = 0;      // mean over the micro-batches
    uint64_t tokens = 0;
  };
  // Fills flat grads with the mean gradient of this step's batches from `sampler`.
  // `before_last_backward(loss, tokens)`, when given, runs between the last micro-batch's
  // forward and backward passes (with the step's mean loss and tokens): a streamed round opens
  // there (Note [Backward overlap]).
  using BeforeLastBackward = std::function<void(double loss, uint64_t tokens)>;
  LocalGradient compute_gradient(const BatchSampler& sampler, int64_t micro_batch,
                                 const BeforeLastBackward& before_last_backward = {});
  // This step's round streamed with its backward pass, when the exchange can (nullopt: it cannot).
  std::optional<exchange::RoundResult> streamed_round(uint64_t round, LocalGradient& local);
  // --emulate-workers: each emulated worker's gradient, token-weighted as the exchange sums them.
  LocalGradient emulated_gradient();
  // --sync diloco (Note [DiLoCo rounds] in worker/outer_optimizer.h).
  bool in_diloco_phase() const { return outer_ && step_ >= config_.sync_warmup_steps; }
  // The run's parameters: θ_g, or the parameters themselves before the first DiLoCo round
  // (--sync-warmup-steps' per-step rounds), which sets θ_g from them as its first step begins.
  const torch::Tensor& agreed_parameters() const;
  bool round_ends_after_step(int64_t step) const;  // a DiLoCo round ends when this step is done
  bool mid_round() const;                          // inside a DiLoCo round (not at its end)
  int64_t round_end_after(int64_t step) const;     // the step that ends the DiLoCo round `step` + 1 is in
  // DiLoCo's round rules (Note [Round policy] in exchange/round_policy.h), per fragment's round.
  exchange::RoundRules round_rules() const;
  bool in_flight_agreed() const;
  // --round-seconds with --overlap-steps (Note [Overlapped time-boxed rounds] in
  // exchange/folder_exchange.h): the round in flight's agreement opens the next box.
  void reanchor_box(uint64_t round);
  // Every checkpoint_interval steps; in DiLoCo rounds at the end of the round that passed one.
  bool interval_checkpoint_due() const;
  double diloco_step(double lr);                   // one inner step, and the outer round at its end
  LocalGradient emulated_inner_step(double lr);    // --emulate-workers: each replica's inner step
  int64_t sync_period() const { return config_.inner_steps / static_cast<int64_t>(fragments_.size()); }
  size_t fragment_due_after(int64_t step) const;  // the fragment of the round that ends with `step`
  uint64_t next_round() const { return static_cast<uint64_t>(round_) + 1 + (in_flight_ ? 1 : 0); }
  // One round: fragment p's Δ through the exchange, then its outer step, now or (in_background,
  // --overlap-steps) after the next overlap_steps inner steps, by apply_fragment_round.
  void outer_round(uint64_t round, size_t fragment, bool in_background = false);
  void apply_fragment_round();
  // After an applied round: the replica state to the exchange, copied to the host only when
  // the exchange reads it (a fingerprint is due).
  void report_state_after(uint64_t round);
  // --partial-every: the round's Δ so far into the exchange, every that many inner steps while
  // the box is open and no round is in flight (Note [Partial deltas] in exchange/folder_exchange.h).
  void offer_partial_delta(uint64_t round);
  // --emulate-workers: the replicas' Δ over `fragment`, averaged into delta as the exchange
  // averages; a round applied late (in_background) keeps each replica's own Δ and the point its
  // late step merges against, as a worker of a cluster keeps its own.
  void emulated_average(torch::Tensor& delta, exchange::RoundResult& result, size_t fragment, bool in_background);
  // Before a round in flight goes out: what its late step merges against over `fragment`, and
  // with the eager rule (Note [Eager outer steps]) params moved by this worker's Δ (own_delta,
  // over `tokens` tokens) at its share.
  torch::Tensor point_of_merge(EagerOuter* eager, size_t fragment, const torch::Tensor& own_delta, uint64_t tokens,
                               torch::Tensor& params);
  // What replicas must agree on after a round, on the CPU: agreed_parameters(), then (DiLoCo)
  // the outer momentum. Fingerprints and folder checkpoints' checksums cover it.
  torch::Tensor replica_state() const;
  uint64_t replica_state_checksum() const;
  void adopt_fetched(const std::filesystem::path& dir);  // restore a fetched checkpoint and keep it as this step's
  void keep_only_the_runs_state();  // DiLoCo: parameters := θ_g, nothing of a round in progress
  void skip_step(const char* why);
  // Clip and step on the flat grads (scaled by grad_scale) of a step whose loss is `loss`; false
  // when skipped: non-finite, or a spike (Note [Spike guard], which may also roll back).
  bool apply_gradient(double lr, double grad_scale, double loss);
  // The guard's verdict on a step about to be applied; false: skip it (stability.cpp).
  bool passes_spike_guard(double loss, double grad_norm);
  // Weights, moments and loss scale from the newest checkpoint at a multiple of
  // --checkpoint-interval; the step count, and with it the data, goes on.
  void roll_back_after_spikes();
  double apply_round(const exchange::RoundResult& result, uint64_t round, double lr);
  std::optional<exchange::RoundResult> finish_pending_round();
  // Runs f, counting its time as this step's exposed exchange wait (the step's metrics line
  // says how much of it the exchange cost; overlap hides what runs in the background).
  template <class F>
  auto waiting_on_exchange(F&& f) {
    const auto start = std::chrono::steady_clock::now();
    struct Count {
      double& total;
      std::chrono::steady_clock::time_point start;
      ~Count() { total += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); }
    } count{step_exchange_wait_s_, start};
    return f();
  }
  void drain_exchange(double lr);  // overlap: wait for the last round and apply it
  std::filesystem::path checkpoint();
  void warn_if_disk_low(const std::filesystem::path& checkpoint_dir);
  // Parameters, moments, step and live control from a checkpoint folder (resume, join, repair).
  // Returns who wrote the checkpoint (its --worker; empty for a run without one).
  std::string restore(const std::filesystem::path& dir, const model::ModelConfig& mc);
  // Live control (Note [Live control] in folder_exchange.h): the flags are the base, the agreed
  // control overrides them from its round on.
  void apply_control(const std::string& json, const char* why);
  void apply_due_control(uint64_t round);
  // Note [Curriculum] in curriculum.h: the stage of step `step` (from 1) sets the sequence length
  // and, under any live control, the accumulation; the stage's accumulation, else the flag's.
  void apply_curriculum(int64_t step);
  int64_t base_grad_accum() const;
  void reload_agreed_state();
  void log_progress(double loss, double lr, double interval_seconds, int64_t interval_steps, int64_t interval_tokens);

  TrainConfig config_;
  Runtime runtime_;
  data::DatasetInfo data_info_;
  std::optional<data::TokenFile> train_file_;
  std::optional<data::TokenFile> val_file_;
  std::optional<BatchSampler> train_sampler_;
  std::optional<BatchSampler> val_sampler_;
  std::shared_ptr<model::CausalLM> model_;
  std::unique_ptr<FlatParameters> flat_;
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<MetricsWriter> metrics_;
  std::unique_ptr<exchange::GradientExchange> exchange_;
  std::vector<EmulatedWorker> emulated_;
  std::vector<BatchSampler> emulated_samplers_;
  bool overlap_ = false;
  std::unique_ptr<BackwardStream> backward_stream_;
  model::Thermometer thermometer_;  // read every --thermometer-interval steps  // per-step rounds on host gradients
  torch::Tensor exchange_buffers_[2];  // host copies handed to the exchange
  torch::Tensor& host_buffer(size_t i, const torch::Tensor& like);  // exchange_buffers_[i], sized as like
  std::future<exchange::RoundResult> pending_round_;
  LrSchedule schedule_;
  int64_t step_ = 0;
  // Steps the last train_step covered: 1, or (a time-boxed DiLoCo round that closed early) the
  // rest of the round's nominal steps, which its schedule and checkpoints count by.
  int64_t step_advance_ = 1;
  int64_t micro_batches_ = 0;  // in the last gradient (time-boxed per-step rounds take fewer)
  int64_t tokens_ = 0;
  LossScaler scaler_{false};  // fp16: dynamic loss scaling (Note [Mixed precision] in loss_scale.h)
  double last_grad_norm_ = 0.0;
  SpikeGuard spike_guard_{SpikeGuardConfig{}};  // Note [Spike guard] in spike_guard.h
  Curriculum curriculum_;                       // Note [Curriculum] in curriculum.h
  std::optional<CurriculumStage> stage_;        // in effect; nullopt: the flags'
  int64_t block_now_ = 0;                       // sequence length of this step's batches (0: the run's)
  nlohmann::json spike_event_;  // this step's skip or rollback, for its metrics line; null: none
  TrainConfig flags_;                                        // the values live control overrides
  std::string control_json_ = "{}";                          // in effect now
  exchange::PendingControls pending_controls_;
  double lr_multiplier_ = 1.0;
  int64_t round_ = 0;  // exchange rounds applied (per-step: one per step; DiLoCo: one per outer round)
  std::unique_ptr<OuterOptimizer> outer_;
  std::vector<Fragment> fragments_;  // DiLoCo: one (everything) unless --fragments
  // Per fragment: this worker's tokens in the inner steps since the fragment's last round, and
  // their token-weighted loss.
  std::vector<int64_t> round_tokens_;
  std::vector<double> round_loss_sum_;
  // A fragment's round whose outer step is not applied yet (--overlap-steps; or applied at once).
  struct FragmentRound {
    uint64_t round = 0;
    size_t fragment = 0;
    int64_t apply_after_step = 0;
    double loss = 0;
    int64_t inner_steps = 0;
    std::chrono::steady_clock::time_point started;
    torch::Tensor sent;  // the fragment's parameters when its Δ went out (overlap only)
    uint64_t own_tokens = 0;  // this worker's tokens in it
    std::future<exchange::RoundResult> pending;
    exchange::RoundResult ready;  // when not pending
  };
  std::optional<FragmentRound> in_flight_;
  bool contributing_ = true;  // the exchange's last answer (not asked while a round is in flight)
  torch::Tensor delta_;          // the pseudo-gradient handed to the exchange (CPU)
  std::optional<EagerOuter> eager_;  // Note [Eager outer steps]: with --overlap-steps and the eager rule
  double step_exchange_wait_s_ = 0;  // this step's time blocked on the exchange (waiting_on_exchange)
  struct StepRound {
    int contributors;
    uint64_t bytes_written;
  };
  std::optional<StepRound> step_round_;  // the per-step round this step applied, for its metrics line
  exchange::RoundBox box_;  // DiLoCo: the inner steps of the round this worker computes in, and its time box
  // --emulate-workers with DiLoCo: each emulated worker's own parameters and inner moments.
  struct EmulatedReplica {
    torch::Tensor params, exp_avg, exp_avg_sq;
    int64_t optimizer_step = 0;
    std::vector<int64_t> round_tokens;  // per fragment, since its last round
    // A round in flight (--overlap-steps): what its late step merges against over the fragment;
    // the replica's tokens in its last round.
    torch::Tensor sent;
    uint64_t own_tokens = 0;
    std::optional<EagerOuter> eager;
  };
  std::vector<EmulatedReplica> replicas_;
  bool reloaded_ = false;  // the last round reloaded the agreed state instead of stepping
  bool resumed_ = false;
  bool disk_low_warned_ = false;  // warn_if_disk_low said so, and the disk is still low
};

}  // namespace gradbox::worker

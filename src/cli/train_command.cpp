// gradbox train: flags map onto worker::TrainConfig; a --config JSON file gives the base and
// flags given on the command line override it. SIGINT/SIGTERM stop the run at the next step
// boundary with a checkpoint, so the same command resumes it.
#include <csignal>

#include "cli/commands.h"
#include "common/json_file.h"
#include "common/error.h"
#include "common/log.h"
#include "worker/trainer.h"

namespace gradbox::cli {
namespace {

volatile std::sig_atomic_t g_stop_signal = 0;

void on_stop_signal(int signal) { g_stop_signal = signal; }

// A flag given twice takes its last value, so scripts can append overrides.
CLI::Option* take_last(CLI::Option* option) {
  return option->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
}

// A flag bound to one TrainConfig field, applied only when given on the command line.
class TrainFlags {
 public:
  explicit TrainFlags(CLI::App* cmd) : cmd_(cmd) {}

  template <class T>
  void add(const std::string& name, T worker::TrainConfig::*field, const std::string& help) {
    auto value = std::make_shared<T>(defaults_.*field);
    CLI::Option* opt = take_last(cmd_->add_option(name, *value, help)->capture_default_str());
    appliers_.push_back([opt, value, field](worker::TrainConfig& c) {
      if (opt->count() > 0) c.*field = *value;
    });
  }
  // A flag parsed from text (enums, paths).
  template <class T>
  void add_parsed(const std::string& name, T worker::TrainConfig::*field, const std::string& default_text,
                  std::function<T(const std::string&)> parse, const std::string& help) {
    auto text = std::make_shared<std::string>(default_text);
    CLI::Option* opt = take_last(cmd_->add_option(name, *text, help)->capture_default_str());
    appliers_.push_back([opt, text, field, parse](worker::TrainConfig& c) {
      if (opt->count() > 0) c.*field = parse(*text);
    });
  }

  void apply(worker::TrainConfig& config) const {
    for (const auto& apply : appliers_) apply(config);
  }

 private:
  CLI::App* cmd_;
  worker::TrainConfig defaults_;
  std::vector<std::function<void(worker::TrainConfig&)>> appliers_;
};

std::filesystem::path to_path(const std::string& text) { return text; }

}  // namespace

void add_train_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("train", "Train a model on a prepared data folder (resumes when the run folder has a checkpoint)");
  auto flags = std::make_shared<TrainFlags>(cmd);
  auto config_file = std::make_shared<std::string>();
  auto stop_at_step = std::make_shared<int64_t>(0);
  cmd->add_option("--config", *config_file, "JSON file with train settings; flags override it");
  flags->add_parsed<std::filesystem::path>("--data", &worker::TrainConfig::data_dir, "", to_path,
                                           "Prepared data folder (gradbox prepare)");
  flags->add_parsed<std::filesystem::path>("--out", &worker::TrainConfig::out_dir, "runs/default", to_path,
                                           "Run folder: checkpoints, metrics.jsonl, tokenizer");
  flags->add("--model", &worker::TrainConfig::model, "Preset name or model config .json");
  flags->add_parsed<std::filesystem::path>("--init-from", &worker::TrainConfig::init_from, "", to_path,
                                           "Hugging Face folder to fine-tune from");
  flags->add("--micro-batch", &worker::TrainConfig::micro_batch, "Sequences per forward/backward");
  flags->add("--block-size", &worker::TrainConfig::block_size, "Tokens per sequence (0: the model's)");
  flags->add("--grad-accum", &worker::TrainConfig::grad_accum, "Micro-batches per optimizer step");
  flags->add("--max-steps", &worker::TrainConfig::max_steps, "Optimizer steps in the whole run");
  flags->add_parsed<worker::OptimizerKind>("--optimizer", &worker::TrainConfig::optimizer, "adamw",
                                           worker::parse_optimizer, "adamw or lamb");
  flags->add("--lr", &worker::TrainConfig::lr, "Peak learning rate");
  flags->add("--min-lr", &worker::TrainConfig::min_lr, "Learning rate at the end of the cosine");
  flags->add("--warmup-steps", &worker::TrainConfig::warmup_steps, "Linear warmup steps");
  flags->add("--weight-decay", &worker::TrainConfig::weight_decay, "Decoupled weight decay (not on biases, norms, embeddings)");
  flags->add("--beta1", &worker::TrainConfig::beta1, "Adam beta1");
  flags->add("--beta2", &worker::TrainConfig::beta2, "Adam beta2");
  flags->add("--eps", &worker::TrainConfig::eps, "Adam epsilon");
  flags->add("--grad-clip", &worker::TrainConfig::grad_clip, "Clip the global gradient norm (0: off)");
  flags->add("--dropout", &worker::TrainConfig::dropout, "Dropout probability");
  flags->add("--activation-checkpointing", &worker::TrainConfig::activation_checkpointing,
             "none, alternate, first_last, all or custom:0,3,5");
  flags->add("--eval-interval", &worker::TrainConfig::eval_interval, "Steps between validation runs (0: never)");
  flags->add("--eval-batches", &worker::TrainConfig::eval_batches, "Micro-batches per validation run");
  flags->add("--checkpoint-interval", &worker::TrainConfig::checkpoint_interval, "Steps between checkpoints (0: end only, -1: never)");
  flags->add("--keep-checkpoints", &worker::TrainConfig::keep_checkpoints, "Checkpoints kept in the run folder");
  flags->add("--log-interval", &worker::TrainConfig::log_interval, "Steps between progress lines");
  flags->add("--seed", &worker::TrainConfig::seed, "Seed for weights, data order and dropout");
  flags->add("--device", &worker::TrainConfig::device, "auto, cpu, cuda or cuda:N");
  flags->add_parsed<worker::Precision>("--precision", &worker::TrainConfig::precision, "auto", worker::parse_precision,
                                       "auto (bf16 on CUDA, fp32 on CPU), fp32, bf16 or fp16");
  flags->add("--threads", &worker::TrainConfig::threads, "CPU threads (0: cores / local workers)");
  flags->add("--local-workers", &worker::TrainConfig::local_workers, "gradbox processes sharing this machine");
  take_last(cmd->add_option("--stop-at-step", *stop_at_step, "Stop after this step with a checkpoint, as if interrupted (0: never)"));

  cmd->callback([flags, config_file, stop_at_step] {
    worker::TrainConfig config;
    if (!config_file->empty()) {
      config = worker::TrainConfig::from_json(read_json_file(*config_file), *config_file);
    }
    flags->apply(config);

    worker::Trainer trainer(config);
    std::signal(SIGINT, on_stop_signal);
    std::signal(SIGTERM, on_stop_signal);
    const int64_t stop_at = *stop_at_step;
    worker::TrainSummary summary = trainer.run([stop_at](int64_t step) {
      return g_stop_signal != 0 || (stop_at > 0 && step >= stop_at);
    });
    std::signal(SIGINT, SIG_DFL);
    std::signal(SIGTERM, SIG_DFL);
    log::Logger("train").info(str("done: steps ", summary.start_step, " -> ", summary.end_step, ", last loss ",
                                  summary.last_loss, ", val loss ", summary.last_val_loss, ", ",
                                  static_cast<int64_t>(summary.tokens_per_second), " tok/s, checkpoint ",
                                  summary.last_checkpoint.string()));
  });
}

}  // namespace gradbox::cli

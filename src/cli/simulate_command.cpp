// gradbox simulate: projects a cluster's speed-up by running the folder protocol in virtual time
// (Note [Speed-up projection] in sim/projection.h). A subcommand, not a script: it runs
// gradbox's own protocol code, which only the C++ libraries have.
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <sstream>

#include "cli/commands.h"
#include "common/error.h"
#include "common/log.h"
#include "kernels/adamw_q8.h"
#include "sim/projection.h"
#include "sim/token_efficiency.h"
#include "worker/train_config.h"

namespace gradbox::cli {
namespace {

// Model FLOPs per token: 6N for the matmuls' forward and backward, plus attention's
// 12 * layers * width * block (PaLM's appendix B accounting).
struct ModelShape {
  uint64_t parameters;
  int layers, width;
};
const std::map<std::string, ModelShape>& model_shapes() {
  static const std::map<std::string, ModelShape> shapes = {
      {"gpt2", {124'439'808, 12, 768}},
      {"gpt2-medium", {354'823'168, 24, 1024}},
      {"gpt2-large", {774'030'080, 36, 1280}},
      {"gpt2-xl", {1'557'611'200, 48, 1600}},
  };
  return shapes;
}

// Peak dense fp16 FLOP/s from NVIDIA's data sheets (T4: 65 TFLOPS mixed precision on tensor
// cores; P100 PCIe: 18.7 TFLOPS fp16) and the model-FLOPs utilisation we assume a training step
// reaches on them (not measured here: no GPU was lent). --tokens-per-s overrides the result.
struct Gpu {
  double peak_flops;
  double mfu;
};
const std::map<std::string, Gpu>& gpus() {
  static const std::map<std::string, Gpu> table = {{"t4", {65e12, 0.25}}, {"p100", {18.7e12, 0.35}}};
  return table;
}

// Wire bytes per parameter after the codec: fp16 and int8 from FACTS.md's ratios on real
// gradients (2.72x and 5.97x smaller than fp32), int4 from diloco_bench's bytes (4.2x below fp16).
// The source run saved raw fp16 (2 bytes).
const std::map<std::string, double>& codec_bytes() {
  static const std::map<std::string, double> table = {{"fp16-raw", 2.0}, {"fp16", 4 / 2.72}, {"int8", 4 / 5.97}, {"int4", 4 / 2.72 / 4.2}};
  return table;
}

std::vector<int> parse_counts(const std::string& text) {
  std::vector<int> counts;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    GB_REQUIRE(!item.empty() && item.size() <= 3 && item.find_first_not_of("0123456789") == std::string::npos,
               "--workers: '", item, "' is not a worker count (say 5, or 1,2,4,8,16)");
    counts.push_back(std::stoi(item));
    GB_REQUIRE(counts.back() >= 1 && counts.back() <= 256, "--workers: ", counts.back(), " outside 1..256");
  }
  GB_REQUIRE(!counts.empty(), "--workers: no worker count given");
  return counts;
}

struct Options {
  std::string workers = "5";
  std::string model = "gpt2-large";
  std::string gpu = "t4";
  double tokens_per_s = 0;
  int block = 2048, micro_batch = 2, grad_accum = 125;
  bool activation_checkpointing = true;
  std::string mode = "per-step";
  std::string codec = "fp16";
  std::string moments = "fp32";
  bool source_scheme = false;
  bool overlap = false;
  bool worker_logs = false;
  double upload_cap_gb = 750;
  int inner_steps = 0;            // 0: 1 per step, `gradbox train`'s default with DiLoCo
  double token_efficiency = 0;    // 0: 1 per step, Note [Token efficiency]'s estimate with DiLoCo
  sim::ProjectionConfig config;
};

void run(const Options& o) {
  // The simulated workers log as real ones do: thousands of lines a projection.
  if (!o.worker_logs) log::setup(log::Level::error);
  const std::vector<int> worker_counts = parse_counts(o.workers);
  sim::ProjectionConfig c = o.config;
  const auto shape = model_shapes().find(o.model);
  GB_REQUIRE(shape != model_shapes().end(), "--model: unknown '", o.model, "' (gpt2, gpt2-medium, gpt2-large, gpt2-xl)");
  c.model_parameters = shape->second.parameters;
  c.tokens_per_step = static_cast<uint64_t>(o.block) * o.micro_batch * o.grad_accum;
  GB_REQUIRE(c.tokens_per_step > 0, "--block, --micro-batch and --grad-accum must be positive");
  double flops_per_token = 6.0 * static_cast<double>(shape->second.parameters) +
                           12.0 * shape->second.layers * shape->second.width * o.block;
  if (o.activation_checkpointing) flops_per_token *= 4.0 / 3;  // the forward runs twice
  if (o.tokens_per_s > 0) {
    c.tokens_per_s = o.tokens_per_s;
  } else {
    const auto gpu = gpus().find(o.gpu);
    GB_REQUIRE(gpu != gpus().end(), "--gpu: unknown '", o.gpu, "' (t4, p100), or give --tokens-per-s");
    c.tokens_per_s = gpu->second.peak_flops * gpu->second.mfu / flops_per_token;
  }
  if (o.mode == "per-step") c.mode = sim::ProjectedMode::per_step_all_gather;
  else if (o.mode == "per-step-sharded") c.mode = sim::ProjectedMode::per_step_sharded;
  else if (o.mode == "diloco") c.mode = sim::ProjectedMode::diloco;
  else throw InputError(str("--mode: unknown '", o.mode, "' (per-step, per-step-sharded, diloco)"));
  const bool diloco = c.mode == sim::ProjectedMode::diloco;
  c.inner_steps = o.inner_steps > 0 ? o.inner_steps : diloco ? static_cast<int>(worker::TrainConfig{}.inner_steps) : 1;
  GB_REQUIRE(o.token_efficiency >= 0 && o.token_efficiency <= 1.5, "--token-efficiency: must be in (0, 1.5], got ",
             o.token_efficiency);
  if (o.overlap) {
    GB_REQUIRE(c.mode != sim::ProjectedMode::diloco, "--overlap: per-step modes only (DiLoCo: --overlap-steps)");
    c.overlap_steps = 1;
  }
  const auto codec = codec_bytes().find(o.codec);
  GB_REQUIRE(codec != codec_bytes().end(), "--codec: unknown '", o.codec, "' (fp16-raw, fp16, int8, int4)");
  c.wire_bytes_per_parameter = codec->second;
  // A joiner's checkpoint carries the moments as the workers store them.
  if (worker::parse_moments(o.moments) == worker::MomentStorage::int8)
    c.moment_bytes_per_parameter = static_cast<double>(kernels::q8_moment_bytes(static_cast<int64_t>(c.model_parameters))) /
                                   static_cast<double>(c.model_parameters);
  if (o.source_scheme) {  // Article 1: raw fp16 files, every worker waits for every other
    c.mode = sim::ProjectedMode::per_step_all_gather;
    c.wire_bytes_per_parameter = codec_bytes().at("fp16-raw");
    c.wait_for_all = true;
  } else {
    c.upload_cap_gb = o.upload_cap_gb;  // gradbox slows a run down before the cap; the source run had no such rule
  }
  std::printf("%s, %.0f tokens/s per worker (%s), %llu tokens per step; %s, %.2f wire bytes/parameter%s; "
              "checkpoints with %s moments; links up %.0f / down %.0f MB/s, lag median %.0f s, p90 %.0f s; sessions %s\n",
              o.model.c_str(), c.tokens_per_s, o.tokens_per_s > 0 ? "given" : o.gpu.c_str(),
              static_cast<unsigned long long>(c.tokens_per_step), sim::mode_name(c.mode), c.wire_bytes_per_parameter,
              c.mode == sim::ProjectedMode::diloco
                  ? str(", H=", c.inner_steps, c.round_seconds > 0 ? str(", rounds of ", c.round_seconds, " s") : "",
                        c.overlap_steps > 0 ? str(", ", c.overlap_steps, " steps overlapped") : "").c_str()
                  : (c.overlap_steps > 0 ? ", overlapped" : ""),
              o.moments.c_str(), c.upload_mb_s,
              c.download_mb_s, c.lag_median_s, c.lag_p90_s,
              c.session_mean_hours > 0 ? str("live ", c.session_mean_hours, " h on average (at most ", c.session_cap_hours,
                                             " h), ", c.setup_minutes, " min to set up").c_str()
                                       : "never die");
  std::printf("speed-up: over one worker that only computes (a session that never dies, sets up or waits); "
              "to loss: the speed-up in time to the loss one worker reaches in the same hours, the speed-up times the "
              "mode's token efficiency (%s)\n",
              o.token_efficiency > 0 ? "given"
              : diloco ? "DiLoCo's from-scratch loss gap at this size and worker count, from the DiLoCo scaling-laws "
                         "paper's size trend, with what overlap measured at how late this run's outer steps landed, in "
                         "tokens by Chinchilla's law: Note [Token efficiency]"
                       : "1: per-step averaging is exact data parallelism");
  std::printf("%7s %10s %13s %12s %9s %10s %8s %11s %10s %14s %7s %6s %8s\n", "workers", "s/round", "contributors",
              "tokens/s", "speed-up", "token eff.", "to loss", "utilisation", "up GB/day", "(rounds' files)", "deaths",
              "joins", "hours");
  for (int workers : worker_counts) {
    c.workers = workers;
    const sim::Projection p = sim::project(c);
    // Overlap costs loss by how late the outer steps landed under the inner ones, as measured.
    const double efficiency = o.token_efficiency > 0 ? o.token_efficiency
                              : diloco ? sim::token_efficiency_from_gap(
                                             static_cast<double>(c.model_parameters),
                                             sim::overlapped_loss_gap(
                                                 sim::diloco_loss_gap(static_cast<double>(c.model_parameters), workers),
                                                 p.overlap_fraction))
                                       : 1.0;
    for (const std::string& f : p.failures) std::fprintf(stderr, "simulate: a simulated process failed: %s\n", f.c_str());
    std::printf("%7d %10.1f %13.2f %12.0f %8.2fx %10.2f %7.2fx %10.0f%% %10.1f %14.1f %7d %6d %8.1f\n", workers,
                p.seconds_per_round, p.mean_contributors, p.cluster_tokens_per_s, p.speedup, efficiency,
                p.speedup * efficiency, 100 * p.utilisation, p.upload_gb_per_worker_day,
                p.round_upload_gb_per_worker_day, p.deaths, p.joins, p.virtual_hours);
    const sim::Projection::TimeShares& t = p.time;
    std::printf("%7s time: %.1f%% in averages, %.1f%% lost with dying sessions, %.1f%% left out, %.1f%% set-up, "
                "%.1f%% starting or joining, %.1f%% waiting;%s upload %.0f%% of --upload-cap-gb %.0f%s\n",
                "", 100 * t.useful, 100 * t.lost_at_death, 100 * t.left_out, 100 * t.setup, 100 * t.joining, 100 * t.idle,
                p.joins > 0 ? str(" a joiner's first step ", std::lround(p.join_median_s), " s after its set-up (median);").c_str()
                            : "",
                100 * p.upload_gb_per_worker_day / o.upload_cap_gb, o.upload_cap_gb,
                p.final_grad_accum > 1 ? str(" (slowed down to stay under it: grad_accum x", p.final_grad_accum, " by the end)").c_str()
                                       : "");
    if (diloco && c.overlap_steps > 0)
      std::printf("%7s overlap: outer steps landed %.2f of a round late (steps behind the exchange over a round's "
                  "steps less one; 1 at tau = H - 1)\n", "", p.overlap_fraction);
    std::fflush(stdout);
  }
}

}  // namespace

void add_simulate_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand(
      "simulate", "Project a cluster's tokens/s and speed-up over one worker by running the folder protocol in virtual time");
  auto o = std::make_shared<Options>();
  cmd->add_option("--workers", o->workers, "Worker count, or a comma-separated list to sweep")->capture_default_str();
  cmd->add_option("--model", o->model, "gpt2, gpt2-medium, gpt2-large, gpt2-xl")->capture_default_str();
  cmd->add_option("--gpu", o->gpu, "t4 or p100: peak fp16 FLOP/s and an assumed utilisation give tokens/s")->capture_default_str();
  cmd->add_option("--tokens-per-s", o->tokens_per_s, "One worker's measured training tokens/s (instead of --gpu)");
  cmd->add_option("--block", o->block, "Tokens per sequence")->capture_default_str();
  cmd->add_option("--micro-batch", o->micro_batch, "Sequences per micro-batch")->capture_default_str();
  cmd->add_option("--grad-accum", o->grad_accum, "Micro-batches per step")->capture_default_str();
  cmd->add_flag("!--no-activation-checkpointing", o->activation_checkpointing,
                "The model fits without recomputing activations (else the forward runs twice)");
  cmd->add_option("--mode", o->mode, "per-step, per-step-sharded or diloco")->capture_default_str();
  cmd->add_flag("--overlap", o->overlap, "Per step: exchange a step's gradient while the next one computes");
  cmd->add_option("--overlap-steps", o->config.overlap_steps,
                  "DiLoCo: inner steps that compute while a round's exchange runs (< --inner-steps)")
      ->capture_default_str();
  cmd->add_option("--inner-steps", o->inner_steps, "DiLoCo: steps per round (default: gradbox train's, 50)");
  cmd->add_option("--token-efficiency", o->token_efficiency,
                  "The mode's token efficiency: per-step's tokens for the loss the mode reaches over the mode's tokens "
                  "(scripts/bench/quality_bench.sh measures it; default: 1 per step, with DiLoCo an estimate from the "
                  "papers' size trend and the benchmark's cost of overlap at the lateness the run shows, which assumes "
                  "the small model's measured figures carry to the projected size: Note [Token efficiency])");
  cmd->add_option("--round-seconds", o->config.round_seconds,
                  "DiLoCo: time-boxed rounds of this many seconds (joiners enter the round in progress); with "
                  "--overlap-steps, every box closes this long after the round before was agreed (gradbox's best mode)");
  cmd->add_option("--partial-every", o->config.partial_every,
                  "DiLoCo with --round-seconds and --overlap-steps: publish the delta so far every this many inner steps, "
                  "so a session that dies mid-round still contributes its steps (0: off)")
      ->capture_default_str();
  cmd->add_option("--upload-cap-gb", o->upload_cap_gb, "Each account's daily upload cap, GB (Drive: about 750)")
      ->capture_default_str();
  cmd->add_option("--codec", o->codec, "fp16-raw, fp16, int8 or int4 (wire bytes per parameter)")->capture_default_str();
  cmd->add_option("--moments", o->moments,
                  "The workers' --moments, fp32 or int8: what a joiner's checkpoint carries (GPT-2-Large fits a T4 at "
                  "the default batch only with int8: gradbox train --memory-report)")
      ->capture_default_str();
  cmd->add_flag("--source-scheme", o->source_scheme,
                "The source article's scheme: raw fp16 gradients, every worker waits for all, every step");
  cmd->add_option("--contribution-timeout", o->config.contribution_timeout_s, "Seconds an owner waits for a slow peer")
      ->capture_default_str();
  cmd->add_option("--upload-mbps", o->config.upload_mb_s, "Each session's upload to the folder, MB/s")->capture_default_str();
  cmd->add_option("--download-mbps", o->config.download_mb_s, "Each session's download, MB/s")->capture_default_str();
  cmd->add_option("--lag-median", o->config.lag_median_s, "Seconds before another session sees a new file: median")
      ->capture_default_str();
  cmd->add_option("--lag-p90", o->config.lag_p90_s, "... and 90th percentile (log-normal)")->capture_default_str();
  cmd->add_option("--request-s", o->config.request_s, "The folder's overhead per uploaded file, seconds")->capture_default_str();
  cmd->add_option("--lost-listing", o->config.lost_listing, "Probability a listing misses a file for another lag")
      ->capture_default_str();
  cmd->add_option("--partial", o->config.partial, "Probability a first copy is partial (a placeholder)")->capture_default_str();
  cmd->add_option("--session-mean-hours", o->config.session_mean_hours, "Mean session life (0: sessions never die)")
      ->capture_default_str();
  cmd->add_option("--session-cap-hours", o->config.session_cap_hours, "Longest session life")->capture_default_str();
  cmd->add_option("--setup-minutes", o->config.setup_minutes, "A new session's set-up before its worker starts")
      ->capture_default_str();
  cmd->add_option("--checkpoint-hours", o->config.checkpoint_hours,
                  "Hours of compute between folder checkpoints (weights + optimizer state, for joiners)")
      ->capture_default_str();
  cmd->add_option("--hours", o->config.hours, "Hours of one worker's compute to project")->capture_default_str();
  cmd->add_option("--seed", o->config.seed, "Seed of the lags and the sessions' lives")->capture_default_str();
  cmd->add_flag("--worker-logs", o->worker_logs, "Keep the simulated workers' logs (at --log-level); else errors only");
  cmd->footer(
      "Columns: s/round, the mean virtual seconds between agreed rounds; contributors, the mean over rounds of the "
      "contributions a round's average counts (a dead or late worker is left out; partial deltas and late entrants "
      "count too, so it can exceed the worker count); tokens/s, the cluster's tokens in agreed averages per second; speed-up, that "
      "over one worker that only computes (an ideal session: never dies, sets up or waits), not over one free "
      "session; token eff. and to loss, see --token-efficiency; hours, the virtual hours until the last round was "
      "applied (--hours of one worker's compute, plus what waiting and dying sessions cost).");
  cmd->callback([o] { run(*o); });
}

}  // namespace gradbox::cli

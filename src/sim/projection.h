#pragma once
// Note [Speed-up projection]
// What a cluster of free sessions trains per second through a cloud folder, found by running
// gradbox's own folder protocol in virtual time: every worker is a simulated worker
// (sim_worker.h) running the real FolderExchange (agreement, deadlines, failover, joins,
// folder checkpoints, repair) on the simulated folder (memory_mirror.h). What is modelled
// instead of run, and how:
//   - compute: a worker sleeps tokens_per_step / tokens_per_s per step; with overlap (per
//     step --overlap, DiLoCo --overlap-steps τ) the next τ steps (overlapped boxes: the next
//     box's, Note [Round policy] in exchange/round_policy.h) compute while a round's
//     exchange runs, so they are charged only what the exchange's wait did not cover (the
//     exchange is assumed to take no compute from them: true of a GPU worker, not of the
//     2-core CPU clusters the validation test runs);
//   - transfers: each session's link uploads and downloads one file at a time at the given
//     MB/s, checkpoint parts only while nothing else waits (Note [Upload order]), and a file is
//     charged the size it would have for the real model (contributions and reduced shards:
//     parameters x wire bytes per parameter / shards; a checkpoint's parts: an equal share of
//     the state each: fp32 weights, the moments as stored, DiLoCo's fp32 outer state), while
//     the simulated model itself is tiny;
//   - the folder: a log-normal visibility lag per (viewer, file), a per-file request overhead,
//     listings that miss a file for another lag, first copies that are partial;
//   - sessions' lives: each session dies without warning after an exponential lifetime (capped,
//     as Colab caps a session), and a new session under the same name comes back after a
//     set-up time, with an empty disk: it joins from the newest folder checkpoint;
//   - Drive's daily upload cap: each worker's uploads count at their charged sizes, so that the
//     exchange's own rule (Note [Slowing down before the upload cap]) doubles grad_accum when
//     the pace nears the cap, as it would in the run.
// Validated against measured clusters (tests/cli/simulator_validation_test.cpp): three real
// workers through the cloud-folder simulator, projected from their measured compute, within
// ±20% in time per round and tokens/s (per step sharded with and without overlap, DiLoCo).
// The projection is the run's own arithmetic: tokens in the agreed averages divided by the
// virtual time they took, against one worker that only computes. Torch-free.
#include <cstdint>
#include <string>
#include <vector>

namespace gradbox::sim {

enum class ProjectedMode { per_step_all_gather, per_step_sharded, diloco };
const char* mode_name(ProjectedMode mode);

struct ProjectionConfig {
  int workers = 5;
  uint64_t model_parameters = 774'030'080;  // GPT-2-Large
  uint64_t tokens_per_step = 2 * 125 * 2048;  // per worker per optimizer step (the source run)
  double tokens_per_s = 2000;               // one worker's compute, exchange aside
  ProjectedMode mode = ProjectedMode::per_step_all_gather;
  // Steps computed while a round's exchange runs: 1 per step (--overlap), τ < H with DiLoCo.
  int overlap_steps = 0;
  int inner_steps = 1;                      // DiLoCo: steps per round
  // DiLoCo: > 0 time-boxes rounds to this many seconds, and a joiner computes in the round in
  // progress (Note [Late entry] in exchange/folder_exchange.h) instead of waiting for the next.
  double round_seconds = 0;
  // DiLoCo with overlapped time boxes: the Δ so far is published every this many inner steps,
  // so that a session dying mid-box still contributes its steps (Note [Partial deltas]).
  int partial_every = 0;
  double wire_bytes_per_parameter = 2;      // after the codec (fp16 + zstd ~ 2 / 1.2)
  // AdamW's two moments in a folder checkpoint: 8 fp32, about 2.06 with 8-bit moments
  // (--moments int8, Note [8-bit moments]), which GPT-2-Large needs on a T4 at the source run's
  // batch.
  double moment_bytes_per_parameter = 8;
  // The source scheme waits for every worker, every step; gradbox bounds the wait.
  bool wait_for_all = false;
  double contribution_timeout_s = 300;
  double deadline_floor_s = 30;             // of the adaptive deadline (capped by the timeout)
  // The folder and each session's link.
  double upload_mb_s = 20, download_mb_s = 60;  // README's "Projecting the speed-up" says why
  double lag_median_s = 20, lag_p90_s = 120;
  double request_s = 1;      // per file uploaded: the folder's own overhead
  double lost_listing = 0;   // probability a listing misses a due file (another lag)
  double partial = 0;        // probability a first copy is partial (another lag)
  // How often the syncer lists the folder and a worker looks at its mirror; 0 for the worker:
  // a thousandth of a round, 1 to 10 s (a finer poll only costs simulation time at Drive's lags).
  double syncer_pass_s = 1;
  double poll_s = 0;
  double heartbeat_interval_s = 30;
  // Sessions: mean lifetime (0: they never die), the cap, and a new session's set-up before its
  // worker starts (install, cached build, data); its checkpoint download is simulated.
  double session_mean_hours = 0, session_cap_hours = 12, setup_minutes = 10;
  // Folder checkpoints (weights and optimizer state, for joiners) every so many hours of
  // compute; the first and the last are always published.
  double checkpoint_hours = 1;
  // Each account's upload per 24 h (Drive: about 750 GB); 0: none (the source scheme had no
  // such rule, and the calibration projects it as it ran).
  double upload_cap_gb = 0;
  double hours = 24;         // virtual hours of training to project
  uint64_t seed = 1;
};

struct Projection {
  double cluster_tokens_per_s = 0;
  double one_worker_tokens_per_s = 0;
  double speedup = 0;        // cluster / one worker
  double utilisation = 0;    // speedup / workers
  double seconds_per_round = 0;
  double mean_contributors = 0;  // in a round's average (workers left out by a deadline lose that round's compute)
  // DiLoCo with overlap: the inner steps computed behind a round's exchange over the round's
  // inner steps less one, over the workers' contributions (0 without overlap, 1 at τ = H - 1):
  // how late outer steps landed, which is what overlap costs in loss (Note [Token efficiency]).
  // Overlapped boxes apply a round once agreed, so this is the folder's lag, not --overlap-steps.
  double overlap_fraction = 0;
  uint64_t rounds = 0;
  double virtual_hours = 0;  // until the last round was applied
  // The busiest worker's upload (over its sessions), per day of the run: everything, and the
  // rounds' files alone (the rest is folder checkpoints, heartbeats, fingerprints).
  double upload_gb_per_worker_day = 0;
  double round_upload_gb_per_worker_day = 0;
  int deaths = 0, joins = 0;
  // The grad_accum the last round was computed with: above 1 when the run slowed down to stay
  // under the upload cap (each doubling halves the bytes per token).
  int64_t final_grad_accum = 1;
  // Where the workers' time went, as shares of workers x the run's length (they sum to 1):
  // steps whose tokens are in an agreed average (the utilisation), steps lost with a session
  // that died, steps left out of averages by live workers (too late), new sessions' set-up,
  // starting (the founders) or joining (checkpoint fetch, replay) until a session's first step,
  // and the rest: waiting on the exchange, and the run's end.
  struct TimeShares {
    double useful = 0, lost_at_death = 0, left_out = 0, setup = 0, joining = 0, idle = 0;
  } time;
  // A new session's seconds from its worker's start to its first step (checkpoint, replay,
  // entry), the median over the joins that got that far; the set-up comes before.
  double join_median_s = 0;
  std::vector<std::string> failures;      // processes that ended with an error (none expected)
};

Projection project(const ProjectionConfig& config);

}  // namespace gradbox::sim

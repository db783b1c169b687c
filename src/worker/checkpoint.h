#pragma once
// Training checkpoints: everything a run needs to continue bit for bit.
//
//   RUN/checkpoints/step_00000100/
//     model.safetensors      parameters by name (also what `export` and `sample` read)
//     optimizer.safetensors  flat moments, the CPU/CUDA RNG states and, in DiLoCo rounds, the
//                            outer state (outer.global, outer.momentum); outer.global only when
//                            it is not the parameters (state.json's outer.global says which)
//     state.json             step, round, tokens, optimizer step, model and train config
//     manifest.json          written last: every file's size and XXH3 checksum
//
// The folder is written as step_00000100.tmp.PID, each file temp -> fsync -> rename, the
// manifest last, then the folder is renamed into place and its parent fsynced. A folder
// without a valid manifest is never loaded; a newer broken one is skipped with a warning.
#include <torch/torch.h>

#include <filesystem>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/config.h"
#include "worker/flat_parameters.h"

namespace gradbox::worker {

namespace fs = std::filesystem;

// DiLoCo's outer state (Note [DiLoCo rounds] in worker/outer_optimizer.h), flat, on any device.
struct OuterState {
  // θ_g. Saved once when it equals the parameters (at a round's end with one fragment and the
  // delayed rule, as every checkpoint a folder publishes in the headline's mode): 4 of ~14
  // bytes a parameter that a joiner downloads. Loaded undefined then: θ_g is the parameters.
  torch::Tensor global;
  torch::Tensor momentum;
  // Per fragment (one without --fragments): this worker's tokens in the inner steps since the
  // fragment's last round, and their loss, summed token-weighted.
  std::vector<int64_t> round_tokens = {0};
  std::vector<double> round_loss_sum = {0.0};
  // Note [Eager outer steps] in worker/eager_outer.h: the offset from θ_g, its momentum and the
  // share last applied early (flat), and per fragment the others' tokens; undefined without the rule.
  torch::Tensor eager_offset, eager_momentum, eager_sent_share;
  std::vector<int64_t> eager_tokens;
};

struct CheckpointState {
  int64_t step = 0;   // optimizer steps completed
  int64_t round = 0;  // exchange rounds applied (per-step sync: = step; older checkpoints lack it)
  int64_t tokens = 0;
  int64_t optimizer_step = 0;
  double loss_scale = 1.0;     // fp16's dynamic loss scale (Note [Mixed precision] in loss_scale.h)
  int64_t loss_scale_good_steps = 0;
  nlohmann::json model_config;
  nlohmann::json train_config;
  nlohmann::json control = nlohmann::json::object();  // live control in effect (folder_exchange.h)
  nlohmann::json spike_guard;  // the guard's window (Note [Spike guard] in spike_guard.h); null: none
};

struct CheckpointData {
  CheckpointState state;
  std::map<std::string, torch::Tensor> parameters;  // by name, on CPU
  // The optimizer's moments by name, on CPU, in either form (Optimizer::moment_tensors).
  std::map<std::string, torch::Tensor> moments;
  torch::Tensor cpu_rng;
  std::vector<torch::Tensor> cuda_rngs;
  std::optional<OuterState> outer;  // on CPU; present when the run syncs by DiLoCo rounds
};

fs::path checkpoint_root(const fs::path& run_dir);

// Writes a checkpoint for `state.step` and returns its folder.
fs::path save_checkpoint(const fs::path& run_dir, const CheckpointState& state, const FlatParameters& flat,
                         const std::vector<std::pair<std::string, torch::Tensor>>& moments,
                         const OuterState* outer = nullptr);

// Makes `fetched` (a checkpoint the exchange fetched from the shared folder, named by the
// rounds it holds) the run's checkpoint of `step`: every other local checkpoint of that step or
// later holds an abandoned state and is removed, and `fetched` is renamed to step_<step>.
fs::path adopt_checkpoint(const fs::path& run_dir, const fs::path& fetched, int64_t step);

// Throws InputError naming the file and the reason when the folder is not a whole checkpoint.
void verify_checkpoint(const fs::path& dir);

// The newest verified checkpoint of a run, skipping (and logging) broken or unfinished ones.
std::optional<fs::path> find_latest_checkpoint(const fs::path& run_dir);

// Where a rollback goes (Note [Spike guard]): the newest verified checkpoint at a multiple of
// `interval` at or before `step` (every member of a run wrote one there), else the newest at or
// before `step`; nullopt when there is none.
std::optional<fs::path> find_rollback_checkpoint(const fs::path& run_dir, int64_t step, int64_t interval);

// A run folder (its newest checkpoint) or a checkpoint folder; verified first.
CheckpointData load_checkpoint(const fs::path& run_or_checkpoint);
// Resolves a run folder to its newest checkpoint folder; InputError when there is none.
fs::path resolve_checkpoint(const fs::path& run_or_checkpoint);

// Copies checkpoint tensors into a live model's flat buffers and optimizer moments; parameter
// names and shapes must match (InputError naming the checkpoint otherwise).
void restore_parameters(const CheckpointData& data, FlatParameters& flat, const fs::path& where);
void restore_rng(const CheckpointData& data);

// Keeps the newest `keep` checkpoint folders that have a manifest; removes older ones,
// manifest-less ones and unfinished *.tmp.* folders.
void prune_checkpoints(const fs::path& run_dir, int64_t keep);

}  // namespace gradbox::worker

#include "worker/checkpoint.h"

#include <unistd.h>

#include <algorithm>
#include <regex>

#include "common/atomic_file.h"
#include "common/checksum.h"
#include "common/error.h"
#include "common/json_file.h"
#include "common/log.h"
#include "model/safetensors.h"
#include "worker/loss_scale.h"

namespace gradbox::worker {
namespace {

constexpr const char* kFormat = "gradbox-checkpoint";
constexpr int kVersion = 1;
const std::vector<std::string> kFiles = {"model.safetensors", "optimizer.safetensors", "state.json"};

const log::Logger& logger() {
  static const log::Logger instance("checkpoint");
  return instance;
}

std::string step_name(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step_%08lld", static_cast<long long>(step));
  return name;
}

// Finished checkpoint folders, newest first.
std::vector<std::pair<int64_t, fs::path>> list_checkpoints(const fs::path& run_dir) {
  std::vector<std::pair<int64_t, fs::path>> found;
  const fs::path root = checkpoint_root(run_dir);
  if (!fs::is_directory(root)) return found;
  static const std::regex pattern("step_(\\d{8,})");
  for (const auto& entry : fs::directory_iterator(root)) {
    std::smatch match;
    const std::string name = entry.path().filename().string();
    if (entry.is_directory() && std::regex_match(name, match, pattern))
      found.emplace_back(std::stoll(match[1].str()), entry.path());
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  return found;
}

}  // namespace

fs::path checkpoint_root(const fs::path& run_dir) { return run_dir / "checkpoints"; }

fs::path save_checkpoint(const fs::path& run_dir, const CheckpointState& state, const FlatParameters& flat,
                         const std::vector<std::pair<std::string, torch::Tensor>>& moments,
                         const OuterState* outer) {
  const fs::path root = checkpoint_root(run_dir);
  fs::create_directories(root);
  const fs::path final_dir = root / step_name(state.step);
  const fs::path temp_dir = root / str(step_name(state.step), ".tmp.", ::getpid());
  fs::remove_all(temp_dir);
  // A write that fails (a full disk: Note [A full disk] in common/disk_space.h) leaves no half
  // checkpoint behind to fill the disk further; the last whole one stays as it was.
  struct RemoveUnlessRenamed {
    const fs::path& dir;
    bool renamed = false;
    ~RemoveUnlessRenamed() {
      std::error_code ignored;
      if (!renamed) fs::remove_all(dir, ignored);
    }
  } cleanup{temp_dir};
  fs::create_directories(temp_dir);

  std::vector<std::pair<std::string, torch::Tensor>> params;
  for (const ParameterSegment& s : flat.segments())
    params.emplace_back(s.name, flat.params().narrow(0, s.offset, s.numel).view(s.shape).cpu());
  model::save_safetensors(temp_dir / "model.safetensors", params, {{"format", "gradbox"}});

  std::vector<std::pair<std::string, torch::Tensor>> optimizer;
  for (const auto& [name, tensor] : moments) optimizer.emplace_back(name, tensor.cpu());
  optimizer.emplace_back("rng.cpu", at::detail::getDefaultCPUGenerator().get_state());
  const bool global_is_parameters =
      outer && outer->global.numel() == flat.params().numel() &&
      torch::equal(outer->global.to(flat.params().device()), flat.params());
  if (outer) {
    if (!global_is_parameters) optimizer.emplace_back("outer.global", outer->global.cpu());
    optimizer.emplace_back("outer.momentum", outer->momentum.cpu());
    if (outer->eager_offset.defined()) {
      optimizer.emplace_back("outer.eager_offset", outer->eager_offset.cpu());
      optimizer.emplace_back("outer.eager_momentum", outer->eager_momentum.cpu());
      optimizer.emplace_back("outer.eager_sent_share", outer->eager_sent_share.cpu());
    }
  }
  if (torch::cuda::is_available())
    for (int64_t i = 0; i < static_cast<int64_t>(torch::cuda::device_count()); ++i)
      optimizer.emplace_back(str("rng.cuda.", i),
                             at::globalContext().defaultGenerator(torch::Device(torch::kCUDA, i)).get_state());
  model::save_safetensors(temp_dir / "optimizer.safetensors", optimizer);

  nlohmann::json state_json = {{"step", state.step},
                                {"round", state.round},
                                {"tokens", state.tokens},
                                {"optimizer_step", state.optimizer_step},
                                {"loss_scale", state.loss_scale},
                                {"loss_scale_good_steps", state.loss_scale_good_steps},
                                {"model_config", state.model_config},
                                {"train_config", state.train_config},
                                {"control", state.control},
                                {"spike_guard", state.spike_guard}};
  // Scalars (fragment 0) for a single fragment, as checkpoints before --fragments had them.
  auto one_or_all = [](const auto& values) -> nlohmann::json {
    if (values.size() == 1) return values[0];
    return values;
  };
  if (outer) {
    state_json["outer"] = {{"round_tokens", one_or_all(outer->round_tokens)},
                           {"round_loss_sum", one_or_all(outer->round_loss_sum)}};
    if (outer->eager_offset.defined()) state_json["outer"]["eager_tokens"] = outer->eager_tokens;
    state_json["outer"]["global"] = global_is_parameters ? "parameters" : "outer.global";
  }
  write_file_atomic(temp_dir / "state.json", state_json.dump(2));

  nlohmann::json files = nlohmann::json::object();
  for (const std::string& name : kFiles)
    files[name] = {{"bytes", fs::file_size(temp_dir / name)}, {"xxh3", to_hex64(file_checksum64(temp_dir / name))}};
  const nlohmann::json manifest = {{"format", kFormat}, {"version", kVersion}, {"step", state.step}, {"files", files}};
  write_file_atomic(temp_dir / "manifest.json", manifest.dump(2));
  fsync_dir(temp_dir);

  // A checkpoint of the same step from an earlier, interrupted life of this run is replaced.
  if (fs::exists(final_dir)) fs::remove_all(final_dir);
  fs::rename(temp_dir, final_dir);
  cleanup.renamed = true;
  fsync_dir(root);
  return final_dir;
}

void verify_checkpoint(const fs::path& dir) {
  const fs::path manifest_path = dir / "manifest.json";
  GB_REQUIRE(fs::exists(manifest_path), manifest_path.string(), ": missing (an unfinished checkpoint?)");
  const nlohmann::json manifest = read_json_file(manifest_path);
  GB_REQUIRE(manifest.value("format", "") == kFormat, manifest_path.string(), ": not a gradbox checkpoint manifest");
  GB_REQUIRE(manifest.value("version", 0) == kVersion, manifest_path.string(), ": unsupported version ",
             manifest.value("version", 0), " (this gradbox reads version ", kVersion, ")");
  for (const std::string& name : kFiles) {
    const fs::path file = dir / name;
    GB_REQUIRE(manifest.contains("files") && manifest["files"].contains(name), manifest_path.string(),
               ": does not list ", name);
    const auto& entry = manifest["files"][name];
    GB_REQUIRE(fs::exists(file), file.string(), ": missing");
    const uint64_t bytes = fs::file_size(file);
    GB_REQUIRE(bytes == entry.value("bytes", uint64_t{0}), file.string(), ": size ", bytes,
               " bytes, manifest says ", entry.value("bytes", uint64_t{0}), " (truncated?)");
    GB_REQUIRE(to_hex64(file_checksum64(file)) == entry.value("xxh3", ""), file.string(),
               ": checksum mismatch (corrupt)");
  }
}

std::optional<fs::path> find_latest_checkpoint(const fs::path& run_dir) {
  for (const auto& [step, dir] : list_checkpoints(run_dir)) {
    try {
      verify_checkpoint(dir);
      return dir;
    } catch (const InputError& e) {
      logger().warn(str("skipping checkpoint ", dir.string(), ": ", e.what()));
    }
  }
  return std::nullopt;
}

std::optional<fs::path> find_rollback_checkpoint(const fs::path& run_dir, int64_t step, int64_t interval) {
  std::optional<fs::path> newest;
  for (const auto& [at, dir] : list_checkpoints(run_dir)) {
    if (at > step) continue;
    try {
      verify_checkpoint(dir);
    } catch (const InputError& e) {
      logger().warn(str("skipping checkpoint ", dir.string(), ": ", e.what()));
      continue;
    }
    if (interval > 0 && at % interval == 0) return dir;
    if (!newest) newest = dir;
  }
  return newest;
}

fs::path resolve_checkpoint(const fs::path& run_or_checkpoint) {
  GB_REQUIRE(fs::exists(run_or_checkpoint), run_or_checkpoint.string(), ": no such checkpoint or run folder");
  if (fs::exists(run_or_checkpoint / "manifest.json")) {
    verify_checkpoint(run_or_checkpoint);
    return run_or_checkpoint;
  }
  std::optional<fs::path> latest = find_latest_checkpoint(run_or_checkpoint);
  GB_REQUIRE(latest.has_value(), run_or_checkpoint.string(), ": holds no complete checkpoint");
  return *latest;
}

CheckpointData load_checkpoint(const fs::path& run_or_checkpoint) {
  const fs::path dir = resolve_checkpoint(run_or_checkpoint);
  CheckpointData data;
  const fs::path state_path = dir / "state.json";
  const nlohmann::json state = read_json_file(state_path);
  bool global_is_parameters = false;
  try {
    data.state.step = state.at("step").get<int64_t>();
    data.state.tokens = state.at("tokens").get<int64_t>();
    data.state.optimizer_step = state.at("optimizer_step").get<int64_t>();
    // Checkpoints before the loss scale was kept start fp16 runs at the initial scale.
    data.state.loss_scale = state.value("loss_scale", LossScaler::kInitialFp16);
    data.state.loss_scale_good_steps = state.value("loss_scale_good_steps", int64_t{0});
    data.state.model_config = state.at("model_config");
    data.state.train_config = state.at("train_config");
    data.state.control = state.value("control", nlohmann::json::object());
    data.state.spike_guard = state.value("spike_guard", nlohmann::json());  // null before the guard
    data.state.round = state.value("round", data.state.step);
    if (state.contains("outer")) {
      OuterState& outer = data.outer.emplace();
      auto values = [&](const char* key, auto& out) {
        const nlohmann::json& j = state.at("outer").at(key);
        using Value = typename std::decay_t<decltype(out)>::value_type;
        if (j.is_array()) out = j.get<std::decay_t<decltype(out)>>();
        else out = {j.get<Value>()};
      };
      values("round_tokens", outer.round_tokens);
      values("round_loss_sum", outer.round_loss_sum);
      global_is_parameters = state.at("outer").value("global", std::string("outer.global")) == "parameters";
      if (state.at("outer").contains("eager_tokens"))
        outer.eager_tokens = state.at("outer").at("eager_tokens").get<std::vector<int64_t>>();
    }
  } catch (const nlohmann::json::exception& e) {
    throw InputError(str(state_path.string(), ": ", e.what()));
  }
  data.parameters = model::load_safetensors(dir / "model.safetensors");
  std::map<std::string, torch::Tensor> optimizer = model::load_safetensors(dir / "optimizer.safetensors");
  const fs::path optimizer_path = dir / "optimizer.safetensors";
  GB_REQUIRE(optimizer.count("rng.cpu"), optimizer_path.string(), ": missing tensor 'rng.cpu'");
  // The moments in either form; the optimizer checks them as it loads them.
  for (const auto& [name, tensor] : optimizer)
    if (name.rfind("exp_avg", 0) == 0) data.moments[name] = tensor;
  GB_REQUIRE(data.moments.count("exp_avg") || data.moments.count("exp_avg.q8_codes"), optimizer_path.string(),
             ": missing tensor 'exp_avg' (nor int8 moments 'exp_avg.q8_codes')");
  data.cpu_rng = optimizer["rng.cpu"];
  for (int i = 0; optimizer.count(str("rng.cuda.", i)); ++i) data.cuda_rngs.push_back(optimizer[str("rng.cuda.", i)]);
  if (data.outer) {
    GB_REQUIRE(optimizer.count("outer.momentum"), optimizer_path.string(),
               ": missing tensor 'outer.momentum' (state.json says outer)");
    GB_REQUIRE(global_is_parameters || optimizer.count("outer.global"), optimizer_path.string(),
               ": missing tensor 'outer.global' (state.json says outer)");
    if (!global_is_parameters) data.outer->global = optimizer["outer.global"];
    data.outer->momentum = optimizer["outer.momentum"];
    if (!data.outer->eager_tokens.empty()) {
      for (const char* name : {"outer.eager_offset", "outer.eager_momentum", "outer.eager_sent_share"})
        GB_REQUIRE(optimizer.count(name), optimizer_path.string(), ": missing tensor '", name,
                   "' (state.json says eager_tokens)");
      data.outer->eager_offset = optimizer["outer.eager_offset"];
      data.outer->eager_momentum = optimizer["outer.eager_momentum"];
      data.outer->eager_sent_share = optimizer["outer.eager_sent_share"];
    }
  }
  return data;
}

void restore_parameters(const CheckpointData& data, FlatParameters& flat, const fs::path& where) {
  torch::NoGradGuard no_grad;
  GB_REQUIRE(data.parameters.size() == flat.segments().size(), where.string(), ": holds ", data.parameters.size(),
             " parameters, the model has ", flat.segments().size(), " (a different model?)");
  for (const ParameterSegment& s : flat.segments()) {
    auto it = data.parameters.find(s.name);
    GB_REQUIRE(it != data.parameters.end(), where.string(), ": has no parameter '", s.name, "'");
    GB_REQUIRE(it->second.sizes().vec() == s.shape, where.string(), ": parameter '", s.name, "' has shape ",
               it->second.sizes(), ", the model expects ", torch::IntArrayRef(s.shape));
    flat.params().narrow(0, s.offset, s.numel).copy_(it->second.reshape({-1}));
  }
}

void restore_rng(const CheckpointData& data) {
  auto cpu = at::detail::getDefaultCPUGenerator();
  {
    std::lock_guard<std::mutex> lock(cpu.mutex());
    cpu.set_state(data.cpu_rng);
  }
  if (!torch::cuda::is_available()) return;
  const size_t devices = static_cast<size_t>(torch::cuda::device_count());
  for (size_t i = 0; i < data.cuda_rngs.size() && i < devices; ++i) {
    auto gen = at::globalContext().defaultGenerator(torch::Device(torch::kCUDA, static_cast<int>(i)));
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(data.cuda_rngs[i]);
  }
}

fs::path adopt_checkpoint(const fs::path& run_dir, const fs::path& fetched, int64_t step) {
  const fs::path target = checkpoint_root(run_dir) / step_name(step);
  for (const auto& [local_step, dir] : list_checkpoints(run_dir))
    if (local_step >= step && dir != fetched) fs::remove_all(dir);
  if (fetched != target) {
    fs::rename(fetched, target);
    fsync_dir(checkpoint_root(run_dir));
  }
  return target;
}

void prune_checkpoints(const fs::path& run_dir, int64_t keep) {
  const fs::path root = checkpoint_root(run_dir);
  if (!fs::is_directory(root)) return;
  for (const auto& entry : fs::directory_iterator(root))
    if (entry.path().filename().string().find(".tmp.") != std::string::npos) fs::remove_all(entry.path());
  // Only folders with a manifest count towards `keep` (checksums were verified when written);
  // a folder without one is the remnant of a broken write and is removed with the old ones.
  int64_t kept = 0;
  for (const auto& [step, dir] : list_checkpoints(run_dir)) {
    if (fs::exists(dir / "manifest.json") && kept++ < keep) continue;
    logger().info(str("removing old checkpoint ", dir.string()));
    fs::remove_all(dir);
  }
}

}  // namespace gradbox::worker

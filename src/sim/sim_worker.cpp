#include "sim/sim_worker.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "common/atomic_file.h"
#include "common/checksum.h"
#include "common/error.h"
#include "exchange/folder_exchange.h"

namespace gradbox::sim {
namespace {

namespace fs = std::filesystem;

uint64_t checksum_of(const std::vector<float>& params) { return checksum64(params.data(), params.size() * sizeof(float)); }

// A gradient that depends on who computed it and on the parameters, so that replicas that
// applied different averages drift apart and stay apart.
void toy_gradient(const std::string& worker, uint64_t round, const std::vector<float>& params, std::vector<float>& grad) {
  const uint64_t seed = checksum64(worker.data(), worker.size()) ^ (round * 0x9e3779b97f4a7c15ull);
  for (size_t i = 0; i < params.size(); ++i) {
    const uint64_t h = (seed + i * 0xbf58476d1ce4e5b9ull) * 0x94d049bb133111ebull;
    const float noise = static_cast<float>(static_cast<double>(h >> 40) / static_cast<double>(1ull << 24) - 0.5);
    grad[i] = params[i] - 1.0f + 0.1f * noise;  // pulls towards 1, with worker-specific noise
  }
}

struct Local {
  uint64_t step = 0;
  std::vector<float> params;
};

fs::path checkpoint_dir(const fs::path& run_dir, uint64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step_%08llu", static_cast<unsigned long long>(step));
  return run_dir / "checkpoints" / name;
}

// The four files a folder checkpoint carries (folder_checkpoint.cpp), written the trainer's
// way: into a temp folder, manifest last, then renamed into place.
fs::path write_checkpoint(const fs::path& run_dir, const Local& local) {
  const fs::path dir = checkpoint_dir(run_dir, local.step);
  const fs::path temp = dir.string() + ".tmp";
  std::error_code ec;
  fs::remove_all(temp, ec);
  fs::create_directories(temp);
  write_file_atomic(temp / "model.safetensors",
                    std::string_view(reinterpret_cast<const char*>(local.params.data()), local.params.size() * sizeof(float)));
  write_file_atomic(temp / "optimizer.safetensors", "");
  write_file_atomic(temp / "state.json", nlohmann::json{{"step", local.step}}.dump());
  write_file_atomic(temp / "manifest.json", nlohmann::json{{"step", local.step}}.dump());
  fs::remove_all(dir, ec);
  fs::rename(temp, dir);
  return dir;
}

Local read_checkpoint(const fs::path& dir) {
  Local local;
  local.step = nlohmann::json::parse(read_file(dir / "state.json")).at("step").get<uint64_t>();
  const std::string bytes = read_file(dir / "model.safetensors");
  local.params.resize(bytes.size() / sizeof(float));
  std::copy(bytes.begin(), bytes.end(), reinterpret_cast<char*>(local.params.data()));
  return local;
}

std::optional<Local> newest_local_checkpoint(const fs::path& run_dir) {
  std::optional<fs::path> newest;
  std::error_code ec;
  for (fs::directory_iterator it(run_dir / "checkpoints", ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!name.starts_with("step_") || name.find(".tmp") != std::string::npos) continue;
    if (!fs::exists(it->path() / "manifest.json")) continue;
    if (!newest || name > newest->filename().string()) newest = it->path();
  }
  if (!newest) return std::nullopt;
  return read_checkpoint(*newest);
}

}  // namespace

std::vector<float> initial_parameters(size_t n) {
  std::vector<float> params(n);
  for (size_t i = 0; i < n; ++i) params[i] = static_cast<float>(std::sin(static_cast<double>(i)));
  return params;
}

void SimObserver::applied(const Applied& a) {
  std::lock_guard lock(mutex_);
  history_.push_back(a);
}

void SimObserver::resynced(const std::string& worker, uint64_t round) {
  std::lock_guard lock(mutex_);
  resyncs_[worker].push_back(round);
}

void SimObserver::finished(const std::string& worker, uint64_t checksum, double at_s) {
  std::lock_guard lock(mutex_);
  finals_[worker] = checksum;
  last_finish_s_ = std::max(last_finish_s_, at_s);
}

double SimObserver::last_finish_s() const {
  std::lock_guard lock(mutex_);
  return last_finish_s_;
}

std::vector<SimObserver::Applied> SimObserver::history() const {
  std::lock_guard lock(mutex_);
  return history_;
}

std::map<std::string, uint64_t> SimObserver::finals() const {
  std::lock_guard lock(mutex_);
  return finals_;
}

std::map<std::string, std::vector<uint64_t>> SimObserver::resyncs() const {
  std::lock_guard lock(mutex_);
  return resyncs_;
}

uint64_t SimObserver::max_round() const {
  std::lock_guard lock(mutex_);
  uint64_t newest = 0;
  for (const Applied& a : history_) newest = std::max(newest, a.round);
  return newest;
}

void run_sim_worker(const SimWorkerSpec& spec, mirror::Mirror& mirror, mirror::Clock& clock, SimObserver& observer) {
  // As the trainer: resume from the newest local checkpoint, else start from the initial weights.
  std::optional<Local> resumed = newest_local_checkpoint(spec.run_dir);
  Local local = resumed ? *resumed : Local{0, initial_parameters(spec.parameters)};
  auto exchange = exchange::make_folder_exchange(spec.exchange, mirror, clock);
  const exchange::JoinPlan plan = exchange->join(spec.run_dir, resumed ? static_cast<int64_t>(local.step) : -1);
  if (plan.checkpoint) local = read_checkpoint(*plan.checkpoint);
  auto checkpoint = [&] {
    const fs::path dir = write_checkpoint(spec.run_dir, local);
    exchange->after_checkpoint(local.step, dir, 0, checksum_of(local.params));
  };
  if (plan.founder && !plan.checkpoint && local.step == 0) checkpoint();
  auto reload = [&] {
    const std::optional<fs::path> dir = exchange->fetch_agreed_state(spec.run_dir);
    GB_CHECK(dir.has_value(), "no agreed state to reload");
    local = read_checkpoint(*dir);
    // Local checkpoints past the agreed state hold the abandoned one (the trainer does the same).
    std::error_code ec;
    for (fs::directory_iterator it(spec.run_dir / "checkpoints", ec), end; !ec && it != end; it.increment(ec))
      if (it->path().filename().string() > dir->filename().string()) fs::remove_all(it->path(), ec);
  };

  std::vector<float> grad(spec.parameters);
  bool perturbed = false;
  auto run_rounds = [&] {
    while (local.step < spec.rounds) {
      const uint64_t round = local.step + 1;
      const bool contributes = exchange->will_contribute(round);
      exchange::LocalContribution mine;
      if (contributes) {
        toy_gradient(spec.name, round, local.params, grad);
        clock.sleep_s(spec.compute_s);
        mine = {spec.tokens_per_round, 1.0, false};
      } else {
        std::fill(grad.begin(), grad.end(), 0.0f);
      }
      const exchange::RoundResult result = exchange->all_reduce(round, grad.data(), grad.size(), mine);
      if (result.resync) {
        observer.resynced(spec.name, round);
        reload();
        continue;
      }
      if (!result.skip)
        for (size_t i = 0; i < local.params.size(); ++i) local.params[i] -= static_cast<float>(spec.lr) * grad[i];
      local.step = round;
      if (round == spec.perturb_after_round && !perturbed) {
        perturbed = true;
        local.params[0] += 1e-3f;
      }
      exchange->after_update(round, local.params.data(), local.params.size());
      observer.applied({spec.name, round, checksum_of(local.params), contributes});
      if (spec.checkpoint_interval > 0 && round % static_cast<uint64_t>(spec.checkpoint_interval) == 0) checkpoint();
    }
  };
  // As the trainer: after the last round the replicas compare notes; a minority one reloads
  // and replays (a bounded number of times).
  run_rounds();
  for (int attempt = 0; attempt < 3 && exchange->final_check(local.step, local.params.data(), local.params.size());
       ++attempt) {
    observer.resynced(spec.name, local.step);
    reload();
    run_rounds();
  }
  checkpoint();
  exchange->leave();
  observer.finished(spec.name, checksum_of(local.params), clock.now_s());
}

}  // namespace gradbox::sim

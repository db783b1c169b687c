#include "sim/sim_worker.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>

#include <nlohmann/json.hpp>

#include "common/atomic_file.h"
#include "common/checksum.h"
#include "common/error.h"
#include "exchange/folder_exchange.h"
#include "exchange/live_control.h"
#include "exchange/round_policy.h"
#include "kernels/sgd.h"

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
  uint64_t step = 0;  // rounds applied
  std::vector<float> params;
  std::vector<float> momentum;  // DiLoCo's outer momentum; empty per step
  // The eager rule's own state (the trainer's EagerOuter): offset, its momentum, the share of
  // Δ last sent, and the others' tokens; saved with local checkpoints, never agreed on.
  std::vector<float> offset, offset_momentum, sent_share;
  exchange::EagerShares shares;

  // A round applied at once: no offset (EagerOuter::settle).
  void forget_eager_offset() {
    std::fill(offset.begin(), offset.end(), 0.0f);
    std::fill(offset_momentum.begin(), offset_momentum.end(), 0.0f);
    std::fill(sent_share.begin(), sent_share.end(), 0.0f);
  }
  // A join or a reload of the agreed state: nothing known (EagerOuter::forget).
  void forget_eager() {
    forget_eager_offset();
    shares.forget();
  }

  // What replicas agree on: the parameters, then the momentum.
  std::vector<float> state() const {
    std::vector<float> all = params;
    all.insert(all.end(), momentum.begin(), momentum.end());
    return all;
  }
};

fs::path checkpoint_dir(const fs::path& run_dir, uint64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step_%08llu", static_cast<unsigned long long>(step));
  return run_dir / "checkpoints" / name;
}

// The four files a folder checkpoint carries (folder_checkpoint.cpp), written the trainer's
// way: into a temp folder, manifest last, then renamed into place (without the trainer's
// fsyncs: a simulated machine does not lose power).
fs::path write_checkpoint(const fs::path& run_dir, const Local& local) {
  const fs::path dir = checkpoint_dir(run_dir, local.step);
  const fs::path temp = dir.string() + ".tmp";
  std::error_code ec;
  fs::remove_all(temp, ec);
  fs::create_directories(temp);
  const std::vector<float> state = local.state();
  replace_file(temp / "model.safetensors",
                    std::string_view(reinterpret_cast<const char*>(state.data()), state.size() * sizeof(float)));
  // As the trainer keeps the eager state: tensors beside the optimizer's, tokens in state.json.
  std::vector<float> eager = local.offset;
  eager.insert(eager.end(), local.offset_momentum.begin(), local.offset_momentum.end());
  eager.insert(eager.end(), local.sent_share.begin(), local.sent_share.end());
  replace_file(temp / "optimizer.safetensors",
               std::string_view(reinterpret_cast<const char*>(eager.data()), eager.size() * sizeof(float)));
  nlohmann::json meta{{"step", local.step}};
  if (!local.offset.empty()) meta["eager_tokens"] = local.shares.others_tokens();
  replace_file(temp / "state.json", meta.dump());
  replace_file(temp / "manifest.json", nlohmann::json{{"step", local.step}}.dump());
  fs::remove_all(dir, ec);
  fs::rename(temp, dir);
  return dir;
}

Local read_checkpoint(const fs::path& dir, size_t parameters) {
  Local local;
  local.step = nlohmann::json::parse(read_file(dir / "state.json")).at("step").get<uint64_t>();
  const std::string bytes = read_file(dir / "model.safetensors");
  std::vector<float> state(bytes.size() / sizeof(float));
  std::copy(bytes.begin(), bytes.end(), reinterpret_cast<char*>(state.data()));
  local.params.assign(state.begin(), state.begin() + static_cast<std::ptrdiff_t>(std::min(parameters, state.size())));
  local.momentum.assign(state.begin() + static_cast<std::ptrdiff_t>(local.params.size()), state.end());
  const nlohmann::json meta = nlohmann::json::parse(read_file(dir / "state.json"));
  const std::string eager = read_file(dir / "optimizer.safetensors");
  if (meta.contains("eager_tokens") && eager.size() == 3 * parameters * sizeof(float)) {
    local.offset.resize(parameters);
    local.offset_momentum.resize(parameters);
    local.sent_share.resize(parameters);
    const float* saved = reinterpret_cast<const float*>(eager.data());
    std::copy(saved, saved + parameters, local.offset.begin());
    std::copy(saved + parameters, saved + 2 * parameters, local.offset_momentum.begin());
    std::copy(saved + 2 * parameters, saved + 3 * parameters, local.sent_share.begin());
    local.shares.others_tokens() = meta.at("eager_tokens").get<std::vector<int64_t>>();
  }
  return local;
}

std::optional<Local> newest_local_checkpoint(const fs::path& run_dir, size_t parameters) {
  std::optional<fs::path> newest;
  std::error_code ec;
  for (fs::directory_iterator it(run_dir / "checkpoints", ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!name.starts_with("step_") || name.find(".tmp") != std::string::npos) continue;
    if (!fs::exists(it->path() / "manifest.json")) continue;
    if (!newest || name > newest->filename().string()) newest = it->path();
  }
  if (!newest) return std::nullopt;
  return read_checkpoint(*newest, parameters);
}

}  // namespace

std::vector<float> initial_parameters(size_t n) {
  std::vector<float> params(n);
  for (size_t i = 0; i < n; ++i) params[i] = static_cast<float>(std::sin(static_cast<double>(i)));
  return params;
}

void SimObserver::applied(const Applied& a, std::vector<exchange::AgreedContribution> contributions) {
  history_.push_back(a);
  if (a.contributors > 0) contributions_.try_emplace(a.round, std::move(contributions));
}

void SimObserver::stepped(const std::string& worker, uint64_t round, double at_s) { steps_.push_back({worker, round, at_s}); }

void SimObserver::started(const std::string& worker, double at_s) { starts_.try_emplace(worker, at_s); }

void SimObserver::resynced(const std::string& worker, uint64_t round) {
  resyncs_[worker].push_back(round);
}

void SimObserver::finished(const std::string& worker, uint64_t checksum, double at_s) {
  finals_[worker] = checksum;
  last_finish_s_ = std::max(last_finish_s_, at_s);
}

double SimObserver::last_finish_s() const {
  return last_finish_s_;
}

std::vector<SimObserver::Applied> SimObserver::history() const {
  return history_;
}

std::map<std::string, uint64_t> SimObserver::finals() const {
  return finals_;
}

std::map<std::string, std::vector<uint64_t>> SimObserver::resyncs() const {
  return resyncs_;
}

uint64_t SimObserver::max_round() const {
  uint64_t newest = 0;
  for (const Applied& a : history_) newest = std::max(newest, a.round);
  return newest;
}

fs::path scratch_root() {
  std::error_code ec;
  return fs::is_directory("/dev/shm", ec) ? fs::path("/dev/shm") : fs::temp_directory_path();
}

void run_sim_worker(const SimWorkerSpec& spec, mirror::Mirror& mirror, mirror::Clock& clock, SimObserver& observer) {
  // As the trainer: resume from the newest local checkpoint, else start from the initial weights.
  const bool diloco = spec.inner_steps > 1;
  observer.started(spec.name, clock.now_s());
  std::optional<Local> resumed = newest_local_checkpoint(spec.run_dir, spec.parameters);
  Local local;
  if (resumed) local = *resumed;
  else local.params = initial_parameters(spec.parameters);
  if (!resumed && spec.other_initial_weights) local.params[0] += 1;
  if (diloco && local.momentum.empty()) local.momentum.assign(spec.parameters, 0.0f);
  exchange::FolderExchangeConfig exchange_config = spec.exchange;
  if (!resumed) exchange_config.initial_state_checksum = checksum_of(local.state());
  auto exchange = exchange::make_folder_exchange(exchange_config, mirror, clock);
  const exchange::JoinPlan plan = exchange->join(spec.run_dir, resumed ? static_cast<int64_t>(local.step) : -1);
  if (plan.checkpoint) {
    local = read_checkpoint(*plan.checkpoint, spec.parameters);
    local.forget_eager();  // the publisher's, not this worker's
  }
  // The eager rule applies to rounds applied late: sent in the background (overlap), not the run's last.
  const bool eager = diloco && spec.eager && spec.overlap_steps > 0;
  // Only an eager worker keeps the state (and saves it): the others' checkpoints stay as they were.
  if (eager) {
    local.offset.resize(spec.parameters, 0.0f);
    local.offset_momentum.resize(spec.parameters, 0.0f);
    local.sent_share.resize(spec.parameters, 0.0f);
  }
  auto checkpoint = [&] {
    const fs::path dir = write_checkpoint(spec.run_dir, local);
    exchange->after_checkpoint(local.step, dir, 0, checksum_of(local.state()));
  };
  if (plan.founder && !plan.checkpoint && !plan.own_initial_state && local.step == 0) checkpoint();
  auto reload = [&] {
    const std::optional<fs::path> dir = exchange->fetch_agreed_state(spec.run_dir);
    GB_CHECK(dir.has_value(), "no agreed state to reload");
    local = read_checkpoint(*dir, spec.parameters);
    local.forget_eager();
    // Local checkpoints past the agreed state hold the abandoned one (the trainer does the same).
    std::error_code ec;
    for (fs::directory_iterator it(spec.run_dir / "checkpoints", ec), end; !ec && it != end; it.increment(ec))
      if (it->path().filename().string() > dir->filename().string()) fs::remove_all(it->path(), ec);
  };

  // Overlap: compute done during the last exchange, owed to the next overlap_steps steps.
  double overlapped_s = 0;
  auto compute = [&] {
    clock.sleep_s(std::max(0.0, spec.compute_s - overlapped_s));
    overlapped_s = std::max(0.0, overlapped_s - spec.compute_s);
  };
  std::vector<float> grad(spec.parameters);
  std::vector<float> inner(spec.parameters);
  bool perturbed = false;
  // Live control's grad_accum (Note [Live control]): every step (a per-step round, a DiLoCo
  // inner step) takes that many micro-steps' compute and tokens from the round the agreement
  // names, as the trainer's do.
  int64_t accum = spec.exchange.grad_accum;
  auto compute_step = [&](uint64_t round) {
    for (int64_t i = 0; i < accum; ++i) {
      compute();
      observer.stepped(spec.name, round, clock.now_s());
    }
  };
  // The trainer's round rules (Note [Round policy] in exchange/round_policy.h).
  const exchange::RoundRules rules{spec.inner_steps, spec.round_seconds, spec.overlap_steps, spec.partial_every};
  exchange::RoundBox box(rules);
  exchange::PendingControls pending_controls;
  // DiLoCo: inner SGD steps from the global parameters; grad becomes the delta global - inner.
  // Returns the steps taken: all of them, or (time-boxed) as many as fit, as the trainer does.
  std::vector<float> start(spec.parameters);
  auto inner_steps = [&](uint64_t round) {
    for (size_t i = 0; i < inner.size(); ++i) start[i] = local.params[i] + (eager ? local.offset[i] : 0.0f);
    inner = start;
    const double entered = clock.now_s();
    // The exchange returned at the round before's agreement, which (overlapped boxes) opens
    // this round's box; the steps computed behind that exchange began overlapped_s earlier.
    box.open(round, entered - overlapped_s, entered - exchange->round_age_s(round));
    int taken = 0;
    while (taken < spec.inner_steps) {
      // A step computed whole behind the exchange ended before the round before was applied.
      const bool behind_exchange = overlapped_s >= spec.compute_s * static_cast<double>(accum);
      toy_gradient(spec.name, round * 1000 + static_cast<uint64_t>(taken), inner, grad);
      compute_step(round);
      for (size_t i = 0; i < inner.size(); ++i) inner[i] -= static_cast<float>(spec.lr) * grad[i];
      box.stepped();
      ++taken;
      exchange->between_rounds((round - 1) * static_cast<uint64_t>(spec.inner_steps) + static_cast<uint64_t>(taken));
      // A step behind the exchange was judged against the box opened at the first step, which
      // seconds_behind_at_most already held it to: the reopened box judges the steps after it.
      if (taken == spec.inner_steps || (!behind_exchange && box.closes(clock.now_s()))) break;
      if (rules.partial_due(box.steps(), behind_exchange)) {
        for (size_t i = 0; i < inner.size(); ++i) grad[i] = start[i] - inner[i];
        exchange->offer_partial(round, grad.data(), grad.size(),
                                {spec.tokens_per_round * static_cast<uint64_t>(taken * accum), 1.0, false});
      }
    }
    // Δ = θ_g + o - θ_local: the worker's progress since its own start.
    for (size_t i = 0; i < inner.size(); ++i) grad[i] = start[i] - inner[i];
    return taken;
  };
  auto outer_step = [&] {
    const float mu = static_cast<float>(spec.outer_momentum), lr = static_cast<float>(spec.outer_lr);
    for (size_t i = 0; i < local.params.size(); ++i) {
      local.momentum[i] = mu * local.momentum[i] + grad[i];
      local.params[i] -= lr * (grad[i] + mu * local.momentum[i]);
    }
  };
  auto run_rounds = [&] {
    while (local.step < spec.rounds) {
      const uint64_t round = local.step + 1;
      if (const std::optional<exchange::AgreedControl> due = pending_controls.take_due(round))
        accum = exchange::LiveControl::parse(due->json, "the agreed control").grad_accum.value_or(spec.exchange.grad_accum);
      const bool contributes = exchange->will_contribute(round);
      exchange::LocalContribution mine;
      int taken = 0;
      if (contributes && diloco) {
        taken = inner_steps(round);
        mine = {spec.tokens_per_round * static_cast<uint64_t>(taken * accum), 1.0, false};
      } else if (contributes) {
        taken = 1;
        toy_gradient(spec.name, round, local.params, grad);
        compute_step(round);
        mine = {spec.tokens_per_round * static_cast<uint64_t>(accum), 1.0, false};
      } else {
        std::fill(grad.begin(), grad.end(), 0.0f);
      }
      if (contributes && spec.corrupt_contribution) spec.corrupt_contribution(round, grad);
      // The eager offset steps on this Δ at its send, as the trainer's point of merge does.
      bool eager_step = false;
      if (eager && contributes && round < spec.rounds) {
        if (const std::optional<float> share = local.shares.share(0, mine.tokens)) {
          kernels::eager_offset_step_cpu(local.offset.data(), local.offset_momentum.data(), local.sent_share.data(),
                                         grad.data(), *share, local.params.data(), inner.data(),  // scratch
                                         static_cast<int64_t>(grad.size()), static_cast<float>(spec.outer_lr),
                                         static_cast<float>(spec.outer_momentum), true);
          eager_step = true;
        }
      }
      const double exchange_began = clock.now_s();
      const exchange::RoundResult result = exchange->all_reduce(round, grad.data(), grad.size(), mine);
      // The next round's steps ran behind this exchange, as many as the policy lets a round lag.
      overlapped_s = contributes && !result.resync
                         ? std::min(clock.now_s() - exchange_began,
                                    rules.seconds_behind_at_most(spec.compute_s * static_cast<double>(accum)))
                         : 0;
      if (result.control) pending_controls.add(*result.control);
      if (result.resync) {
        observer.resynced(spec.name, round);
        reload();
        continue;
      }
      if (!result.skip && diloco) outer_step();
      else if (!result.skip)
        for (size_t i = 0; i < local.params.size(); ++i) local.params[i] -= static_cast<float>(spec.lr) * grad[i];
      if (eager) {
        if (!eager_step) local.forget_eager_offset();  // a round applied at once left θ_g
        if (!result.skip && result.tokens > 0)
          local.shares.agreed(0, exchange::own_tokens_agreed(result, spec.name, mine.tokens), result.tokens);
        for (const float o : local.offset) GB_CHECK(std::isfinite(o), spec.name, ": the eager offset is not finite after round ", round);
      }
      local.step = round;
      if (round == spec.perturb_after_round && !perturbed) {
        perturbed = true;
        local.params[0] += 1e-3f;
      }
      const std::vector<float> state = local.state();
      exchange->after_update(round, state.data(), state.size());
      observer.applied({spec.name, round, checksum_of(state), contributes, taken, result.wait_seconds,
                        result.contributors, result.tokens, clock.now_s(), accum,
                        overlapped_s / (spec.compute_s * static_cast<double>(accum)), eager_step},
                       result.contributions);
      if (spec.checkpoint_interval > 0 && round % static_cast<uint64_t>(spec.checkpoint_interval) == 0) checkpoint();
    }
  };
  // As the trainer: after the last round the replicas compare notes; a minority one reloads
  // and replays (a bounded number of times).
  run_rounds();
  auto outside_agreed_state = [&] {
    const std::vector<float> state = local.state();
    return exchange->final_check(local.step, state.data(), state.size());
  };
  for (int attempt = 0; attempt < 3 && outside_agreed_state(); ++attempt) {
    observer.resynced(spec.name, local.step);
    reload();
    run_rounds();
  }
  for (const float o : local.offset)
    GB_CHECK(o == 0.0f, spec.name, ": the eager offset was not settled by the run's last round (", o, ")");
  checkpoint();
  exchange->leave();
  observer.finished(spec.name, checksum_of(local.state()), clock.now_s());
}

}  // namespace gradbox::sim

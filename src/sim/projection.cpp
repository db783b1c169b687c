#include "sim/projection.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <map>
#include <random>
#include <set>

#include <unistd.h>

#include "common/error.h"
#include "mirror/memory_mirror.h"
#include "mirror/virtual_clock.h"
#include "sim/sim_worker.h"

namespace gradbox::sim {
namespace {

namespace fs = std::filesystem;

constexpr size_t kSimParameters = 48;  // the simulated model; the real one is only charged for

std::string base_name(const std::string& rel) { return rel.substr(rel.rfind('/') + 1); }

const ProjectionConfig& checked(const ProjectionConfig& c) {
  GB_REQUIRE(c.workers >= 1, "--workers must be at least 1, got ", c.workers);
  GB_REQUIRE(c.tokens_per_s > 0 && c.tokens_per_step > 0, "tokens per second (", c.tokens_per_s, ") and per step (",
             c.tokens_per_step, ") must be positive");
  GB_REQUIRE(c.hours > 0, "--hours must be positive, got ", c.hours);
  GB_REQUIRE(c.mode != ProjectedMode::diloco || c.inner_steps >= 2, "DiLoCo needs --inner-steps >= 2, got ", c.inner_steps);
  if (c.mode == ProjectedMode::diloco) {
    GB_REQUIRE(c.overlap_steps >= 0 && c.overlap_steps < c.inner_steps, "--overlap-steps ", c.overlap_steps,
               ": must be in 0..--inner-steps - 1 = ", c.inner_steps - 1);
  } else {
    GB_REQUIRE(c.overlap_steps == 0 || c.overlap_steps == 1, "per-step rounds overlap one step (--overlap), not ",
               c.overlap_steps, " (--overlap-steps is DiLoCo's)");
  }
  GB_REQUIRE(c.partial_every == 0 || (c.partial_every > 0 && c.mode == ProjectedMode::diloco && c.round_seconds > 0 &&
                                      c.overlap_steps > 0),
             "--partial-every ", c.partial_every, ": only with --mode diloco, --round-seconds and --overlap-steps");
  GB_REQUIRE(c.syncer_pass_s > 0 && c.poll_s >= 0 && c.heartbeat_interval_s > 0 && c.deadline_floor_s >= 0,
             "the syncer's pass and the heartbeat interval must be positive, the poll and the deadline floor not negative");
  GB_REQUIRE(c.upload_mb_s >= 0 && c.download_mb_s >= 0 && c.lag_median_s >= 0 && c.request_s >= 0,
             "link speeds, lags and the request time cannot be negative");
  return c;
}

class ProjectionRun {
 public:
  explicit ProjectionRun(const ProjectionConfig& config)
      : config_(checked(config)),
        rng_(config.seed * 0x9e3779b97f4a7c15ull + 7),
        root_(scratch_root() / str("gradbox_projection_", ::getpid(), "_", config.seed)),
        compute_s_(static_cast<double>(config_.tokens_per_step) / config_.tokens_per_s),
        rounds_(std::max<uint64_t>(2, static_cast<uint64_t>(std::ceil(config_.hours * 3600 / (compute_s_ * std::max(1, config_.inner_steps)))))),
        folder_(sim_, config.seed, folder_model()) {
    fs::remove_all(root_);
    for (int i = 0; i < config.workers; ++i) founders_.push_back(str("w", i));
  }
  ~ProjectionRun() {
    sim_.kill_all();
    std::error_code ec;
    fs::remove_all(root_, ec);
  }

  Projection run() {
    for (const std::string& name : founders_) start(name);
    // Past the horizon a run that cannot finish (sessions dying faster than they catch up) is
    // measured by the rounds it did finish.
    sim_.run_until(config_.hours * 3600 * 20);
    return measure();
  }

 private:
  bool diloco() const { return config_.mode == ProjectedMode::diloco; }
  // A folder checkpoint as the trainer cuts it: the real state in parts of the trainer's size
  // (64 MB), so that its uploads interleave with rounds' files as the syncer's do (Note
  // [Upload order]) and each file pays the folder's per-file overhead. The simulated state
  // (its parameters, and DiLoCo's outer momentum: a few hundred bytes) is cut into about as
  // many parts, each charged an equal share of the real state.
  double checkpoint_bytes() const {
    // DiLoCo adds the outer momentum; θ_g is the parameters at the rounds' ends a folder
    // checkpoint is taken at (one fragment, the delayed rule), saved once (worker/checkpoint.h).
    const double per_parameter = 4 + config_.moment_bytes_per_parameter + (diloco() ? 4 : 0);
    return static_cast<double>(config_.model_parameters) * per_parameter;
  }
  uint64_t sim_state_bytes() const { return kSimParameters * sizeof(float) * (diloco() ? 2 : 1); }
  uint64_t sim_part_bytes() const {
    const double real_part = static_cast<double>(exchange::FolderExchangeConfig{}.checkpoint_part_bytes);
    const uint64_t real_parts = std::max<uint64_t>(1, static_cast<uint64_t>(std::ceil(checkpoint_bytes() / real_part)));
    return std::max<uint64_t>(1, (sim_state_bytes() + real_parts - 1) / real_parts);
  }
  uint64_t model_parts_per_checkpoint() const { return (sim_state_bytes() + sim_part_bytes() - 1) / sim_part_bytes(); }
  bool sharded() const { return config_.mode == ProjectedMode::per_step_sharded; }
  uint32_t shards() const { return sharded() ? static_cast<uint32_t>(config_.workers) : 1; }

  mirror::FolderFaults folder_model() const {
    mirror::FolderFaults f;
    f.lag_median_s = config_.lag_median_s;
    f.lag_p90_s = std::max(config_.lag_p90_s, config_.lag_median_s);
    f.upload_s = config_.request_s;
    f.pass_s = config_.syncer_pass_s;
    f.lost_listing = config_.lost_listing;
    f.partial = config_.partial;
    f.on_demand_prefixes = {"part-", "p-", "g-"};  // as gradbox train starts its syncer
    f.upload_bytes_per_s = config_.upload_mb_s * 1e6;
    f.download_bytes_per_s = config_.download_mb_s * 1e6;
    const double gradient_bytes = static_cast<double>(config_.model_parameters) * config_.wire_bytes_per_parameter;
    // A joiner needs the weights, AdamW's two moments and, with DiLoCo, the global weights and
    // the outer momentum.
    const double checkpoint_bytes = this->checkpoint_bytes();
    const uint32_t shard_count = shards();
    const uint64_t model_parts = model_parts_per_checkpoint();
    f.nominal_bytes = [gradient_bytes, checkpoint_bytes, shard_count, model_parts](const std::string& rel,
                                                                                   uint64_t bytes) {
      const std::string name = base_name(rel);
      if (rel.starts_with("rounds/") && (name.starts_with("g-") || name.starts_with("p-") || name.starts_with("r-s")))
        return static_cast<uint64_t>(gradient_bytes / shard_count);
      // The first parts slice model.safetensors, the simulated model's whole state: they stand
      // for the real checkpoint, an equal share each (the other parts are a few bytes of JSON).
      unsigned index = 0;
      if (rel.starts_with("checkpoints/") && std::sscanf(name.c_str(), "part-%u.gbx", &index) == 1 && index < model_parts)
        return static_cast<uint64_t>(checkpoint_bytes / static_cast<double>(model_parts));
      return bytes;
    };
    return f;
  }

  exchange::FolderExchangeConfig exchange_config(const std::string& name, const fs::path& local) {
    exchange::FolderExchangeConfig c;
    c.run_id = "projection";
    c.model_fingerprint = 0x5eed;
    c.worker = name;
    c.members = founders_;
    c.local_dir = local;
    c.pattern = sharded() ? exchange::ExchangePattern::sharded : exchange::ExchangePattern::all_gather;
    c.shard_count = shards();
    c.codec.codec = codec::Codec::fp32;
    if (config_.wait_for_all) {
      c.contribution_timeout_s = c.deadline_floor_s = 1e9;  // the source scheme: wait for everyone
    } else {
      c.contribution_timeout_s = config_.contribution_timeout_s;
      c.deadline_floor_s = std::min(config_.deadline_floor_s, config_.contribution_timeout_s);
    }
    // As README sizes it: well above the folder's p90 lag, and above the contribution wait.
    const double lag_p90 = std::max(config_.lag_p90_s, config_.lag_median_s);
    c.failover_timeout_s = std::max({60.0, 8 * lag_p90, c.contribution_timeout_s + 60});
    if (config_.partial_every > 0) {  // an owner waits a deadline more for partial deltas
      c.partial_deltas = true;
      c.failover_timeout_s = std::max(c.failover_timeout_s, 2 * c.contribution_timeout_s + 60);
    }
    c.give_up_timeout_s = 1e9;
    c.heartbeat_interval_s = config_.heartbeat_interval_s;
    c.stale_after_s = 2 * c.failover_timeout_s;
    c.fingerprint_interval = 10;
    c.gc_window = 4;
    c.checkpoint_failover_s = 600;
    c.keep_folder_checkpoints = 2;
    c.checkpoint_part_bytes = sim_part_bytes();
    c.wait_for_syncer = true;
    c.poll_interval_s = config_.poll_s > 0 ? config_.poll_s
                                           : std::clamp(compute_s_ * std::max(1, config_.inner_steps) / 1000, 1.0, 10.0);
    c.incarnation_seed = rng_() | 1;
    c.upload_cap_bytes = static_cast<uint64_t>(config_.upload_cap_gb * 1e9);
    c.nominal_upload_bytes = folder_model().nominal_bytes;
    return c;
  }

  // A session of the founder `seat`: a fresh disk (its own syncer and local folders) and, after
  // the first, a new worker name (a notebook re-run under a new name joins as a new member).
  void start(const std::string& seat) {
    const int session = ++sessions_[seat];
    const std::string name = session == 1 ? seat : str(seat, "s", session);
    disks_.emplace_back(name, seat);
    SimWorkerSpec spec;
    spec.name = name;
    spec.exchange = exchange_config(name, root_ / name / "local");
    spec.run_dir = root_ / name / "run";
    spec.rounds = rounds_;
    const double round_s = compute_s_ * std::max(1, config_.inner_steps);
    spec.checkpoint_interval = std::max<int64_t>(1, std::llround(config_.checkpoint_hours * 3600 / round_s));
    spec.compute_s = compute_s_;
    spec.parameters = kSimParameters;
    spec.tokens_per_round = config_.tokens_per_step;
    spec.inner_steps = diloco() ? config_.inner_steps : 1;
    spec.overlap_steps = config_.overlap_steps;
    if (diloco() && config_.round_seconds > 0) {  // time-boxed rounds, joiners enter late
      spec.round_seconds = config_.round_seconds;
      spec.exchange.late_entry = true;
      spec.exchange.boxes_from_agreement = config_.overlap_steps > 0;
      spec.exchange.round_seconds = config_.round_seconds;
    }
    spec.partial_every = config_.partial_every;
    mirror::MemoryMirror& mirror = folder_.disk(name);
    const mirror::Simulation::ProcessId id =
        sim_.spawn(name, [this, spec, &mirror](mirror::Clock& clock) { run_sim_worker(spec, mirror, clock, observer_); });
    if (config_.session_mean_hours > 0) plan_death(seat, id);
  }

  void plan_death(const std::string& seat, mirror::Simulation::ProcessId id) {
    const double u = static_cast<double>(rng_() >> 11) * 0x1.0p-53;
    const double life_s = std::min(-config_.session_mean_hours * 3600 * std::log(1 - u), config_.session_cap_hours * 3600);
    sim_.at(sim_.now_s() + life_s, [this, seat, id] {
      if (!sim_.alive(id) || !observer_.finals().empty()) return;  // the run is over
      sim_.kill(id);
      died_[sessions_[seat] == 1 ? seat : str(seat, "s", sessions_[seat])] = sim_.now_s();
      ++deaths_;
      sim_.at(sim_.now_s() + config_.setup_minutes * 60, [this, seat] {
        if (!observer_.finals().empty()) return;
        ++joins_;
        start(seat);
      });
    });
  }

  Projection measure() const {
    Projection p;
    p.failures = sim_.failures();
    p.one_worker_tokens_per_s = config_.tokens_per_s;
    p.deaths = deaths_;
    p.joins = joins_;
    // Every replica applies the same rounds: a round counts once, when it was first applied.
    struct Round {
      double first_applied_s;
      uint64_t tokens;
      int contributors;
    };
    std::map<uint64_t, Round> rounds;
    for (const SimObserver::Applied& a : observer_.history()) {
      auto [it, fresh] = rounds.try_emplace(a.round, Round{a.at_s, a.tokens, a.contributors});
      if (!fresh) it->second.first_applied_s = std::min(it->second.first_applied_s, a.at_s);
    }
    if (rounds.empty()) return p;
    for (const SimObserver::Applied& a : observer_.history())
      if (a.round == rounds.rbegin()->first) p.final_grad_accum = std::max(p.final_grad_accum, a.grad_accum);
    double tokens = 0, contributors = 0;
    for (const auto& [round, r] : rounds) {
      tokens += static_cast<double>(r.tokens);
      contributors += r.contributors;
    }
    p.mean_contributors = contributors / static_cast<double>(rounds.size());
    double overlapped = 0, later_steps = 0;
    for (const SimObserver::Applied& a : observer_.history())
      if (a.contributed && a.inner_steps > 1) {
        overlapped += a.overlapped_steps;
        later_steps += a.inner_steps - 1;
      }
    p.overlap_fraction = later_steps > 0 ? std::min(1.0, overlapped / later_steps) : 0.0;
    const double end_s = rounds.rbegin()->second.first_applied_s;
    p.rounds = rounds.rbegin()->first;
    p.virtual_hours = end_s / 3600;
    p.cluster_tokens_per_s = end_s > 0 ? tokens / end_s : 0;
    p.speedup = p.cluster_tokens_per_s / p.one_worker_tokens_per_s;
    p.utilisation = p.speedup / config_.workers;
    p.seconds_per_round = end_s / static_cast<double>(p.rounds);
    std::map<std::string, std::pair<uint64_t, uint64_t>> uploaded;  // seat -> (all, rounds), over its sessions
    for (const auto& [disk, seat] : disks_)
      for (const auto& [folder, bytes] : folder_.disk(disk).uploaded_bytes()) {
        uploaded[seat].first += bytes;
        if (folder == "rounds") uploaded[seat].second += bytes;
      }
    std::pair<uint64_t, uint64_t> busiest{0, 0};
    for (const auto& [seat, bytes] : uploaded) busiest = std::max(busiest, bytes);
    const double days = end_s / 86400;
    p.upload_gb_per_worker_day = static_cast<double>(busiest.first) / 1e9 / days;
    p.round_upload_gb_per_worker_day = static_cast<double>(busiest.second) / 1e9 / days;
    p.time = time_shares(end_s, p.rounds, &p.join_median_s);
    return p;
  }

  // Projection::TimeShares: each step of each session up to the last round, against the
  // tokens its round's agreement holds from that session.
  Projection::TimeShares time_shares(double end_s, uint64_t last_round, double* join_median_s) const {
    Projection::TimeShares t;
    const double seat_s = config_.workers * end_s;
    if (seat_s <= 0) return t;
    std::map<std::pair<std::string, uint64_t>, int> computed;  // (session, round) -> steps
    std::map<std::string, double> first_step;
    for (const SimObserver::Step& s : observer_.steps()) {
      if (s.round > last_round || s.at_s > end_s) continue;
      ++computed[{s.worker, s.round}];
      first_step.try_emplace(s.worker, s.at_s - compute_s_);
    }
    std::set<std::pair<std::string, uint64_t>> applied;  // (session, round) it applied
    for (const SimObserver::Applied& a : observer_.history()) applied.insert({a.worker, a.round});
    double useful = 0, lost_at_death = 0, left_out = 0;
    for (const auto& [key, steps] : computed) {
      double in_average = 0;
      if (auto round = observer_.contributions().find(key.second); round != observer_.contributions().end())
        for (const exchange::AgreedContribution& c : round->second)
          if (c.worker == key.first) in_average = static_cast<double>(c.tokens) / static_cast<double>(config_.tokens_per_step);
      const double lost = std::max(0.0, steps - in_average);
      useful += std::min<double>(steps, in_average);
      (died_.count(key.first) && !applied.count(key) ? lost_at_death : left_out) += lost;
    }
    t.useful = useful * compute_s_ / seat_s;
    t.lost_at_death = lost_at_death * compute_s_ / seat_s;
    t.left_out = left_out * compute_s_ / seat_s;
    t.setup = std::min(seat_s, joins_ * config_.setup_minutes * 60) / seat_s;
    double joining = 0;
    std::vector<double> joins;  // of later sessions that took a step
    for (const auto& [worker, started] : observer_.starts()) {
      const bool founder = std::find(founders_.begin(), founders_.end(), worker) != founders_.end();
      if (const auto first = first_step.find(worker); !founder && first != first_step.end())
        joins.push_back(first->second - started);
      // Until its first step, or its death or the run's end if it never took one.
      double until = end_s;
      if (const auto first = first_step.find(worker); first != first_step.end()) until = std::min(until, first->second);
      if (const auto death = died_.find(worker); death != died_.end()) until = std::min(until, death->second);
      joining += std::max(0.0, until - std::min(started, end_s));
    }
    t.joining = joining / seat_s;
    if (!joins.empty()) {
      std::nth_element(joins.begin(), joins.begin() + joins.size() / 2, joins.end());
      *join_median_s = joins[joins.size() / 2];
    }
    t.idle = 1 - t.useful - t.lost_at_death - t.left_out - t.setup - t.joining;
    return t;
  }

  ProjectionConfig config_;
  std::mt19937_64 rng_;
  fs::path root_;
  double compute_s_;
  uint64_t rounds_;
  mirror::Simulation sim_;
  mutable mirror::SimFolder folder_;  // disk() is how it is looked at
  SimObserver observer_;
  std::vector<std::string> founders_;
  std::vector<std::pair<std::string, std::string>> disks_;  // (disk = worker name, seat)
  std::map<std::string, int> sessions_;
  std::map<std::string, double> died_;  // sessions killed, and when
  int deaths_ = 0, joins_ = 0;
};

}  // namespace

const char* mode_name(ProjectedMode mode) {
  switch (mode) {
    case ProjectedMode::per_step_all_gather: return "per-step all-gather";
    case ProjectedMode::per_step_sharded: return "per-step sharded";
    case ProjectedMode::diloco: return "DiLoCo";
  }
  return "?";
}

Projection project(const ProjectionConfig& config) { return ProjectionRun(config).run(); }

}  // namespace gradbox::sim

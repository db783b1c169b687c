#include "sim/schedule.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <random>
#include <set>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "common/atomic_file.h"
#include "common/checksum.h"
#include "common/error.h"
#include "mirror/memory_mirror.h"
#include "mirror/virtual_clock.h"
#include "sim/sim_worker.h"

namespace gradbox::sim {
namespace {

namespace fs = std::filesystem;

std::string worker_name(int i) { return str("w", i); }

// Timeouts as a user sizes them for a folder (README): the failover window well above the
// folder's p90 lag, so that an owner that is merely slow is rarely taken over. Outages and
// pauses in a schedule still outlast them.
exchange::FolderExchangeConfig worker_config(const std::string& name, const std::vector<std::string>& founders,
                                             bool sharded, const fs::path& local, uint64_t incarnation_seed,
                                             double lag_p90_s) {
  exchange::FolderExchangeConfig c;
  c.run_id = "schedule";
  c.model_fingerprint = 0x5eed;
  c.worker = name;
  c.members = founders;
  c.local_dir = local;
  c.stats_interval_s = 30;  // read once, at the end (check())
  c.pattern = sharded ? exchange::ExchangePattern::sharded : exchange::ExchangePattern::all_gather;
  c.shard_count = sharded ? 4 : 1;
  c.codec.codec = codec::Codec::fp32;
  c.failover_timeout_s = std::max(5.0, 8 * lag_p90_s);
  c.contribution_timeout_s = 0.6 * c.failover_timeout_s;
  c.deadline_floor_s = 0.5;
  c.give_up_timeout_s = 900;
  c.heartbeat_interval_s = 1;
  c.stale_after_s = 2 * c.failover_timeout_s;
  c.fingerprint_interval = 2;
  c.gc_window = 4;
  c.checkpoint_failover_s = 5;
  c.keep_folder_checkpoints = 2;
  c.wait_for_syncer = true;
  c.poll_interval_s = 0.1;
  c.incarnation_seed = incarnation_seed;
  return c;
}

class Scheduler {
 public:
  // Longer than most of the folder's lags, as a real box of 40 minutes is (else a box closes
  // before its agreement reaches the workers); steps take 0.1-0.4 s: H = 8 binds for the fast
  // workers, the box for the slow ones.
  static constexpr double kBoxSeconds = 2.5;

  explicit Scheduler(const ScheduleOptions& options)
      : options_(options),
        rng_(options.seed * 0x9e3779b97f4a7c15ull + 1),
        root_(scratch_root() / str("gradbox_schedule_", ::getpid(), "_", options.seed)),
        sharded_(options.pick_pattern ? (rng_() % 2 == 1) : options.sharded),
        folder_(sim_, options.seed, faults()) {
    fs::remove_all(root_);
    for (int i = 0; i < options.workers; ++i) founders_.push_back(worker_name(i));
  }
  ~Scheduler() {
    sim_.kill_all();
    std::error_code ec;
    fs::remove_all(root_, ec);
  }

  ScheduleReport run() {
    report_.seed = options_.seed;
    report_.pattern = std::string(sharded_ ? "sharded" : "all-gather") +
                      (options_.inner_steps > 1 ? str(", DiLoCo H=", options_.inner_steps) : "") +
                      (options_.boxed ? ", overlapped boxes, partial deltas" : "") +
                      (options_.eager ? ", eager outer steps" : "");
    for (const std::string& name : founders_) start(name);
    plan_faults();
    sim_.run_until(options_.horizon_s);
    report_.virtual_seconds = observer_.last_finish_s();
    check();
    return report_;
  }

 private:
  mirror::FolderFaults faults() {
    mirror::FolderFaults f;
    f.lag_median_s = 0.05 + 0.3 * uniform();
    f.lag_p90_s = f.lag_median_s * (2 + 4 * uniform());
    f.lost_listing = 0.05 * uniform();
    f.partial = 0.1 * uniform();
    f.on_demand_prefixes = {"part-", "p-", "g-"};  // as gradbox train starts its syncer
    return f;
  }
  double uniform() { return static_cast<double>(rng_() >> 11) / 9007199254740992.0; }

  void start(const std::string& name) {
    SimWorkerSpec spec;
    spec.name = name;
    spec.exchange = worker_config(name, founders_, sharded_, root_ / name / "local", rng_() | 1, folder_.faults().lag_p90_s);
    spec.run_dir = root_ / name / "run";
    spec.rounds = options_.rounds;
    spec.checkpoint_interval = 5;
    spec.compute_s = 0.1 + 0.3 * uniform();
    spec.parameters = 48;
    spec.tokens_per_round = 500 + rng_() % 1000;
    spec.inner_steps = options_.inner_steps;
    if (options_.boxed) {
      GB_CHECK(options_.inner_steps > 1, "boxed schedules are DiLoCo's");
      spec.round_seconds = kBoxSeconds;
      spec.overlap_steps = options_.inner_steps - 1;
      spec.partial_every = 2;
      spec.eager = options_.eager;
      spec.exchange.late_entry = spec.exchange.boxes_from_agreement = spec.exchange.partial_deltas = true;
      spec.exchange.round_seconds = kBoxSeconds;
      // An owner waits a deadline more for partial deltas, inside its failover window.
      spec.exchange.contribution_timeout_s = 0.4 * spec.exchange.failover_timeout_s;
    }
    mirror::MemoryMirror& disk = folder_.disk(name);
    ids_[name] = sim_.spawn(name, [this, spec, &disk](mirror::Clock& clock) { run_sim_worker(spec, disk, clock, observer_); });
  }

  // Faults at random times until the run has had time to finish them; then a quiet period.
  void plan_faults() {
    double t = 2;
    const double last = static_cast<double>(options_.rounds) * 0.4 * options_.inner_steps;  // rounds last longer
    while ((t += -options_.fault_every_s * std::log(1 - uniform())) < last) {
      const std::string victim = founders_[rng_() % founders_.size()];
      const double kind = uniform();
      if (kind < 0.4) {
        const double down = 1 + 15 * uniform();
        sim_.at(t, [this, victim, down] {
          if (!sim_.alive(ids_[victim])) return;
          sim_.kill(ids_[victim]);
          ++report_.kills;
          sim_.at(sim_.now_s() + down, [this, victim] { start(victim); });
        });
      } else if (kind < 0.6) {
        const double length = 1 + 30 * uniform();
        sim_.at(t, [this, victim, length] {
          if (!sim_.alive(ids_[victim])) return;
          sim_.pause(ids_[victim], sim_.now_s() + length);
          ++report_.pauses;
        });
      } else {
        // Some workers cannot see the folder at all for a while: a partition when several.
        const int cut = 1 + static_cast<int>(rng_() % std::max(1, options_.workers / 2));
        const double length = 2 + 30 * uniform();
        std::vector<std::string> side = founders_;
        std::shuffle(side.begin(), side.end(), rng_);
        side.resize(static_cast<size_t>(cut));
        ++report_.outages;
        if (cut > 1) ++report_.partitions;
        for (const std::string& w : side) folder_.outage(w, t, t + length);
      }
    }
  }

  void fail(const std::string& why) {
    if (!report_.ok) return;
    report_.ok = false;
    report_.failure = why;
  }

  // " (first divergent round 17: w0=ab12cd w1=...)" for a failure message.
  std::string first_divergence() const {
    std::map<uint64_t, std::map<std::string, uint64_t>> by_round;
    for (const SimObserver::Applied& a : observer_.history()) by_round[a.round][a.worker] = a.checksum;
    for (const auto& [round, sums] : by_round) {
      std::set<uint64_t> distinct;
      for (const auto& [w, sum] : sums) distinct.insert(sum);
      if (distinct.size() < 2) continue;
      std::string who;
      for (const auto& [w, sum] : sums) who += str(" ", w, "=", to_hex64(sum).substr(0, 6));
      return str(" (first divergent round ", round, ":", who, ")");
    }
    return "";
  }

  void check() {
    for (const std::string& f : sim_.failures()) fail("a process failed: " + f);
    const std::map<std::string, uint64_t> finals = observer_.finals();
    for (const std::string& name : founders_)
      if (!finals.count(name)) fail(str(name, " did not finish by virtual second ", options_.horizon_s, " (round ",
                                        observer_.max_round(), " reached)"));
    std::set<uint64_t> ends;
    for (const auto& [name, sum] : finals) ends.insert(sum);
    if (ends.size() > 1) {
      std::string who;
      for (const auto& [name, sum] : finals) who += str(" ", name, "=", to_hex64(sum).substr(0, 6));
      fail(str("the workers finished with ", ends.size(), " different models:", who, first_divergence()));
    }
    // Divergence episodes: consecutive rounds with more than one applied model.
    std::map<uint64_t, std::set<uint64_t>> by_round;
    for (const SimObserver::Applied& a : observer_.history()) by_round[a.round].insert(a.checksum);
    uint64_t episode = 0;
    for (const auto& [round, sums] : by_round) {
      if (sums.size() > 1) {
        ++report_.divergent_rounds;
        if (++episode > options_.max_divergent_rounds)
          fail(str("replicas disagreed for more than ", options_.max_divergent_rounds, " rounds in a row (to round ", round, ")"));
      } else {
        episode = 0;
      }
    }
    for (const auto& [name, rounds] : observer_.resyncs()) report_.repairs += rounds.size();
    for (const SimObserver::Applied& a : observer_.history()) report_.eager_steps += a.eager_step;
    for (const std::string& name : founders_) {
      const fs::path stats = root_ / name / "local" / "exchange" / "stats.json";
      if (!fs::exists(stats)) continue;
      const nlohmann::json file = nlohmann::json::parse(read_file(stats));
      // Every life's counts, a killed one's included (Note [Counters across lives]).
      const nlohmann::json& j = file.contains("all_lives") ? file["all_lives"] : file;
      report_.self_elections += j.value("self_elections", 0u);
      report_.failovers += j.value("failovers", 0u);
      report_.blind_waits += j.value("blind_waits", 0u);
      report_.partials_salvaged += j.value("partials_salvaged", 0u);
      if (j.value("rejected_files", 0u) > 0)
        fail(str(name, " rejected a file: ", j["rejected"].empty() ? std::string("?") : j["rejected"][0].get<std::string>()));
    }
  }

  ScheduleOptions options_;
  std::mt19937_64 rng_;
  fs::path root_;
  bool sharded_;
  mirror::Simulation sim_;
  mirror::SimFolder folder_;
  SimObserver observer_;
  std::vector<std::string> founders_;
  std::map<std::string, mirror::Simulation::ProcessId> ids_;
  ScheduleReport report_;
};

}  // namespace

ScheduleReport run_schedule(const ScheduleOptions& options) { return Scheduler(options).run(); }

std::string describe(const ScheduleReport& r) {
  return str("seed ", r.seed, " (", r.pattern, "): ", r.ok ? "ok" : "FAILED: " + r.failure, " | ", r.kills, " kills, ",
             r.pauses, " pauses, ", r.outages, " outages (", r.partitions, " partitions), ", r.divergent_rounds,
             " divergent rounds, ", r.repairs, " repairs, ", r.failovers, " failovers, ", r.self_elections,
             " self-elections, ", r.blind_waits, " blind waits, ", r.partials_salvaged, " partial deltas pinned, ", r.eager_steps, " eager steps, ", static_cast<int64_t>(r.virtual_seconds),
             " virtual s");
}

}  // namespace gradbox::sim

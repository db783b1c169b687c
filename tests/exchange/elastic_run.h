#pragma once
// The harness of the elastic-protocol tests (elastic_protocol_test.cpp) and of the protocol
// faults reproduced (protocol_faults_test.cpp): simulated workers running the real protocol on
// the simulated folder, in virtual time.
#include <map>
#include <set>
#include <string>
#include <vector>

#include "sim/sim_worker.h"
#include "virtual_cluster.h"

namespace gradbox::exchange {

// A small elastic run: founders, folder checkpoints every 5 rounds, quick timeouts.
class ElasticRun {
 public:
  ElasticRun(const std::string& name, std::vector<std::string> founders, uint64_t seed = 7, mirror::FolderFaults faults = {})
      : cluster_(name, seed, std::move(faults)), founders_(std::move(founders)) {}

  // `slowness`: compute and every deadline that many times longer.
  sim::SimWorkerSpec spec(const std::string& worker, uint64_t rounds = 30, double slowness = 1) const {
    sim::SimWorkerSpec s;
    s.name = worker;
    s.exchange = cluster_.config(worker, founders_);
    s.exchange.contribution_timeout_s = 2 * slowness;
    s.exchange.deadline_floor_s = 0.5;
    s.exchange.failover_timeout_s = 4 * slowness;
    s.exchange.heartbeat_interval_s = 1 * slowness;
    s.exchange.stale_after_s = 6 * slowness;
    s.exchange.fingerprint_interval = 2;
    s.exchange.gc_window = 4;
    s.exchange.checkpoint_failover_s = 5 * slowness;
    s.exchange.wait_for_syncer = true;
    s.run_dir = cluster_.root() / ("run-" + worker);
    s.rounds = rounds;
    s.checkpoint_interval = 5;
    s.compute_s = 0.2 * slowness;
    return s;
  }

  mirror::Simulation::ProcessId start(const sim::SimWorkerSpec& s, const std::string& disk = "") {
    const std::string disk_name = disk.empty() ? s.name : disk;
    return cluster_.sim().spawn(s.name, [this, s, disk_name](mirror::Clock& clock) {
      sim::run_sim_worker(s, cluster_.folder().disk(disk_name), clock, observer_);
    });
  }

  // Every pair of workers that applied a round agrees on the parameters after it.
  std::vector<uint64_t> divergent_rounds() const {
    std::map<uint64_t, std::set<uint64_t>> by_round;
    for (const sim::SimObserver::Applied& a : observer_.history()) by_round[a.round].insert(a.checksum);
    std::vector<uint64_t> rounds;
    for (const auto& [round, sums] : by_round)
      if (sums.size() > 1) rounds.push_back(round);
    return rounds;
  }

  VirtualCluster& cluster() { return cluster_; }
  sim::SimObserver& observer() { return observer_; }

 private:
  VirtualCluster cluster_;
  std::vector<std::string> founders_;
  sim::SimObserver observer_;
};

}  // namespace gradbox::exchange

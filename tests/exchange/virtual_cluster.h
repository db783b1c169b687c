#pragma once
// Many FolderExchange replicas in one process, on the simulated folder and a virtual clock
// (Note [The seam] in mirror/mirror.h): each worker is a simulated process running the real
// protocol code; deadlines, failovers and staleness play out in virtual time, deterministically.
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/atomic_file.h"
#include "exchange/folder_exchange.h"
#include "mirror/memory_mirror.h"
#include "mirror/virtual_clock.h"

namespace gradbox::exchange {

inline std::filesystem::path fresh_dir(const std::string& name) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("gradbox_exchange_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

class VirtualCluster {
 public:
  explicit VirtualCluster(const std::string& name, uint64_t seed = 1, mirror::FolderFaults faults = {})
      : root_(fresh_dir(name)), folder_(sim_, seed, std::move(faults)) {}
  ~VirtualCluster() {
    sim_.kill_all();  // before the folder they use goes away
    std::error_code ec;
    std::filesystem::remove_all(root_, ec);
  }

  FolderExchangeConfig config(const std::string& worker, const std::vector<std::string>& members,
                              ExchangePattern pattern = ExchangePattern::all_gather,
                              codec::Codec codec = codec::Codec::fp32) const {
    FolderExchangeConfig c;
    c.run_id = "test-run";
    c.model_fingerprint = 0x1234;
    c.worker = worker;
    c.members = members;
    c.local_dir = root_ / worker;
    c.pattern = pattern;
    c.shard_count = pattern == ExchangePattern::sharded ? static_cast<uint32_t>(members.size()) : 1;
    c.codec.codec = codec;
    c.codec.shuffle = codec != codec::Codec::int8 && codec != codec::Codec::int4;
    c.contribution_timeout_s = 5;
    c.failover_timeout_s = 10;
    c.give_up_timeout_s = 600;
    c.fingerprint_interval = 2;
    c.gc_window = 3;
    c.poll_interval_s = 0.01;
    c.incarnation_seed = std::hash<std::string>{}(worker) | 1;
    return c;
  }

  // A worker process: body(exchange, clock) runs on the virtual clock.
  using Body = std::function<void(GradientExchange& exchange, mirror::Clock& clock)>;
  mirror::Simulation::ProcessId spawn(FolderExchangeConfig c, Body body, const std::string& disk = "") {
    const std::string disk_name = disk.empty() ? c.worker : disk;
    return sim_.spawn(c.worker, [this, c, body, disk_name](mirror::Clock& clock) {
      auto exchange = make_folder_exchange(c, folder_.disk(disk_name), clock);
      body(*exchange, clock);
    });
  }

  nlohmann::json stats(const std::string& worker) const {
    return nlohmann::json::parse(read_file(root_ / worker / "exchange" / "stats.json"));
  }

  mirror::Simulation& sim() { return sim_; }
  mirror::SimFolder& folder() { return folder_; }
  const std::filesystem::path& root() const { return root_; }

 private:
  std::filesystem::path root_;
  mirror::Simulation sim_;
  mirror::SimFolder folder_;
};

}  // namespace gradbox::exchange

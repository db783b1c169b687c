// The cloud-folder simulator: every fault kind shows up, the engine survives all of them at
// once, and the same seed gives the same decisions.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "common/atomic_file.h"
#include "common/checksum.h"
#include "common/error.h"
#include "syncer/sim_backend.h"
#include "syncer/syncer.h"
#include "test_util.h"

namespace gradbox::syncer {
namespace {

using namespace testing;

SimOptions all_faults(uint64_t seed, const fs::path& log) {
  SimOptions o;
  o.seed = seed;
  o.delay_median_ms = 20;
  o.delay_p90_ms = 80;
  o.placeholder_prob = 0.4;
  o.truncate_prob = 0.25;
  o.corrupt_prob = 0.25;
  o.stale_list_prob = 0.3;
  o.missing_prob = 0.2;
  o.duplicate_prob = 0.2;
  o.bandwidth_mbps = 800;
  o.log_path = log;
  return o;
}

std::vector<nlohmann::json> read_jsonl(const fs::path& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

TEST(SimBackend, AllFaultsOnEveryFileArrivesIntactAndNonePartial) {
  fs::path root = fresh_dir("sim_all");
  fs::path truth = root / "true", local = root / "local", log = root / "faults.jsonl";
  std::map<std::string, uint64_t> sums;
  for (int i = 0; i < 30; ++i) {
    std::string rel = str("round_", i % 3, "/f", i, ".bin"), bytes = framed_file(100 + i, 200 + 37 * i);
    write_bytes(truth / rel, bytes);
    sums[rel] = checksum64(bytes.data(), bytes.size());
  }
  SyncerOptions opts{local, "viewer", 50, 60};
  Syncer syncer(std::make_unique<SimBackend>(truth, "viewer", all_faults(42, log)), opts);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  for (;;) {
    syncer.run_pass();
    // Invariant at every step: whatever sits under a final inbox name is complete and flagged.
    for (const auto& rel : files_under(local / kInboxDir)) {
      ASSERT_EQ(rel.find(kTempMarker), std::string::npos) << rel;
      if (rel.ends_with(kFlagSuffix)) continue;
      ASSERT_TRUE(fs::exists(local / kInboxDir / flag_of(rel))) << rel << " present but not flagged";
      std::string bytes = read_file(local / kInboxDir / rel);
      ASSERT_EQ(checksum64(bytes.data(), bytes.size()), sums.at(rel)) << rel;
    }
    if (syncer.stats().flagged == sums.size() || std::chrono::steady_clock::now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // the simulated folder's clock
  }
  SyncerStats s = syncer.stats();
  EXPECT_EQ(s.flagged, sums.size());
  EXPECT_EQ(s.quarantined, 0u);
  std::set<std::string> kinds;
  for (const auto& line : read_jsonl(log)) {
    kinds.insert(line["fault"].get<std::string>());
    EXPECT_EQ(line["viewer"], "viewer");
    EXPECT_TRUE(line.contains("t_ms") && line.contains("path") && line.contains("detail"));
  }
  for (const char* k : {"delay", "placeholder", "truncate", "corrupt", "stale_list", "missing", "duplicate"}) {
    EXPECT_TRUE(kinds.count(k)) << "no " << k << " fault injected";
    EXPECT_GT(s.sim_faults[k], 0u) << k;
  }
  EXPECT_GT(s.incomplete_seen, 0u);
  EXPECT_GT(s.corrupt_seen, 0u);
  EXPECT_GT(s.placeholders_seen, 0u);
  auto json = nlohmann::json::parse(read_file(local / kSyncerStatsFile));
  EXPECT_GT(json["sim_faults"]["truncate"].get<int>(), 0);
}

// Replays a fixed script of listings and downloads; returns the fault log without times.
std::vector<std::string> scripted_faults(const fs::path& truth, const fs::path& scratch, uint64_t seed) {
  fs::path log = scratch / str("log_", seed, "_", std::rand(), ".jsonl");
  SimOptions o = all_faults(seed, log);
  o.bandwidth_mbps = 0;
  SimBackend sim(truth, "v", o);
  for (int round = 0; round < 10; ++round) {
    for (const auto& e : sim.list()) {
      if (e.size > 0) sim.download(e.rel, scratch / "dl.tmp");
    }
  }
  std::vector<std::string> out;
  for (auto line : read_jsonl(log)) {
    line.erase("t_ms");
    out.push_back(line.dump());
  }
  return out;
}

TEST(SimBackend, SameSeedSameFaultDecisions) {
  fs::path root = fresh_dir("sim_seed");
  fs::path truth = root / "true";
  for (int i = 0; i < 12; ++i) {
    write_bytes(truth / str("f", i), framed_file(i));
    // Old files: visible to every viewer, so timing cannot change the script.
    fs::last_write_time(truth / str("f", i), fs::file_time_type::clock::now() - std::chrono::hours(1));
  }
  auto a = scripted_faults(truth, root, 7), b = scripted_faults(truth, root, 7), c = scripted_faults(truth, root, 8);
  EXPECT_FALSE(a.empty());
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

TEST(SimBackend, DelayFollowsMedianAndP90) {
  fs::path root = fresh_dir("sim_delay");
  SimOptions o;
  o.delay_median_ms = 50;
  o.delay_p90_ms = 300;
  SimBackend sim(root, "v", o);
  std::vector<double> d;
  for (int i = 0; i < 2000; ++i) d.push_back(sim.delay_ms(str("file_", i)));
  std::sort(d.begin(), d.end());
  EXPECT_NEAR(d[1000], 50, 8);
  EXPECT_NEAR(d[1800], 300, 60);
}

}  // namespace
}  // namespace gradbox::syncer

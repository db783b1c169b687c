// The folder protocol in one process: N FolderExchange replicas in N threads, with an in-memory
// stand-in for the syncers that mirrors every outbox into every other inbox (the real syncer and
// the cloud simulator are tested in tests/syncer and, with the trainer, in tests/cli).
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <fstream>
#include <map>
#include <random>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/atomic_file.h"
#include "common/checksum.h"
#include "common/error.h"
#include "exchange/folder_exchange.h"
#include "exchange/run_status.h"
#include "wire/envelope.h"

namespace gradbox::exchange {
namespace {

namespace fs = std::filesystem;

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("gradbox_exchange_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// Copies each worker's outbox files into every other worker's inbox and flags them; in the
// sharded pattern contributions ("g-...") only when the receiver asked for them.
class FakeSyncers {
 public:
  FakeSyncers(fs::path root, std::vector<std::string> workers, bool on_demand)
      : root_(std::move(root)), workers_(std::move(workers)), on_demand_(on_demand) {
    thread_ = std::thread([this] {
      while (!stop_) {
        pass();
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    });
  }
  ~FakeSyncers() { stop(); }
  void stop() {
    if (stop_.exchange(true)) return;
    thread_.join();
  }
  void silence(const std::string& worker) { silenced_ = worker; }  // its files never travel (a dead worker)

 private:
  void pass() {
    for (const std::string& from : workers_) {
      if (from == silenced_) continue;
      const fs::path outbox = root_ / from / "outbox";
      std::error_code ec;
      for (fs::recursive_directory_iterator it(outbox, ec), end; !ec && it != end; it.increment(ec)) {
        if (!it->is_regular_file(ec)) continue;
        const std::string name = it->path().filename().string();
        if (name.find(".tmp") != std::string::npos || name.ends_with(".sent")) continue;
        const fs::path rel = fs::relative(it->path(), outbox);
        for (const std::string& to : workers_) {
          if (to == from) continue;
          if (on_demand_ && name.starts_with("g-") && !fs::exists(root_ / to / "requests" / rel)) continue;
          const fs::path target = root_ / to / "inbox" / rel;
          fs::path flag = target;
          flag += ".flag";
          if (fs::exists(flag)) continue;
          try {
            const std::string bytes = read_file(it->path());
            fs::create_directories(target.parent_path());
            write_file_atomic(target, bytes);
            write_file_atomic(flag, "");
          } catch (const std::exception&) {
            // garbage-collected meanwhile, on either side
          }
        }
      }
    }
  }

  fs::path root_;
  std::vector<std::string> workers_;
  bool on_demand_;
  std::string silenced_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

FolderExchangeConfig config_for(const fs::path& root, const std::string& worker, const std::vector<std::string>& members,
                                 ExchangePattern pattern, codec::Codec codec) {
  FolderExchangeConfig c;
  c.run_id = "test-run";
  c.model_fingerprint = 0x1234;
  c.worker = worker;
  c.members = members;
  c.local_dir = root / worker;
  c.pattern = pattern;
  c.shard_count = pattern == ExchangePattern::sharded ? static_cast<uint32_t>(members.size()) : 1;
  c.codec.codec = codec;
  c.codec.shuffle = codec != codec::Codec::int8;
  c.contribution_timeout_s = 5;
  c.failover_timeout_s = 10;
  c.give_up_timeout_s = 60;
  c.fingerprint_interval = 2;
  c.gc_window = 3;
  return c;
}

std::vector<float> gradient(uint64_t seed, size_t n) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1e-3f);
  std::vector<float> g(n);
  for (float& x : g) x = normal(rng);
  return g;
}

// The token-weighted average as the protocol defines it: sorted by worker, y += w * x in fp32.
std::vector<float> reference_average(const std::map<std::string, std::pair<std::vector<float>, uint64_t>>& parts) {
  uint64_t total = 0;
  for (const auto& [name, part] : parts) total += part.second;
  std::vector<float> y(parts.begin()->second.first.size(), 0.0f);
  for (const auto& [name, part] : parts) {
    const float w = contribution_weight(part.second, total);
    for (size_t i = 0; i < y.size(); ++i) y[i] += w * part.first[i];
  }
  return y;
}

nlohmann::json stats_of(const fs::path& root, const std::string& worker) {
  return nlohmann::json::parse(read_file(root / worker / "exchange" / "stats.json"));
}

struct Cluster {
  std::vector<std::string> workers;
  std::map<std::string, uint64_t> tokens;
  size_t n = 10007;  // not divisible by the shard count
};

// Runs `rounds` rounds on every live worker; returns each worker's averaged gradients per round.
std::map<std::string, std::vector<std::vector<float>>> run_rounds(const fs::path& root, const Cluster& cluster,
                                                                  ExchangePattern pattern, codec::Codec codec, int rounds,
                                                                  const std::string& dead = "",
                                                                  std::vector<RoundResult>* results_of_first = nullptr) {
  std::map<std::string, std::vector<std::vector<float>>> out;
  for (const std::string& w : cluster.workers) out[w];
  std::vector<std::thread> threads;
  for (const std::string& worker : cluster.workers) {
    if (worker == dead) continue;
    threads.emplace_back([&, worker] {
      auto exchange = make_folder_exchange(config_for(root, worker, cluster.workers, pattern, codec));
      for (int r = 1; r <= rounds; ++r) {
        std::vector<float> g = gradient(r * 100 + std::hash<std::string>{}(worker) % 97, cluster.n);
        RoundResult result = exchange->all_reduce(r, g.data(), g.size(), {cluster.tokens.at(worker), 1.0 * r, false});
        if (results_of_first && worker == cluster.workers.front()) results_of_first->push_back(result);
        std::vector<float> params(16, static_cast<float>(r));
        exchange->after_update(r, params.data(), params.size());
        out[worker].push_back(std::move(g));
      }
    });
  }
  for (std::thread& t : threads) t.join();
  return out;
}

TEST(FolderExchange, AllGatherFp32IsTheExactWeightedAverageOnEveryReplica) {
  const fs::path root = fresh_dir("allgather");
  Cluster cluster{{"a", "b", "c"}, {{"a", 512}, {"b", 256}, {"c", 768}}};
  FakeSyncers syncers(root, cluster.workers, false);
  std::vector<RoundResult> results;
  auto out = run_rounds(root, cluster, ExchangePattern::all_gather, codec::Codec::fp32, 6, "", &results);
  for (int r = 1; r <= 6; ++r) {
    std::map<std::string, std::pair<std::vector<float>, uint64_t>> parts;
    for (const std::string& w : cluster.workers)
      parts[w] = {gradient(r * 100 + std::hash<std::string>{}(w) % 97, cluster.n), cluster.tokens[w]};
    const std::vector<float> expected = reference_average(parts);
    for (const std::string& w : cluster.workers) EXPECT_EQ(out[w][r - 1], expected) << "worker " << w << " round " << r;
    EXPECT_EQ(results[r - 1].tokens, 512u + 256u + 768u);
    EXPECT_EQ(results[r - 1].contributors, 3);
    EXPECT_DOUBLE_EQ(results[r - 1].loss, 1.0 * r);
    EXPECT_FALSE(results[r - 1].skip);
  }
  for (const std::string& w : cluster.workers) {
    const nlohmann::json stats = stats_of(root, w);
    EXPECT_EQ(stats["rounds"], 6);
    EXPECT_EQ(stats["failovers"], 0);
    EXPECT_EQ(stats["rejected_files"], 0);
    EXPECT_GT(stats["fingerprints_checked"].get<int>(), 0) << w;
    EXPECT_EQ(stats["fingerprint_mismatches"], 0);
  }
  // Old rounds are garbage-collected locally (gc_window 3): round 1's folders are gone.
  EXPECT_FALSE(fs::exists(root / "a" / "inbox" / round_dir_name(1)));
  syncers.stop();
  fs::remove_all(root);
}

TEST(FolderExchange, ShardedFp32MatchesAllGatherAndDownloadsOnlyOwnedShards) {
  const fs::path root = fresh_dir("sharded");
  Cluster cluster{{"a", "b", "c"}, {{"a", 100}, {"b", 300}, {"c", 200}}};
  FakeSyncers syncers(root, cluster.workers, true);
  auto out = run_rounds(root, cluster, ExchangePattern::sharded, codec::Codec::fp32, 4);
  for (int r = 1; r <= 4; ++r) {
    std::map<std::string, std::pair<std::vector<float>, uint64_t>> parts;
    for (const std::string& w : cluster.workers)
      parts[w] = {gradient(r * 100 + std::hash<std::string>{}(w) % 97, cluster.n), cluster.tokens[w]};
    const std::vector<float> expected = reference_average(parts);
    for (const std::string& w : cluster.workers) EXPECT_EQ(out[w][r - 1], expected) << w << " round " << r;
  }
  // Each worker received 2 of the other workers' contributions per round (its shard), not 6.
  const fs::path inbox = root / "a" / "inbox" / round_dir_name(4);
  int contributions = 0;
  for (const auto& entry : fs::directory_iterator(inbox))
    if (entry.path().filename().string().starts_with("g-") && entry.path().extension() == ".flag") ++contributions;
  EXPECT_EQ(contributions, 2);
  syncers.stop();
  fs::remove_all(root);
}

TEST(FolderExchange, LossyCodecsGiveIdenticalReplicasWithinTheirError) {
  for (codec::Codec codec : {codec::Codec::fp16, codec::Codec::bf16, codec::Codec::int8}) {
    for (ExchangePattern pattern : {ExchangePattern::all_gather, ExchangePattern::sharded}) {
      const fs::path root = fresh_dir(std::string("lossy_") + codec::codec_name(codec) + pattern_name(pattern));
      Cluster cluster{{"a", "b"}, {{"a", 64}, {"b", 192}}, 5000};
      FakeSyncers syncers(root, cluster.workers, pattern == ExchangePattern::sharded);
      auto out = run_rounds(root, cluster, pattern, codec, 2);
      std::map<std::string, std::pair<std::vector<float>, uint64_t>> parts;
      for (const std::string& w : cluster.workers)
        parts[w] = {gradient(100 + std::hash<std::string>{}(w) % 97, cluster.n), cluster.tokens[w]};
      const std::vector<float> exact = reference_average(parts);
      EXPECT_EQ(out["a"][0], out["b"][0]) << codec::codec_name(codec) << " " << pattern_name(pattern);
      double err = 0, norm = 0;
      for (size_t i = 0; i < exact.size(); ++i) {
        err += std::pow(out["a"][0][i] - exact[i], 2);
        norm += std::pow(exact[i], 2);
      }
      const double rel = std::sqrt(err / norm);
      const double bound = codec == codec::Codec::fp16 ? 1e-3 : codec == codec::Codec::bf16 ? 1e-2 : 3e-2;
      EXPECT_LT(rel, bound) << codec::codec_name(codec) << " " << pattern_name(pattern);
      syncers.stop();
  fs::remove_all(root);
    }
  }
}

TEST(FolderExchange, ADeadWorkerIsLeftOutAndItsShardsFailOver) {
  for (ExchangePattern pattern : {ExchangePattern::all_gather, ExchangePattern::sharded}) {
    const fs::path root = fresh_dir(std::string("dead_") + pattern_name(pattern));
    Cluster cluster{{"a", "b", "c"}, {{"a", 100}, {"b", 100}, {"c", 100}}, 3000};
    FakeSyncers syncers(root, cluster.workers, pattern == ExchangePattern::sharded);
    syncers.silence("b");
    auto quick = [&](const std::string& worker) {
      FolderExchangeConfig c = config_for(root, worker, cluster.workers, pattern, codec::Codec::fp32);
      c.contribution_timeout_s = 0.2;
      c.failover_timeout_s = 0.5;
      return make_folder_exchange(c);
    };
    std::map<std::string, std::vector<std::vector<float>>> out;
    std::vector<std::thread> threads;
    for (const std::string worker : {"a", "c"}) {
      threads.emplace_back([&, worker] {
        auto exchange = quick(worker);
        for (int r = 1; r <= 3; ++r) {
          std::vector<float> g = gradient(r * 10 + worker[0], cluster.n);
          RoundResult result = exchange->all_reduce(r, g.data(), g.size(), {100, 2.0, false});
          EXPECT_EQ(result.contributors, 2) << worker;
          EXPECT_EQ(result.tokens, 200u);
          out[worker].push_back(g);
        }
      });
    }
    for (std::thread& t : threads) t.join();
    for (int r = 1; r <= 3; ++r) {
      std::map<std::string, std::pair<std::vector<float>, uint64_t>> parts;
      for (const std::string w : {"a", "c"}) parts[w] = {gradient(r * 10 + w[0], cluster.n), 100};
      EXPECT_EQ(out["a"][r - 1], reference_average(parts)) << pattern_name(pattern) << " round " << r;
      EXPECT_EQ(out["c"][r - 1], out["a"][r - 1]);
    }
    // b owned a shard of round 1 (ownership rotates): someone took it over. After round 1 b is
    // out of the view (Note [Elastic membership]), so only round 1 waited for it.
    const int failovers = stats_of(root, "a")["failovers"].get<int>() + stats_of(root, "c")["failovers"].get<int>();
    EXPECT_GE(failovers, 1) << pattern_name(pattern);
    const int left_out = stats_of(root, "a")["contributions_left_out"].get<int>() +
                         stats_of(root, "c")["contributions_left_out"].get<int>();
    EXPECT_GE(left_out, 1) << pattern_name(pattern);
    EXPECT_LE(left_out, 3) << pattern_name(pattern);  // round 1's shards only
    EXPECT_GE(stats_of(root, "a")["members_dropped"].get<int>() + stats_of(root, "c")["members_dropped"].get<int>(), 1);
    syncers.stop();
  fs::remove_all(root);
  }
}

TEST(FolderExchange, AnOverflowAnywhereMakesEveryReplicaSkipTheRound) {
  const fs::path root = fresh_dir("overflow");
  const std::vector<std::string> workers{"a", "b"};
  FakeSyncers syncers(root, workers, false);
  std::map<std::string, RoundResult> results;
  std::vector<std::thread> threads;
  for (const std::string& worker : workers) {
    threads.emplace_back([&, worker] {
      auto exchange = make_folder_exchange(config_for(root, worker, workers, ExchangePattern::all_gather, codec::Codec::fp16));
      std::vector<float> g = gradient(1, 100);
      results[worker] = exchange->all_reduce(1, g.data(), g.size(), {10, 1.0, worker == "b"});
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_TRUE(results["a"].skip);
  EXPECT_TRUE(results["b"].skip);
  syncers.stop();
  fs::remove_all(root);
}

TEST(FolderExchange, FilesOfAnotherRunAreRejectedNamingTheFile) {
  const fs::path root = fresh_dir("foreign");
  const std::vector<std::string> workers{"a", "b"};
  // A stranger's contribution for b sits in a's inbox before b's real one arrives.
  wire::FileHeader header;
  header.set_run_id("another-run");
  header.set_model_fingerprint(0x1234);
  header.mutable_gradient()->set_round(1);
  const fs::path planted = root / "a" / "inbox" / round_dir_name(1) / contribution_name("b", 0);
  fs::create_directories(planted.parent_path());
  write_file_atomic(planted, wire::frame(header, "x"));
  write_file_atomic(planted.string() + ".flag", "");

  FolderExchangeConfig c = config_for(root, "a", workers, ExchangePattern::all_gather, codec::Codec::fp32);
  c.contribution_timeout_s = 0.3;
  c.failover_timeout_s = 0.6;
  c.members = {"a", "b"};
  auto exchange = make_folder_exchange(c);
  std::vector<float> g = gradient(7, 50);
  const std::vector<float> mine = g;
  // Round 1's owner is members[(0 + 1) % 2] = b, who never writes: a takes over at epoch 1 and
  // must not count the foreign file as b's contribution.
  RoundResult result = exchange->all_reduce(1, g.data(), g.size(), {10, 1.0, false});
  EXPECT_EQ(result.contributors, 1);
  EXPECT_EQ(g, mine);
  const nlohmann::json stats = stats_of(root, "a");
  EXPECT_GE(stats["rejected_files"].get<int>(), 1);
  const std::string reason = stats["rejected"][0];
  EXPECT_NE(reason.find(planted.string()), std::string::npos) << reason;
  EXPECT_NE(reason.find("another-run"), std::string::npos) << reason;
  fs::remove_all(root);
}

TEST(FolderExchange, DivergedReplicasAreDetectedByFingerprints) {
  const fs::path root = fresh_dir("fingerprint");
  const std::vector<std::string> workers{"a", "b"};
  FakeSyncers syncers(root, workers, false);
  std::vector<std::thread> threads;
  for (const std::string& worker : workers) {
    threads.emplace_back([&, worker] {
      auto exchange = make_folder_exchange(config_for(root, worker, workers, ExchangePattern::all_gather, codec::Codec::fp32));
      for (int r = 1; r <= 4; ++r) {
        std::vector<float> g = gradient(r, 64);
        exchange->all_reduce(r, g.data(), g.size(), {10, 1.0, false});
        std::vector<float> params(32, 1.0f);
        if (worker == "b" && r >= 2) params[5] = 2.0f;  // b silently drifts from round 2
        exchange->after_update(r, params.data(), params.size());
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_GE(stats_of(root, "a")["fingerprint_mismatches"].get<int>() + stats_of(root, "b")["fingerprint_mismatches"].get<int>(), 1);
  syncers.stop();
  fs::remove_all(root);
}

TEST(FolderExchange, APeerWithOtherSettingsIsRefusedOnTheFirstRound) {
  const fs::path root = fresh_dir("config");
  const std::vector<std::string> workers{"a", "b"};
  auto b = make_folder_exchange(config_for(root, "b", workers, ExchangePattern::all_gather, codec::Codec::int8));
  const fs::path published = root / "b" / "outbox" / run_config_name("b");
  const fs::path arrived = root / "a" / "inbox" / run_config_name("b");
  fs::create_directories(arrived.parent_path());
  fs::copy_file(published, arrived);
  write_file_atomic(arrived.string() + ".flag", "");
  auto a = make_folder_exchange(config_for(root, "a", workers, ExchangePattern::all_gather, codec::Codec::fp16));
  std::vector<float> g(10, 1.0f);
  try {
    a->all_reduce(1, g.data(), g.size(), {1, 1.0, false});
    FAIL() << "a mismatched peer was accepted";
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(arrived.string()), std::string::npos) << what;
    EXPECT_NE(what.find("--codec int8"), std::string::npos) << what;
  }
  fs::remove_all(root);
}

TEST(FolderExchange, HeartbeatsShowEachMembersRoundAndDeparture) {
  const fs::path root = fresh_dir("heartbeat");
  const std::vector<std::string> workers{"a", "b"};
  FakeSyncers syncers(root, workers, false);
  std::vector<std::thread> threads;
  for (const std::string& worker : workers) {
    threads.emplace_back([&, worker] {
      FolderExchangeConfig c = config_for(root, worker, workers, ExchangePattern::all_gather, codec::Codec::fp16);
      c.heartbeat_interval_s = 0;  // one per round
      auto exchange = make_folder_exchange(c);
      for (int r = 1; r <= 3; ++r) {
        std::vector<float> g = gradient(r, 100);
        exchange->all_reduce(r, g.data(), g.size(), {worker == "a" ? 300u : 100u, 2.5, false});
      }
      if (worker == "a") exchange->leave();
    });
  }
  for (std::thread& t : threads) t.join();
  // Only the newest heartbeat stays in a's outbox (the syncer deletes the older shared copies).
  int own = 0;
  for (const auto& f : fs::directory_iterator(root / "a" / "outbox" / "members" / "a"))
    if (f.path().extension() == ".gbx") ++own;
  EXPECT_EQ(own, 1);
  // The departure travels like any file: give the stand-in syncer a moment to carry it.
  for (int i = 0; i < 500 && read_run_status(root / "b" / "inbox", 60).members.at(0).state != "left"; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  syncers.stop();
  // b's mirror of the folder: a has left after round 3; b is live (its own, in its outbox).
  const RunStatus seen_by_b = read_run_status(root / "b" / "inbox", 60);
  ASSERT_EQ(seen_by_b.members.size(), 1u);
  EXPECT_EQ(seen_by_b.members[0].worker, "a");
  EXPECT_EQ(seen_by_b.members[0].state, "left");
  EXPECT_EQ(seen_by_b.members[0].applied_round, 3u);
  EXPECT_EQ(seen_by_b.members[0].tokens, 3u * 400u);
  EXPECT_GT(seen_by_b.members[0].bytes_uploaded_24h, 0u);
  EXPECT_EQ(seen_by_b.newest_round, 3u);
  const RunStatus b_itself = read_run_status(root / "b" / "outbox", 60);
  ASSERT_EQ(b_itself.members.size(), 1u);
  EXPECT_EQ(b_itself.members[0].state, "live");
  EXPECT_EQ(read_run_status(root / "b" / "outbox", -1).members[0].state, "stale");
  const std::string text = format_run_status(seen_by_b);
  EXPECT_NE(text.find("left"), std::string::npos) << text;
  fs::remove_all(root);
}

// A shard owner that announced its departure is not waited for: its successor takes the shard
// over at the contribution deadline, not after the failover timeout.
TEST(FolderExchange, AnOwnerThatLeftIsReplacedWithoutTheFailoverTimeout) {
  const fs::path root = fresh_dir("left_owner");
  Cluster cluster{{"a", "b", "c"}, {{"a", 100}, {"b", 100}, {"c", 100}}, 3000};
  FakeSyncers syncers(root, cluster.workers, false);
  syncers.silence("b");  // b owns round 1's only shard ((0 + 1) mod 3) and is gone...
  {
    FolderExchangeConfig c = config_for(root, "b", cluster.workers, ExchangePattern::all_gather, codec::Codec::fp32);
    make_folder_exchange(c)->leave();  // ...after saying so
  }
  for (const std::string to : {"a", "c"}) {  // its "left" heartbeat reached the others
    for (const auto& hb : fs::recursive_directory_iterator(root / "b" / "outbox" / "members")) {
      if (!hb.is_regular_file() || hb.path().extension() != ".gbx") continue;
      const fs::path target = root / to / "inbox" / fs::relative(hb.path(), root / "b" / "outbox");
      fs::create_directories(target.parent_path());
      fs::copy_file(hb.path(), target);
      write_file_atomic(target.string() + ".flag", "");
    }
  }
  std::map<std::string, double> seconds;
  std::vector<std::thread> threads;
  for (const std::string worker : {"a", "c"}) {
    threads.emplace_back([&, worker] {
      FolderExchangeConfig c = config_for(root, worker, cluster.workers, ExchangePattern::all_gather, codec::Codec::fp32);
      c.contribution_timeout_s = 0.3;
      c.failover_timeout_s = 20;
      auto exchange = make_folder_exchange(c);
      std::vector<float> g = gradient(worker[0], cluster.n);
      const auto start = std::chrono::steady_clock::now();
      RoundResult result = exchange->all_reduce(1, g.data(), g.size(), {100, 1.0, false});
      seconds[worker] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      EXPECT_EQ(result.contributors, 2) << worker;
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_LT(seconds["a"], 10.0);  // well under the 20 s failover timeout
  EXPECT_LT(seconds["c"], 10.0);
  EXPECT_EQ(stats_of(root, "a")["failovers"].get<int>() + stats_of(root, "c")["failovers"].get<int>(), 1);
  syncers.stop();
  fs::remove_all(root);
}

// Whole-run resume: a worker outside the last view, with nobody live, waits --stale-after for an
// agreement, then becomes the view itself and carries on (Note [Elastic membership]).
TEST(FolderExchange, WithNobodyLiveAFollowerResumesTheRunAlone) {
  const fs::path root = fresh_dir("alone");
  FolderExchangeConfig c = config_for(root, "z", {"x"}, ExchangePattern::all_gather, codec::Codec::fp32);
  c.heartbeat_interval_s = 0.1;
  c.stale_after_s = 0.3;
  auto z = make_folder_exchange(c);
  EXPECT_TRUE(z->will_contribute(2)) << "nobody is live: it must be ready to carry the run";
  std::vector<float> g = gradient(7, 64);
  const std::vector<float> mine = g;
  const auto start = std::chrono::steady_clock::now();
  RoundResult result = z->all_reduce(1, g.data(), g.size(), {64, 1.5, false});
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GE(waited, 0.3);
  EXPECT_EQ(result.contributors, 1);
  EXPECT_EQ(g, mine);  // the average of one
  EXPECT_EQ(stats_of(root, "z")["self_elections"], 1);
  // The view it agreed for round 2 is itself: no more waiting.
  EXPECT_TRUE(z->will_contribute(2));
  result = z->all_reduce(2, g.data(), g.size(), {64, 1.5, false});
  EXPECT_EQ(result.contributors, 1);
  EXPECT_EQ(stats_of(root, "z")["self_elections"], 1);
  fs::remove_all(root);
}

TEST(FolderExchangeConfig, BadSettingsNameTheFlag) {
  FolderExchangeConfig c = config_for("/tmp", "a", {"a", "b"}, ExchangePattern::all_gather, codec::Codec::fp16);
  c.worker = "a/b";
  try {
    c.validate();
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("--worker"), std::string::npos);
  }
  c.worker = "z";
  EXPECT_NO_THROW(c.validate());  // not a founder: it joins the run once it exists
  c.members = {"a", "b", "a"};
  EXPECT_THROW(c.validate(), InputError);
  c.members = {"a", "b"};
  c.stale_after_s = c.heartbeat_interval_s;
  EXPECT_THROW(c.validate(), InputError);
  EXPECT_THROW(parse_pattern("ring"), InputError);
}

}  // namespace
}  // namespace gradbox::exchange

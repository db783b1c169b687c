// The folder protocol in one process: FolderExchange replicas as simulated processes on the
// simulated folder, in virtual time (virtual_cluster.h). Deadlines and failovers are asserted in
// virtual seconds, exactly; nothing here sleeps. The real syncer and the real folder are tested
// in tests/syncer and, with the trainer, in tests/cli.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <stdexcept>
#include <utility>

#include "common/error.h"
#include "exchange/exchange_context.h"
#include "exchange/folder_names.h"
#include "virtual_cluster.h"
#include "wire/envelope.h"

namespace gradbox::exchange {
namespace {

std::vector<float> gradient(uint64_t seed, size_t n) {
  std::mt19937_64 rng(seed);
  std::vector<float> g(n);
  for (float& x : g) x = static_cast<float>(static_cast<double>(rng() >> 11) / 9007199254740992.0 - 0.5) * 2e-3f;
  return g;
}

uint64_t seed_of(const std::string& worker, uint64_t round) { return round * 100 + static_cast<uint64_t>(worker[0]); }

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

struct Team {
  std::vector<std::string> workers;
  std::map<std::string, uint64_t> tokens;
  size_t n = 10007;  // not divisible by the shard count
};

mirror::FolderFaults faults_for(ExchangePattern pattern) {
  mirror::FolderFaults f;
  f.on_demand_prefixes = {"part-", "p-", "g-"};  // as gradbox train starts its syncer
  return f;
}

// Every worker of `team` but `dead` runs `rounds` rounds; returns each one's averages per round.
struct Outcome {
  std::map<std::string, std::vector<std::vector<float>>> averages;
  std::map<std::string, std::vector<RoundResult>> results;
  double finished_at = 0;
};
Outcome run_rounds(VirtualCluster& cluster, const Team& team, ExchangePattern pattern, codec::Codec codec, int rounds,
                   const std::string& dead = "", const std::function<void(FolderExchangeConfig&)>& tweak = {}) {
  auto out = std::make_shared<Outcome>();
  for (const std::string& worker : team.workers) {
    if (worker == dead) continue;
    FolderExchangeConfig c = cluster.config(worker, team.workers, pattern, codec);
    if (tweak) tweak(c);
    const uint64_t tokens = team.tokens.at(worker);
    const size_t n = team.n;
    cluster.spawn(c, [out, worker, tokens, n, rounds](GradientExchange& exchange, mirror::Clock& clock) {
      for (int r = 1; r <= rounds; ++r) {
        std::vector<float> g = gradient(seed_of(worker, r), n);
        out->results[worker].push_back(exchange.all_reduce(r, g.data(), g.size(), {tokens, 1.0 * r, false}));
        std::vector<float> params(16, static_cast<float>(r));
        exchange.after_update(r, params.data(), params.size());
        out->averages[worker].push_back(std::move(g));
      }
      out->finished_at = std::max(out->finished_at, clock.now_s());
    });
  }
  cluster.sim().run_until(1e6);
  EXPECT_TRUE(cluster.sim().failures().empty()) << cluster.sim().failures().front();
  return *out;
}

std::vector<float> expected_average(const Team& team, const std::vector<std::string>& who, int round) {
  std::map<std::string, std::pair<std::vector<float>, uint64_t>> parts;
  for (const std::string& w : who) parts[w] = {gradient(seed_of(w, round), team.n), team.tokens.at(w)};
  return reference_average(parts);
}

// The buffer pool hands out the smallest spare that holds what is asked (a kept buffer that must
// grow costs what a fresh one does), else the largest grown now with room to spare, and the
// largest when the size is not known.
TEST(BufferPool, TakesTheSmallestThatFitsElseGrowsTheLargest) {
  BufferPool pool;
  for (size_t mb : {8, 2, 5}) {
    std::string b;
    b.reserve(mb << 20);
    pool.give(std::move(b));
  }
  pool.give(std::string(100, 'x'));  // too small to be worth keeping
  EXPECT_EQ(pool.spare(), 3u);
  std::string fit = pool.take(3 << 20);
  EXPECT_GE(fit.capacity(), size_t{5} << 20);
  EXPECT_LT(fit.capacity(), size_t{8} << 20);
  EXPECT_TRUE(fit.empty());
  std::string grown = pool.take(size_t{20} << 20);
  EXPECT_GE(grown.capacity(), (size_t{20} << 20) + (size_t{20} << 20) / 8);
  std::string largest = pool.take();
  EXPECT_GE(largest.capacity(), size_t{2} << 20);
  EXPECT_EQ(pool.spare(), 0u);
  EXPECT_EQ(pool.take().capacity(), std::string().capacity());  // none left: a fresh one
}

// Round folders sort by name: eight digits at least, more past 99,999,999; parsed back.
TEST(FolderNames, RoundFoldersAreZeroPaddedAndParseBack) {
  EXPECT_EQ(round_dir_name(0), "rounds/r00000000");
  EXPECT_EQ(round_dir_name(12), "rounds/r00000012");
  EXPECT_EQ(round_dir_name(99'999'999), "rounds/r99999999");
  EXPECT_EQ(round_dir_name(123'456'789), "rounds/r123456789");
  EXPECT_EQ(parse_round_dir("r00000012"), 12u);
  EXPECT_EQ(parse_round_dir(round_dir_name(123'456'789).substr(7)), 123'456'789u);
}

TEST(FolderExchange, AllGatherFp32IsTheExactWeightedAverageOnEveryReplica) {
  VirtualCluster cluster("allgather");
  Team team{{"a", "b", "c"}, {{"a", 512}, {"b", 256}, {"c", 768}}};
  Outcome out = run_rounds(cluster, team, ExchangePattern::all_gather, codec::Codec::fp32, 6);
  for (int r = 1; r <= 6; ++r) {
    const std::vector<float> expected = expected_average(team, team.workers, r);
    for (const std::string& w : team.workers) EXPECT_EQ(out.averages[w][r - 1], expected) << w << " round " << r;
    const RoundResult& result = out.results["a"][r - 1];
    EXPECT_EQ(result.tokens, 512u + 256u + 768u);
    EXPECT_EQ(result.contributors, 3);
    EXPECT_DOUBLE_EQ(result.loss, 1.0 * r);
    EXPECT_FALSE(result.skip);
  }
  int summed_ahead = 0;
  for (const std::string& w : team.workers) {
    const nlohmann::json stats = cluster.stats(w);
    EXPECT_EQ(stats["rounds"], 6);
    EXPECT_EQ(stats["failovers"], 0);
    EXPECT_EQ(stats["rejected_files"], 0);
    EXPECT_GT(stats["fingerprints_checked"].get<int>(), 0) << w;
    EXPECT_EQ(stats["fingerprint_mismatches"], 0);
    // Each replica decodes each contribution once a round; the commit's owner (every worker in
    // turn) checks and sums in that one decode (Note [The check and the sum in one pass]).
    EXPECT_EQ(stats["contributions_decoded"], 6 * 3) << w;
    summed_ahead += stats["commits_summed_ahead"].get<int>();
  }
  // Replicas that had every contribution before the owner's commit came summed them then (Note
  // [Summing ahead of the commit]): at most the 2 non-owners of each of the 6 rounds (8 here).
  EXPECT_GE(summed_ahead, 1);
  EXPECT_LE(summed_ahead, 6 * 2);
  // Old rounds are garbage-collected (gc_window 3): round 1 is gone from a's mirror.
  EXPECT_TRUE(cluster.folder().disk("a").list(round_dir_name(1)).empty());
  EXPECT_TRUE(cluster.folder().disk("a").list_published(round_dir_name(1)).empty());
}

TEST(FolderExchange, ShardedFp32MatchesAllGatherAndDownloadsOnlyOwnedShards) {
  VirtualCluster cluster("sharded", 2, faults_for(ExchangePattern::sharded));
  Team team{{"a", "b", "c"}, {{"a", 100}, {"b", 300}, {"c", 200}}};
  Outcome out = run_rounds(cluster, team, ExchangePattern::sharded, codec::Codec::fp32, 4);
  for (int r = 1; r <= 4; ++r)
    for (const std::string& w : team.workers)
      EXPECT_EQ(out.averages[w][r - 1], expected_average(team, team.workers, r)) << w << " round " << r;
  // Each owner decoded its shard's three contributions once a round, for the check and the sum.
  for (const std::string& w : team.workers) EXPECT_EQ(cluster.stats(w)["contributions_decoded"], 4 * 3) << w;
  // a received the 2 other contributions to its own shard of round 4, not all 6.
  int contributions = 0;
  for (const mirror::Arrival& file : cluster.folder().disk("a").list(round_dir_name(4)))
    if (parse_contribution_name(file.name)) ++contributions;
  EXPECT_EQ(contributions, 2);
}

TEST(FolderExchange, LossyCodecsGiveIdenticalReplicasWithinTheirError) {
  for (codec::Codec codec : {codec::Codec::fp16, codec::Codec::bf16, codec::Codec::int8, codec::Codec::int4}) {
    for (ExchangePattern pattern : {ExchangePattern::all_gather, ExchangePattern::sharded}) {
      const std::string what = std::string(codec::codec_name(codec)) + " " + pattern_name(pattern);
      VirtualCluster cluster("lossy", 3, faults_for(pattern));
      Team team{{"a", "b"}, {{"a", 64}, {"b", 192}}, 5000};
      Outcome out = run_rounds(cluster, team, pattern, codec, 2);
      const std::vector<float> exact = expected_average(team, team.workers, 1);
      EXPECT_EQ(out.averages["a"][0], out.averages["b"][0]) << what;
      double err = 0, norm = 0;
      for (size_t i = 0; i < exact.size(); ++i) {
        err += std::pow(out.averages["a"][0][i] - exact[i], 2);
        norm += std::pow(exact[i], 2);
      }
      const double bound = codec == codec::Codec::fp16   ? 1e-3
                           : codec == codec::Codec::bf16 ? 1e-2
                           : codec == codec::Codec::int8 ? 3e-2
                                                         : 2e-1;  // measured 0.07 and 0.12
      EXPECT_LT(std::sqrt(err / norm), bound) << what;
    }
  }
}

TEST(FolderExchange, ADeadWorkerIsLeftOutAndItsShardsFailOverAfterExactlyTheTimeouts) {
  for (ExchangePattern pattern : {ExchangePattern::all_gather, ExchangePattern::sharded}) {
    VirtualCluster cluster("dead", 4, faults_for(pattern));
    Team team{{"a", "b", "c"}, {{"a", 100}, {"b", 100}, {"c", 100}}, 3000};
    Outcome out = run_rounds(cluster, team, pattern, codec::Codec::fp32, 3, "b", [](FolderExchangeConfig& c) {
      c.contribution_timeout_s = 2;
      c.failover_timeout_s = 5;
    });
    for (int r = 1; r <= 3; ++r) {
      EXPECT_EQ(out.averages["a"][r - 1], expected_average(team, {"a", "c"}, r)) << pattern_name(pattern) << " " << r;
      EXPECT_EQ(out.averages["c"][r - 1], out.averages["a"][r - 1]);
      EXPECT_EQ(out.results["a"][r - 1].contributors, 2);
      EXPECT_EQ(out.results["a"][r - 1].tokens, 200u);
    }
    // b owned a shard of round 1 (ownership rotates): its successor's window opened once b's
    // (5 s) had passed, and it waited its contribution deadline (2 s) for b there too. After
    // round 1 b is out of the view, so only round 1 waited. Virtual time makes that exact.
    const int failovers = cluster.stats("a")["failovers"].get<int>() + cluster.stats("c")["failovers"].get<int>();
    EXPECT_GE(failovers, 1) << pattern_name(pattern);
    const int left_out =
        cluster.stats("a")["contributions_left_out"].get<int>() + cluster.stats("c")["contributions_left_out"].get<int>();
    EXPECT_GE(left_out, 1) << pattern_name(pattern);
    EXPECT_LE(left_out, 3) << pattern_name(pattern);  // round 1's shards only
    EXPECT_GE(out.results["a"][0].wait_seconds, 7.0) << pattern_name(pattern);
    EXPECT_LT(out.results["a"][0].wait_seconds, 8.0) << pattern_name(pattern);
    EXPECT_LT(out.results["a"][1].wait_seconds, 1.0) << pattern_name(pattern);
  }
}

TEST(FolderExchange, AnOverflowAnywhereMakesEveryReplicaSkipTheRound) {
  VirtualCluster cluster("overflow");
  std::map<std::string, RoundResult> results;
  for (const std::string worker : {"a", "b"}) {
    cluster.spawn(cluster.config(worker, {"a", "b"}, ExchangePattern::all_gather, codec::Codec::fp16),
                  [&results, worker](GradientExchange& exchange, mirror::Clock&) {
                    std::vector<float> g = gradient(1, 100);
                    results[worker] = exchange.all_reduce(1, g.data(), g.size(), {10, 1.0, worker == "b"});
                  });
  }
  cluster.sim().run_until(1e6);
  EXPECT_TRUE(results.at("a").skip);
  EXPECT_TRUE(results.at("b").skip);
}

TEST(FolderExchange, FilesOfAnotherRunAreRejectedNamingTheFile) {
  VirtualCluster cluster("foreign");
  // A stranger's contribution for b sits in the folder before anything else.
  wire::FileHeader header;
  header.set_run_id("another-run");
  header.set_model_fingerprint(0x1234);
  header.mutable_gradient()->set_round(1);
  const std::string planted = round_dir_name(1) + "/" + contribution_name("b", 0, "0123456789abcdef");
  cluster.folder().inject(planted, wire::frame(header, "x"));
  FolderExchangeConfig c = cluster.config("a", {"a", "b"});
  c.contribution_timeout_s = 0.3;
  c.failover_timeout_s = 0.6;
  RoundResult result;
  std::vector<float> g = gradient(7, 50);
  const std::vector<float> mine = g;
  // Round 1's owner is members[(0 + 1) % 2] = b, who never writes: a takes over at epoch 1 and
  // must not count the foreign file as b's contribution.
  cluster.spawn(c, [&](GradientExchange& exchange, mirror::Clock&) {
    result = exchange.all_reduce(1, g.data(), g.size(), {10, 1.0, false});
  });
  cluster.sim().run_until(1e6);
  EXPECT_EQ(result.contributors, 1);
  EXPECT_EQ(g, mine);
  const nlohmann::json stats = cluster.stats("a");
  ASSERT_GE(stats["rejected_files"].get<int>(), 1);
  const std::string reason = stats["rejected"][0];
  EXPECT_NE(reason.find(cluster.folder().disk("a").where(planted)), std::string::npos) << reason;
  EXPECT_NE(reason.find("another-run"), std::string::npos) << reason;
}

TEST(FolderExchange, DivergedReplicasAreDetectedByFingerprints) {
  VirtualCluster cluster("fingerprint");
  for (const std::string worker : {"a", "b"}) {
    cluster.spawn(cluster.config(worker, {"a", "b"}), [worker](GradientExchange& exchange, mirror::Clock&) {
      for (int r = 1; r <= 4; ++r) {
        std::vector<float> g = gradient(r, 64);
        exchange.all_reduce(r, g.data(), g.size(), {10, 1.0, false});
        std::vector<float> params(32, 1.0f);
        if (worker == "b" && r >= 2) params[5] = 2.0f;  // b silently drifts from round 2
        // The state is handed over only when a fingerprint is due (every 2nd round here): a GPU
        // replica copies it to the host only then.
        EXPECT_EQ(exchange.wants_state_after(r), r % 2 == 0) << "round " << r;
        if (exchange.wants_state_after(r)) exchange.after_update(r, params.data(), params.size());
      }
    });
  }
  cluster.sim().run_until(1e6);
  EXPECT_GE(cluster.stats("a")["fingerprint_mismatches"].get<int>() + cluster.stats("b")["fingerprint_mismatches"].get<int>(), 1);
}

TEST(FolderExchange, APeerWithOtherSettingsIsRefusedOnTheFirstRound) {
  VirtualCluster cluster("config");
  std::string error;
  // b publishes its config at construction; a starts once it has arrived.
  cluster.spawn(cluster.config("b", {"a", "b"}, ExchangePattern::all_gather, codec::Codec::int8),
                [](GradientExchange&, mirror::Clock& clock) { clock.sleep_s(100); });
  cluster.sim().at(5, [&] {
    cluster.spawn(cluster.config("a", {"a", "b"}, ExchangePattern::all_gather, codec::Codec::fp16),
                  [&error](GradientExchange& exchange, mirror::Clock& clock) {
                    clock.sleep_s(1);  // b's config arrives
                    std::vector<float> g(10, 1.0f);
                    try {
                      exchange.all_reduce(1, g.data(), g.size(), {1, 1.0, false});
                    } catch (const InputError& e) {
                      error = e.what();
                    }
                  });
  });
  cluster.sim().run_until(10);
  EXPECT_NE(error.find("mem://a/run/config-b-"), std::string::npos) << error;
  EXPECT_NE(error.find("--codec int8"), std::string::npos) << error;
}

std::optional<wire::Heartbeat> newest_heartbeat(mirror::Mirror& mirror, const std::string& worker) {
  std::optional<wire::Heartbeat> newest;
  for (const mirror::Arrival& file : mirror.list("members/" + worker)) {
    const std::optional<std::string> bytes = mirror.read("members/" + worker + "/" + file.name);
    if (!bytes) continue;
    const wire::Heartbeat hb = wire::parse(*bytes, file.name).header.heartbeat();
    if (!newest || hb.sequence() > newest->sequence()) newest = hb;
  }
  return newest;
}

TEST(FolderExchange, HeartbeatsShowEachMembersRoundAndDeparture) {
  VirtualCluster cluster("heartbeat");
  for (const std::string worker : {"a", "b"}) {
    FolderExchangeConfig c = cluster.config(worker, {"a", "b"}, ExchangePattern::all_gather, codec::Codec::fp16);
    c.heartbeat_interval_s = 0;  // one per round
    cluster.spawn(c, [worker](GradientExchange& exchange, mirror::Clock&) {
      for (int r = 1; r <= 3; ++r) {
        std::vector<float> g = gradient(r, 100);
        exchange.all_reduce(r, g.data(), g.size(), {worker == "a" ? 300u : 100u, 2.5, false});
      }
      if (worker == "a") exchange.leave();
    });
  }
  cluster.sim().run_until(1e6);
  // Only the newest heartbeat stays published (the syncer deletes the older shared copies).
  EXPECT_EQ(cluster.folder().disk("a").list_published("members/a").size(), 1u);
  // b's mirror of the folder: a has left after round 3.
  const std::optional<wire::Heartbeat> a = newest_heartbeat(cluster.folder().disk("b"), "a");
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->state(), "left");
  EXPECT_EQ(a->applied_round(), 3u);
  EXPECT_EQ(a->tokens(), 3u * 400u);
  EXPECT_GT(a->bytes_uploaded_24h(), 0u);
}

// a and c start at virtual second 2 and reduce round 1, whose only shard b owns ((0 + 1) mod 3);
// a 0.3 s contribution deadline against a 20 s failover timeout tells which one they waited.
std::map<std::string, RoundResult> round_one_without_its_owner(VirtualCluster& cluster, const std::vector<std::string>& team,
                                                               const std::function<void(FolderExchangeConfig&)>& tweak = {}) {
  auto results = std::make_shared<std::map<std::string, RoundResult>>();
  cluster.sim().at(2, [&cluster, &team, tweak, results] {
    for (const std::string worker : {"a", "c"}) {
      FolderExchangeConfig c = cluster.config(worker, team);
      c.contribution_timeout_s = 0.3;
      c.failover_timeout_s = 20;
      if (tweak) tweak(c);
      cluster.spawn(c, [results, worker](GradientExchange& exchange, mirror::Clock&) {
        std::vector<float> g = gradient(worker[0], 3000);
        (*results)[worker] = exchange.all_reduce(1, g.data(), g.size(), {100, 1.0, false});
      });
    }
  });
  cluster.sim().run_until(1e6);
  return *results;
}

// A shard owner that announced its departure is not waited for: its successor takes the shard
// over at the contribution deadline, not after the failover timeout.
TEST(FolderExchange, AnOwnerThatLeftIsReplacedWithoutTheFailoverTimeout) {
  VirtualCluster cluster("left_owner");
  const std::vector<std::string> team{"a", "b", "c"};
  // b owns round 1's only shard ((0 + 1) mod 3) and is gone, after saying so.
  cluster.spawn(cluster.config("b", team), [](GradientExchange& exchange, mirror::Clock&) { exchange.leave(); });
  const std::map<std::string, RoundResult> results = round_one_without_its_owner(cluster, team);
  for (const std::string worker : {"a", "c"}) {
    EXPECT_EQ(results.at(worker).contributors, 2) << worker;
    EXPECT_LT(results.at(worker).wait_seconds, 2.0) << worker;  // the 0.3 s deadline, not the 20 s failover
  }
  EXPECT_EQ(cluster.stats("a")["failovers"].get<int>() + cluster.stats("c")["failovers"].get<int>(), 1);
}

// A shard owner that died without a word (a killed session) is not waited for either once its
// heartbeat is stale: its successor takes over at the contribution deadline, not after the
// failover timeout. Before, each dead owner in line cost a whole failover timeout (the
// projection saw a round wait 4,441 s behind four of them).
TEST(FolderExchange, AnOwnerWhoseHeartbeatWentStaleIsReplacedWithoutTheFailoverTimeout) {
  for (const bool stale : {true, false}) {
    VirtualCluster cluster(stale ? "stale_owner" : "fresh_owner");
    const std::vector<std::string> team{"a", "b", "c"};
    // b owns round 1's only shard ((0 + 1) mod 3), beats once and dies.
    FolderExchangeConfig dead = cluster.config("b", team);
    dead.heartbeat_interval_s = 1;
    cluster.spawn(dead, [](GradientExchange& exchange, mirror::Clock&) { exchange.between_rounds(0); });
    const std::map<std::string, RoundResult> results = round_one_without_its_owner(cluster, team, [stale](FolderExchangeConfig& c) {
      c.heartbeat_interval_s = 1;
      c.stale_after_s = stale ? 3 : 60;  // b's one heartbeat goes stale 3 s after it arrived, or not before the end
    });
    ASSERT_TRUE(cluster.sim().failures().empty()) << cluster.sim().failures().front();
    for (const std::string worker : {"a", "c"}) {
      ASSERT_TRUE(results.count(worker)) << worker;
      EXPECT_EQ(results.at(worker).contributors, 2) << worker;
      if (stale) {
        EXPECT_LT(results.at(worker).wait_seconds, 5.0) << worker;  // b's heartbeat going stale, not the 20 s failover
      } else {
        EXPECT_GE(results.at(worker).wait_seconds, 20.0) << worker;  // a fresh owner gets its window
      }
    }
    EXPECT_EQ(cluster.stats("a")["failovers"].get<int>() + cluster.stats("c")["failovers"].get<int>(), 1);
  }
}

// Whole-run resume: a worker outside the last view, with nobody live, waits --stale-after for an
// agreement, then becomes the view itself and carries on (Note [Elastic membership]).
TEST(FolderExchange, WithNobodyLiveAFollowerResumesTheRunAlone) {
  VirtualCluster cluster("alone");
  FolderExchangeConfig c = cluster.config("z", {"x"});
  c.heartbeat_interval_s = 1;
  c.stale_after_s = 3;
  std::vector<RoundResult> results;
  bool ready_to_carry = false, carries_on = false;
  std::vector<float> g = gradient(7, 64);
  const std::vector<float> mine = g;
  cluster.spawn(c, [&](GradientExchange& exchange, mirror::Clock&) {
    ready_to_carry = exchange.will_contribute(2);
    results.push_back(exchange.all_reduce(1, g.data(), g.size(), {64, 1.5, false}));
    carries_on = exchange.will_contribute(2);
    results.push_back(exchange.all_reduce(2, g.data(), g.size(), {64, 1.5, false}));
  });
  cluster.sim().run_until(1e6);
  EXPECT_TRUE(ready_to_carry) << "nobody is live: it must be ready to carry the run";
  ASSERT_EQ(results.size(), 2u);
  EXPECT_GE(results[0].wait_seconds, 3.0);
  EXPECT_LT(results[0].wait_seconds, 5.0);
  EXPECT_EQ(results[0].contributors, 1);
  EXPECT_EQ(g, mine);  // the average of one
  EXPECT_TRUE(carries_on);  // the view it agreed for round 2 is itself: no more waiting
  EXPECT_EQ(results[1].contributors, 1);
  EXPECT_LT(results[1].wait_seconds, 1.0);
  EXPECT_EQ(cluster.stats("z")["self_elections"], 1);
}

// The clock of a process, whose next wait first runs `on_sleep` (once).
class MeddlingClock final : public mirror::Clock {
 public:
  explicit MeddlingClock(mirror::Clock& clock) : clock_(clock) {}
  double now_s() override { return clock_.now_s(); }
  int64_t unix_ms() override { return clock_.unix_ms(); }
  void sleep_s(double seconds) override {
    if (on_sleep) std::exchange(on_sleep, nullptr)();
    clock_.sleep_s(seconds);
  }
  std::function<void()> on_sleep;

 private:
  mirror::Clock& clock_;
};

TEST(FolderExchange, ACallWhileAnotherIsInFlightIsRefusedAtOnceAndTheRoundGoesOn) {
  // Note [One caller at a time]: a waits for b's contribution; a call made meanwhile is refused.
  VirtualCluster cluster("folder_one_caller");
  const std::vector<std::string> team{"a", "b"};
  std::string refused;
  std::vector<float> averaged;
  cluster.sim().spawn("a", [&](mirror::Clock& clock) {
    MeddlingClock meddling(clock);
    auto exchange = make_folder_exchange(cluster.config("a", team), cluster.folder().disk("a"), meddling);
    meddling.on_sleep = [&] {
      try {
        exchange->will_contribute(2);
      } catch (const std::logic_error& e) {
        refused = e.what();
      }
    };
    std::vector<float> g(64, 1.0f);
    exchange->all_reduce(1, g.data(), g.size(), {10, 1.0, false});
    averaged = g;
  });
  cluster.spawn(cluster.config("b", team), [](GradientExchange& exchange, mirror::Clock&) {
    std::vector<float> g(64, 3.0f);
    exchange.all_reduce(1, g.data(), g.size(), {10, 1.0, false});
  });
  cluster.sim().run_until(1e6);
  EXPECT_TRUE(cluster.sim().failures().empty()) << cluster.sim().failures().front();
  EXPECT_NE(refused.find("FolderExchange::will_contribute called while FolderExchange::all_reduce is in flight"),
            std::string::npos)
      << "refused: '" << refused << "'";
  ASSERT_EQ(averaged.size(), 64u);
  EXPECT_FLOAT_EQ(averaged[0], 2.0f);  // the round in flight was left intact
}

TEST(FolderExchangeConfig, BadSettingsNameTheFlag) {
  VirtualCluster cluster("config_flags");
  FolderExchangeConfig c = cluster.config("a", {"a", "b"});
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

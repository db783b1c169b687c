// Faults the folder protocol once did not survive, each reproduced in virtual time on the
// elastic-run harness (elastic_run.h): a folder outage, namesakes, pauses, copied and forged
// files, members writing under another's name, poisoned contributions, clocks from the future.
#include <gtest/gtest.h>

#include <iostream>
#include <limits>
#include <set>
#include <tuple>

#include "common/error.h"
#include "elastic_run.h"
#include "exchange/exchange_context.h"
#include "exchange/folder_names.h"
#include "sim/sim_worker.h"
#include "virtual_cluster.h"
#include "wire/envelope.h"
#include "wire/file_mac.h"
#include "../wire/forged_files.h"

namespace gradbox::exchange {
namespace {

namespace fs = std::filesystem;

// The shared folder unreachable for 20 s (an unmounted Drive): before, both workers agreed
// rounds without each other and trained on as two models, exiting 0. Now the one that cannot
// see the folder agrees nothing alone, and both finish identical.
TEST(ProtocolFaults, AWorkerCutOffFromTheFolderNeverAgreesARoundAlone) {
  ElasticRun run("outage", {"a", "b"});
  run.start(run.spec("a"));
  run.start(run.spec("b"));
  run.cluster().folder().outage("a", 4.0, 24.0);
  run.cluster().sim().run_until(1e5);
  EXPECT_TRUE(run.cluster().sim().failures().empty()) << run.cluster().sim().failures().front();
  const std::map<std::string, uint64_t> finals = run.observer().finals();
  ASSERT_EQ(finals.size(), 2u);
  EXPECT_EQ(finals.at("a"), finals.at("b"));
  EXPECT_TRUE(run.divergent_rounds().empty()) << run.divergent_rounds().front();
  // a held back: it postponed leaving b out while blind, or took back an agreement that could not
  // reach the folder in time.
  const nlohmann::json a = run.cluster().stats("a");
  EXPECT_GE(a["blind_waits"].get<int>() + a["agreements_withdrawn"].get<int>(), 1);
  EXPECT_EQ(run.cluster().stats("a")["fingerprint_mismatches"], 0);
}

// Two sessions started with one worker name: before, their files collided, a torn file reached
// the peer and the peer hung. Now the second is refused, naming the name, and the run goes on.
// A second session named like b, with its own disk and run folder, starting at `at`; what it
// was refused with lands in *refusal.
void start_namesake(ElasticRun& run, double at, std::string* refusal) {
  sim::SimWorkerSpec twin = run.spec("b");
  twin.run_dir = run.cluster().root() / "run-b-twin";
  twin.exchange.incarnation_seed = 99;
  run.cluster().sim().at(at, [&run, twin, refusal] {
    run.cluster().sim().spawn("b-twin", [&run, twin, refusal](mirror::Clock& clock) {
      try {
        sim::run_sim_worker(twin, run.cluster().folder().disk("b-twin"), clock, run.observer());
      } catch (const InputError& e) {
        *refusal = e.what();
      }
    });
  });
}

TEST(ProtocolFaults, ASecondSessionUnderALiveNameIsRefused) {
  ElasticRun run("namesake", {"a", "b"});
  run.start(run.spec("a"));
  run.start(run.spec("b"));
  std::string refusal;
  start_namesake(run, 5.0, &refusal);
  run.cluster().sim().run_until(1e5);
  EXPECT_TRUE(run.cluster().sim().failures().empty()) << run.cluster().sim().failures().front();
  EXPECT_NE(refusal.find("--worker b"), std::string::npos) << refusal;
  EXPECT_NE(refusal.find("is live under this name"), std::string::npos) << refusal;
  const std::map<std::string, uint64_t> finals = run.observer().finals();
  ASSERT_EQ(finals.size(), 2u);
  EXPECT_EQ(finals.at("a"), finals.at("b"));
}

// Both sessions start at once, so neither sees the other at its join: the one that started
// later stops as soon as it does, and the first one carries on.
TEST(ProtocolFaults, OfTwoSimultaneousNamesakesTheLaterStops) {
  ElasticRun run("namesakes", {"a", "b"});
  run.start(run.spec("a"));
  run.start(run.spec("b"));
  std::string refusal;
  start_namesake(run, 0.001, &refusal);
  run.cluster().sim().run_until(1e5);
  EXPECT_TRUE(run.cluster().sim().failures().empty()) << run.cluster().sim().failures().front();
  EXPECT_NE(refusal.find("is live under this name"), std::string::npos) << refusal;
  const std::map<std::string, uint64_t> finals = run.observer().finals();
  ASSERT_EQ(finals.size(), 2u);
  EXPECT_EQ(finals.at("a"), finals.at("b"));
}

// A worker paused for 30 s (a hung session) comes back as a follower: before, it was never let
// back in though caught up and heartbeating. Now it contributes again a few rounds later.
TEST(ProtocolFaults, AWorkerBackFromAPauseIsLetInAgain) {
  ElasticRun run("pause", {"a", "b", "c"});
  run.start(run.spec("a", 200));
  run.start(run.spec("b", 200));
  const auto c = run.start(run.spec("c", 200));
  run.cluster().sim().at(5.0, [&] { run.cluster().sim().pause(c, 35.0); });
  run.cluster().sim().run_until(1e5);
  EXPECT_TRUE(run.cluster().sim().failures().empty()) << run.cluster().sim().failures().front();
  uint64_t last_contributed = 0;
  for (const sim::SimObserver::Applied& a : run.observer().history())
    if (a.worker == "c" && a.contributed) last_contributed = a.round;
  EXPECT_GE(last_contributed, 190u) << "c was not let back in";
  const std::map<std::string, uint64_t> finals = run.observer().finals();
  ASSERT_EQ(finals.size(), 3u);
  EXPECT_EQ(finals.at("a"), finals.at("c"));
  EXPECT_TRUE(run.divergent_rounds().empty()) << run.divergent_rounds().front();
}

// A copy of an old round's genuine file placed under a member's name for a coming round: before,
// it took the name (write-once), the member's real upload was refused, and a worker hung. Now
// names are unpredictable and the agreement pins the exact file.
TEST(ProtocolFaults, ACopiedFileCannotSquatAMembersName) {
  ElasticRun run("squat", {"a", "b"});
  run.start(run.spec("a"));
  run.start(run.spec("b"));
  int copies = 0;
  // Every second, copy each of b's contributions into the next few rounds' folders, under the
  // same name and under the name b's file had in the old scheme.
  for (int t = 2; t < 20; ++t) {
    run.cluster().sim().at(t, [&] {
      for (uint64_t r = 1; r < 40; ++r) {
        const std::string dir = round_dir_name(r);
        for (const mirror::Arrival& file : run.cluster().folder().disk("a").list(dir)) {
          if (!file.name.starts_with("g-b-")) continue;
          const std::optional<std::string> bytes = run.cluster().folder().disk("a").read(dir + "/" + file.name);
          if (!bytes) continue;
          for (uint64_t ahead = r + 1; ahead <= r + 3; ++ahead) {
            run.cluster().folder().inject(round_dir_name(ahead) + "/" + file.name, *bytes);
            run.cluster().folder().inject(round_dir_name(ahead) + "/g-b-s0.gbx", *bytes);
            ++copies;
          }
        }
      }
    });
  }
  run.cluster().sim().run_until(1e5);
  EXPECT_TRUE(run.cluster().sim().failures().empty()) << run.cluster().sim().failures().front();
  EXPECT_GT(copies, 10);
  const std::map<std::string, uint64_t> finals = run.observer().finals();
  ASSERT_EQ(finals.size(), 2u);
  EXPECT_EQ(finals.at("a"), finals.at("b"));
  // b contributed to every round: no copy displaced it or cut its wait short.
  for (const sim::SimObserver::Applied& a : run.observer().history()) {
    if (a.worker == "b") {
      EXPECT_TRUE(a.contributed) << "round " << a.round;
    }
  }
  EXPECT_GT(run.cluster().stats("a")["rejected_files"].get<int>() + run.cluster().stats("b")["rejected_files"].get<int>(), 0);
}

// A stranger with write access and no key, in a signed run (Note [Signed files]): for each of
// b's contributions it sees, it writes into the next rounds' folders, under fresh b-names, what
// someone without the key can make: a forged file (b's header for that round, 1000x the tokens,
// valid framing and checksums, no tag), one tagged with another run's secret, b's genuine file
// with its round rewritten (a replay), and a plain copy. Unsigned, the forgeries carry the
// rounds (the bug); signed, every one is refused before it is read and the run ends exactly
// where the same run without the stranger does.
TEST(ProtocolFaults, FilesWithoutTheRunKeyAreNeverApplied) {
  const auto run_key = std::make_shared<const wire::FileMac>(wire::RunSecret::from_text("the members' run secret", "t"));
  const wire::FileMac other_key(wire::RunSecret::from_text("a secret of some other run", "t"));
  struct Outcome {
    std::map<std::string, uint64_t> finals;
    bool b_always_contributed = true;
    int attacks = 0;
    uint64_t refused = 0;
  };
  const auto play = [&](bool signed_run, bool attacked) {
    ElasticRun run(str("forge", signed_run, attacked), {"a", "b"});
    for (const char* w : {"a", "b"}) {
      sim::SimWorkerSpec s = run.spec(w);
      // Rounds wait for every member: which rounds a member misses must not hang on lags that
      // the stranger's extra files draw differently.
      s.exchange.contribution_timeout_s = s.exchange.deadline_floor_s = 30;
      s.exchange.failover_timeout_s = 60;
      if (signed_run) s.exchange.file_mac = run_key;
      run.start(s);
    }
    Outcome out;
    uint64_t token = 0;
    std::set<std::string> seen;
    for (int t = 1; attacked && t < 40; ++t) {
      run.cluster().sim().at(t, [&] {
        mirror::MemoryMirror& disk = run.cluster().folder().disk("a");
        for (uint64_t r = 1; r < 40; ++r) {
          const std::string dir = round_dir_name(r);
          for (const mirror::Arrival& file : disk.list(dir)) {
            if (!file.name.starts_with("g-b-") || !seen.insert(dir + "/" + file.name).second) continue;
            const std::optional<std::string> bytes = disk.read(dir + "/" + file.name);
            if (!bytes) continue;
            const wire::WireFile genuine = wire::parse(*bytes, file.name);
            const uint64_t ahead = r + 1;
            const auto name = [&] {  // the stranger's own files are not b's to copy
              const std::string rel = round_dir_name(ahead) + "/" + contribution_name("b", 0, str("f", ++token));
              seen.insert(rel);
              return rel;
            };
            wire::FileHeader forged = genuine.header;
            forged.mutable_gradient()->set_round(ahead);
            forged.mutable_gradient()->set_tokens(genuine.header.gradient().tokens() * 1000);
            run.cluster().folder().inject(name(), wire::frame(forged, genuine.payload));
            const std::string foreign_rel = name();
            run.cluster().folder().inject(foreign_rel, wire::frame(forged, genuine.payload, wire::FileKey{&other_key, foreign_rel}));
            wire::FileHeader replayed = genuine.header;
            replayed.mutable_gradient()->set_round(ahead);
            run.cluster().folder().inject(name(), wire::frame(replayed, genuine.payload));
            run.cluster().folder().inject(name(), *bytes);
            ++out.attacks;
          }
        }
      });
    }
    run.cluster().sim().run_until(1e5);
    EXPECT_TRUE(run.cluster().sim().failures().empty()) << run.cluster().sim().failures().front();
    out.finals = run.observer().finals();
    for (const sim::SimObserver::Applied& a : run.observer().history())
      if (a.worker == "b" && !a.contributed) out.b_always_contributed = false;
    for (const char* w : {"a", "b"})
      out.refused += run.cluster().stats(w)["unsigned_or_forged_files"].get<uint64_t>();
    return out;
  };
  const Outcome clean = play(true, false);
  ASSERT_EQ(clean.finals.size(), 2u);
  EXPECT_EQ(clean.finals.at("a"), clean.finals.at("b"));
  EXPECT_EQ(clean.refused, 0u);

  const Outcome attacked = play(true, true);
  EXPECT_GT(attacked.attacks, 10);
  EXPECT_GE(attacked.refused, static_cast<uint64_t>(attacked.attacks));  // each round's first forgeries, read once
  EXPECT_EQ(attacked.finals, clean.finals);  // identical replicas, identical to the run without the stranger
  EXPECT_TRUE(attacked.b_always_contributed);

  const Outcome unsigned_run = play(false, true);  // the fault reproduced: forgeries carry the rounds
  ASSERT_EQ(unsigned_run.finals.size(), 2u);
  EXPECT_NE(unsigned_run.finals.at("a"), clean.finals.at("a"));
}

// Three members a, b, c of a signed run, each holding its credential (c: `c_keys`), waiting for
// every member every round (which rounds a member misses must not hang on forged files' lags).
struct SignedMembers {
  wire::RunSecret secret = wire::RunSecret::from_text("the owner's run secret", "t");

  std::shared_ptr<const wire::FileMac> credential(const std::string& member) const {
    return std::make_shared<const wire::FileMac>(
        wire::RunSecret::from_text(wire::FileMac(secret).issue_credential(member), "credential-" + member));
  }
  void start(ElasticRun& run, const std::shared_ptr<const wire::FileMac>& c_keys) const {
    for (const char* w : {"a", "b", "c"}) {
      sim::SimWorkerSpec s = run.spec(w);
      s.exchange.contribution_timeout_s = s.exchange.deadline_floor_s = 30;
      s.exchange.failover_timeout_s = 60;
      s.exchange.file_mac = std::string(w) == "c" ? c_keys : credential(w);
      run.start(s);
    }
  }
};

bool always_contributed(ElasticRun& run, const std::string& worker) {
  for (const sim::SimObserver::Applied& a : run.observer().history())
    if (a.worker == worker && !a.contributed) return false;
  return true;
}

// Why each of a, b and c rejected files, the files' names cut off.
std::set<std::string> rejection_reasons(ElasticRun& run) {
  std::set<std::string> reasons;
  for (const char* w : {"a", "b", "c"}) {
    const nlohmann::json stats = run.cluster().stats(w);
    for (const auto& reason : stats["rejected"]) {
      const std::string text = reason.get<std::string>();
      reasons.insert(text.substr(text.find(": ") + 2));
    }
  }
  return reasons;
}

// A member who holds only its own credential (Note [Member signatures]) writes, beside its own
// honest files, gradients under a's name for the coming rounds: a's header with 1000x the
// tokens, the MAC right (its credential has the MAC's key), signed with its own key as that is
// all it has. Every replica refuses them before reading them, a always contributes, and the run
// ends where the same run without them does. Given the run secret instead (which can sign as
// anyone), the same member's forgeries carry the rounds: what the credential takes away.
TEST(ProtocolFaults, AMemberWithACredentialCannotWriteUnderAnothersName) {
  const SignedMembers members;
  struct Outcome {
    std::map<std::string, uint64_t> finals;
    bool a_always_contributed = true;
    int attacks = 0;
    uint64_t refused = 0;
    std::set<std::string> reasons;  // of every refusal, the file's name cut off
  };
  // attacker: "" (none), "credential" or "secret" (what c holds).
  const auto play = [&](const std::string& attacker) {
    ElasticRun run("member-forge-" + attacker, {"a", "b", "c"});
    const std::shared_ptr<const wire::FileMac> c_keys =
        attacker == "secret" ? std::make_shared<const wire::FileMac>(members.secret) : members.credential("c");
    members.start(run, c_keys);
    Outcome out;
    uint64_t token = 0;
    std::set<std::string> seen;
    for (int t = 1; !attacker.empty() && t < 40; ++t) {
      run.cluster().sim().at(t, [&] {
        mirror::MemoryMirror& disk = run.cluster().folder().disk("c");
        for (uint64_t r = 1; r < 40; ++r) {
          const std::string dir = round_dir_name(r);
          for (const mirror::Arrival& file : disk.list(dir)) {
            if (!file.name.starts_with("g-a-") || !seen.insert(dir + "/" + file.name).second) continue;
            const std::optional<std::string> bytes = disk.read(dir + "/" + file.name);
            if (!bytes) continue;
            const wire::WireFile genuine = wire::parse(*bytes, file.name);
            wire::FileHeader forged = genuine.header;
            forged.mutable_gradient()->set_round(r + 1);
            forged.mutable_gradient()->set_tokens(genuine.header.gradient().tokens() * 1000);
            const std::string rel = round_dir_name(r + 1) + "/" + contribution_name("a", 0, str("f", ++token));
            seen.insert(rel);
            // A credential can sign only as c; the run secret signs as a.
            const std::string as = c_keys->member().empty() ? "a" : "c";
            run.cluster().folder().inject(rel, wire::signed_as(*c_keys, as, forged, genuine.payload, rel));
            ++out.attacks;
          }
        }
      });
    }
    run.cluster().sim().run_until(1e5);
    EXPECT_TRUE(run.cluster().sim().failures().empty()) << run.cluster().sim().failures().front();
    out.finals = run.observer().finals();
    out.a_always_contributed = always_contributed(run, "a");
    for (const char* w : {"a", "b", "c"}) out.refused += run.cluster().stats(w)["unsigned_or_forged_files"].get<uint64_t>();
    out.reasons = rejection_reasons(run);
    return out;
  };
  const Outcome clean = play("");
  ASSERT_EQ(clean.finals.size(), 3u);
  EXPECT_EQ(clean.finals.at("a"), clean.finals.at("b"));
  EXPECT_EQ(clean.finals.at("a"), clean.finals.at("c"));
  EXPECT_EQ(clean.refused, 0u);

  const Outcome with_credential = play("credential");
  EXPECT_GT(with_credential.attacks, 10);
  // Forgeries for a round that closed before they arrived are never read: not every one is refused.
  EXPECT_GT(with_credential.refused, 0u);
  EXPECT_EQ(with_credential.reasons,
            std::set<std::string>{"signed by member c but its header says a wrote it: a member writing under another's name"});
  EXPECT_EQ(with_credential.finals, clean.finals);  // identical replicas, identical to the run without the forgeries
  EXPECT_TRUE(with_credential.a_always_contributed);

  const Outcome with_secret = play("secret");  // the same forgeries signed as a: they carry rounds
  ASSERT_EQ(with_secret.finals.size(), 3u);
  EXPECT_NE(with_secret.finals.at("a"), clean.finals.at("a"));
}

// A member holding only its own credential publishes run configs under a's name with settings a
// never chose (--shards 3 where the run has 1): one with a's name in its header (signed as c,
// so the signature says otherwise) and one honest about its writer but filed as a's. A peer
// config that differs gets its writer's files left out, so these made every replica drop a
// from every round after them (a, the member, paid for c's file). Now each is refused as a
// file, a contributes to every round and the run ends where the same run without them does.
TEST(ProtocolFaults, AMemberCannotPublishARunConfigUnderAnothersName) {
  const SignedMembers members;
  struct Outcome {
    std::map<std::string, uint64_t> finals;
    bool a_always_contributed = true;
    int forgeries = 0;
    std::set<std::string> reasons;  // of every refusal, the file's name cut off
  };
  const auto play = [&](bool attacked) {
    ElasticRun run(str("config-forge", attacked), {"a", "b", "c"});
    const std::shared_ptr<const wire::FileMac> c_keys = members.credential("c");
    members.start(run, c_keys);
    Outcome out;
    run.cluster().sim().at(5, [&] {
      mirror::MemoryMirror& disk = run.cluster().folder().disk("c");
      for (const mirror::Arrival& file : disk.list(kRunConfigDir)) {  // a's and b's, as c sees them
        if (!file.name.starts_with("config-a-") || !attacked) continue;
        const wire::WireFile genuine = wire::parse(*disk.read(str(kRunConfigDir, "/", file.name)), file.name);
        for (const char* header_worker : {"a", "c"}) {
          wire::FileHeader forged = genuine.header;
          forged.mutable_run_config()->set_shard_count(3);
          forged.mutable_run_config()->set_worker(header_worker);
          const std::string rel = run_config_name("a", str("forged", header_worker));
          run.cluster().folder().inject(rel, wire::signed_as(*c_keys, "c", forged, genuine.payload, rel));
          ++out.forgeries;
        }
      }
    });
    run.cluster().sim().run_until(1e5);
    EXPECT_TRUE(run.cluster().sim().failures().empty()) << run.cluster().sim().failures().front();
    out.finals = run.observer().finals();
    out.a_always_contributed = always_contributed(run, "a");
    out.reasons = rejection_reasons(run);
    return out;
  };
  const Outcome clean = play(false);
  ASSERT_EQ(clean.finals.size(), 3u);
  EXPECT_EQ(clean.finals.at("a"), clean.finals.at("b"));
  EXPECT_TRUE(clean.a_always_contributed);

  const Outcome attacked = play(true);
  EXPECT_EQ(attacked.forgeries, 2);
  EXPECT_EQ(attacked.reasons, (std::set<std::string>{
                                  "signed by member c but its header says a wrote it: a member writing under another's name",
                                  "a run config of worker 'c' under a's name"}));
  EXPECT_TRUE(attacked.a_always_contributed);
  EXPECT_EQ(attacked.finals, clean.finals);
}

// A member with the secret sends NaN (rounds 4-6) or a gradient a million times too large
// (rounds 10-12), without flagging an overflow (Note [Checked contributions]). Every shard's
// owner leaves it out in its agreement, every replica applies the same contributors and counts
// the refusals, and the member is back in the average once it sends sane values. With norms not compared (--max-norm-ratio 0) the 1e6x gradient is averaged in.
void expect_bad_contributions_left_out(ExchangePattern pattern) {
  const auto poisoned = [](uint64_t round) { return (round >= 4 && round <= 6) || (round >= 10 && round <= 12); };
  const auto play = [&](double max_norm_ratio) {
    ElasticRun run(str("poison", static_cast<int>(pattern), max_norm_ratio > 0), {"a", "b", "c"});
    for (const char* w : {"a", "b", "c"}) {
      sim::SimWorkerSpec s = run.spec(w, 16);
      s.exchange.pattern = pattern;
      s.exchange.shard_count = pattern == ExchangePattern::sharded ? 3 : 1;
      s.exchange.contribution_timeout_s = s.exchange.deadline_floor_s = 30;  // every member, every round
      s.exchange.failover_timeout_s = 60;
      s.exchange.max_norm_ratio = max_norm_ratio;
      if (std::string(w) == "c")
        s.corrupt_contribution = [](uint64_t round, std::vector<float>& sent) {
          if (round >= 4 && round <= 6) sent[3] = std::numeric_limits<float>::quiet_NaN();
          if (round >= 10 && round <= 12)
            for (float& v : sent) v *= 1e6f;
        };
      run.start(s);
    }
    run.cluster().sim().run_until(1e5);
    EXPECT_TRUE(run.cluster().sim().failures().empty()) << run.cluster().sim().failures().front();
    const std::map<std::string, uint64_t> finals = run.observer().finals();
    EXPECT_EQ(finals.size(), 3u);
    EXPECT_TRUE(run.divergent_rounds().empty());
    std::map<uint64_t, std::set<std::string>> averaged;
    for (const auto& [round, contributions] : run.observer().contributions())
      for (const AgreedContribution& x : contributions) averaged[round].insert(x.worker);
    std::map<std::string, uint64_t> refused;
    for (const char* w : {"a", "b", "c"}) refused[w] = run.cluster().stats(w)["contributions_refused"].get<uint64_t>();
    return std::make_tuple(averaged, refused, finals);
  };
  const auto [averaged, refused, finals] = play(10);
  ASSERT_EQ(averaged.size(), 16u);
  // Left out like a member that missed its deadline: out of the round, then out of the view
  // until it says it is ready again; never in a poisoned round's average, back once it is sane.
  for (const auto& [round, workers] : averaged) {
    if (poisoned(round)) {
      EXPECT_EQ(workers.count("c"), 0u) << "round " << round;
    }
    if (round >= 14) {
      EXPECT_EQ(workers.count("c"), 1u) << "round " << round;
    }
  }
  // Each shard's owner judges its slice: the NaN lies in shard 0 only, the 1e6x in every shard.
  const uint64_t shards = pattern == ExchangePattern::sharded ? 3 : 1;
  EXPECT_GE(refused.at("a"), 1 + shards);  // the first round of each spell at least
  EXPECT_EQ(refused.at("b"), refused.at("a"));  // every replica applied the same refusals
  EXPECT_EQ(refused.at("c"), refused.at("a"));

  const auto [averaged_unchecked, refused_unchecked, finals_unchecked] = play(0);
  for (uint64_t round = 10; round <= 12; ++round) EXPECT_EQ(averaged_unchecked.at(round).count("c"), 1u) << round;
  for (uint64_t round = 4; round <= 6; ++round) EXPECT_EQ(averaged_unchecked.at(round).count("c"), 0u) << round;
  EXPECT_NE(finals_unchecked.at("a"), finals.at("a"));
}

TEST(ProtocolFaults, ANaNOrHugeContributionIsLeftOutByTheAgreementAllGather) {
  expect_bad_contributions_left_out(ExchangePattern::all_gather);
}

TEST(ProtocolFaults, ANaNOrHugeContributionIsLeftOutByTheAgreementSharded) {
  expect_bad_contributions_left_out(ExchangePattern::sharded);
}

// A worker rejects damaged files, is killed and restarts in the same local folder: the new life
// rewrote stats.json from zero, so what the first life rejected was gone (a test reading
// "rejected_files: 0" after a restart was told nothing happened). all_lives keeps every life's
// counts (Note [Counters across lives]); the kill can still take what the first life had not
// written yet, hence >=.
TEST(ProtocolFaults, ARestartedWorkersCountersKeepItsEarlierLivesRejections) {
  ElasticRun run("lives", {"a", "b"});
  const sim::SimWorkerSpec a_spec = run.spec("a", 60);
  const auto a = run.start(a_spec);
  run.start(run.spec("b", 60));
  run.cluster().sim().at(1.0, [&] {
    for (uint64_t r = 1; r <= 60; ++r)
      run.cluster().folder().inject(round_dir_name(r) + "/" + contribution_name("b", 0, "damaged"), "not a gradbox file");
  });
  uint64_t first_life = 0;
  run.cluster().sim().at(6.0, [&] {
    first_life = run.cluster().stats("a")["rejected_files"].get<uint64_t>();
    run.cluster().sim().kill(a);
  });
  run.cluster().sim().at(7.0, [&] {
    sim::SimWorkerSpec again = a_spec;
    again.exchange.incarnation_seed = 77;  // another process's life
    run.cluster().sim().spawn("a-restarted", [&, again](mirror::Clock& clock) {
      sim::run_sim_worker(again, run.cluster().folder().disk("a"), clock, run.observer());
    });
  });
  run.cluster().sim().run_until(2000.0);
  EXPECT_TRUE(run.cluster().sim().failures().empty()) << run.cluster().sim().failures().front();
  const nlohmann::json last = run.cluster().stats("a");
  EXPECT_GT(first_life, 0u) << "the first life rejected nothing: the scenario did not happen";
  ASSERT_TRUE(last.contains("all_lives")) << last.dump();
  EXPECT_EQ(last["all_lives"]["lives"], 2) << last.dump();
  EXPECT_GE(last["all_lives"]["rejected_files"].get<uint64_t>(), first_life + last["rejected_files"].get<uint64_t>())
      << last.dump();
  EXPECT_GE(last["all_lives"]["rejected"].size(), first_life) << last.dump();
}

// A worker whose clock ran 10 minutes ahead, then died: its heartbeats looked fresh for those
// 10 minutes, so an all-dead resume waited for it. Now ages count from arrival: a newcomer
// resumes the run --stale-after after the last heartbeat arrived.
TEST(ProtocolFaults, AHeartbeatFromTheFutureGoesStaleOnTime) {
  ElasticRun run("skew", {"a", "b"});
  const auto a = run.start(run.spec("a", 1000));
  const auto b = run.start(run.spec("b", 1000));
  run.cluster().sim().set_clock_skew(a, 600'000);
  run.cluster().sim().at(10.0, [&] {
    run.cluster().sim().kill(a);
    run.cluster().sim().kill(b);
  });
  run.cluster().sim().at(12.0, [&] { run.start(run.spec("z", 1000)); });  // not in the last view
  run.cluster().sim().run_until(200.0);
  EXPECT_TRUE(run.cluster().sim().failures().empty()) << run.cluster().sim().failures().front();
  EXPECT_EQ(run.cluster().stats("z")["self_elections"].get<int>(), 1);
  EXPECT_GT(run.observer().max_round(), 100u) << "z waited for the skewed, dead a";
}

// One file planted in a round folder far ahead of the run, then a member dies: before, every
// survivor took the folder for the run's progress ("the run has moved on to round 40 without this
// worker"), reloaded the agreed state, landed on the round it left, and reloaded again forever
// (never past round 13). A lone round folder is not the run's progress now (Note [Progress is a
// run of rounds]): the survivors leave the dead member out and finish without a reload.
TEST(ProtocolFaults, APlantedRoundFarAheadDoesNotMakeTheRunReloadForever) {
  ElasticRun run("planted", {"a", "b", "c"});
  run.start(run.spec("a", 30));
  run.start(run.spec("b", 30));
  const auto c = run.start(run.spec("c", 30));
  run.cluster().sim().at(3.0, [&] { run.cluster().folder().inject(round_dir_name(40) + "/c-s0-e0-a-1.gbx", "planted"); });
  run.cluster().sim().at(8.0, [&] { run.cluster().sim().kill(c); });
  run.cluster().sim().run_until(2000.0);
  EXPECT_TRUE(run.cluster().sim().failures().empty()) << run.cluster().sim().failures().front();
  const std::map<std::string, uint64_t> finals = run.observer().finals();
  ASSERT_EQ(finals.count("a") + finals.count("b"), 2u) << "the survivors did not finish; max round "
                                                       << run.observer().max_round();
  EXPECT_EQ(finals.at("a"), finals.at("b"));
  const auto resyncs = run.observer().resyncs();
  for (const char* w : {"a", "b"}) EXPECT_FALSE(resyncs.count(w)) << w << " reloaded for a planted folder";
  EXPECT_TRUE(run.divergent_rounds().empty()) << run.divergent_rounds().front();
}

}  // namespace
}  // namespace gradbox::exchange

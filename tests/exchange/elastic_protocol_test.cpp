// Elastic runs in virtual time: simulated workers running the real protocol on the whole worker
// loop of the simulator (sim/sim_worker.h): join, rounds, checkpoints, repair, leave. First the
// elastic behaviours (joins, adaptive deadlines, repair), then faults the protocol once did not
// survive, each reproduced.
// One file on purpose: every test here drives the same ElasticRun harness below, and the
// protocol faults reproduced at the end share it; split, each half would copy the harness.
#include <gtest/gtest.h>

#include <iostream>
#include <limits>
#include <tuple>
#include <set>

#include "common/error.h"
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

// A worker that joins a running run loads the newest folder checkpoint, follows the rounds after
// it, says "ready" and is let in; nobody waits for it on the way.
TEST(ElasticProtocol, AJoinerCatchesUpAndIsLetIn) {
  ElasticRun run("join", {"a", "b"});
  run.start(run.spec("a", 80));
  run.start(run.spec("b", 80));
  run.cluster().sim().at(10.0, [&] { run.start(run.spec("c", 80)); });
  run.cluster().sim().run_until(1e5);
  EXPECT_TRUE(run.cluster().sim().failures().empty()) << run.cluster().sim().failures().front();
  uint64_t first_applied = 0, first_contributed = 0;
  for (const sim::SimObserver::Applied& a : run.observer().history()) {
    if (a.worker != "c") continue;
    if (first_applied == 0) first_applied = a.round;
    if (a.contributed && first_contributed == 0) first_contributed = a.round;
  }
  EXPECT_GT(first_applied, 5u) << "c started from a folder checkpoint, not from round 1";
  EXPECT_GT(first_contributed, first_applied) << "c followed before it contributed";
  EXPECT_LT(first_contributed, 60u) << "c was let in";
  EXPECT_GE(run.cluster().stats("a")["members_added"].get<int>() + run.cluster().stats("b")["members_added"].get<int>(), 1);
  const std::map<std::string, uint64_t> finals = run.observer().finals();
  ASSERT_EQ(finals.size(), 3u);
  EXPECT_EQ(finals.at("a"), finals.at("c"));
  EXPECT_EQ(finals.at("b"), finals.at("c"));
  EXPECT_TRUE(run.divergent_rounds().empty()) << run.divergent_rounds().front();
}

// DiLoCo rounds far longer than the protocol's timeouts (20 inner steps of 1 s against a
// heartbeat staleness of 6 s and a give-up of 10 s): members stay live through the inner
// phase (heartbeats between rounds), and a joiner waits out the round in progress instead of
// giving up, then is let in; everyone ends on the same state, outer momentum included.
TEST(ElasticProtocol, LongDiLoCoRoundsKeepMembersLiveAndLetAJoinerWaitThemOut) {
  ElasticRun run("diloco_long", {"a", "b"});
  auto spec = [&](const std::string& name) {
    sim::SimWorkerSpec s = run.spec(name, 8);
    s.inner_steps = 20;
    s.compute_s = 1.0;
    s.checkpoint_interval = 2;
    s.exchange.give_up_timeout_s = 10;
    return s;
  };
  run.start(spec("a"));
  run.start(spec("b"));
  // In round 3's inner phase: without heartbeats between rounds c takes a and b for dead and forks.
  run.cluster().sim().at(50.0, [&] { run.start(spec("c")); });
  run.cluster().sim().run_until(1e5);
  EXPECT_TRUE(run.cluster().sim().failures().empty()) << run.cluster().sim().failures().front();
  EXPECT_EQ(run.cluster().stats("a")["members_dropped"], 0) << run.cluster().stats("a").dump();
  EXPECT_EQ(run.cluster().stats("b")["members_dropped"], 0) << run.cluster().stats("b").dump();
  // Heartbeats came between rounds: the joiner never took the members for dead.
  EXPECT_EQ(run.cluster().stats("c")["self_elections"], 0) << run.cluster().stats("c").dump();
  bool c_contributed = false;
  for (const sim::SimObserver::Applied& a : run.observer().history()) c_contributed |= a.worker == "c" && a.contributed;
  EXPECT_TRUE(c_contributed) << "c was let in";
  const std::map<std::string, uint64_t> finals = run.observer().finals();
  ASSERT_EQ(finals.size(), 3u);
  EXPECT_EQ(finals.at("a"), finals.at("c"));
  EXPECT_EQ(finals.at("b"), finals.at("c"));
  EXPECT_TRUE(run.divergent_rounds().empty()) << run.divergent_rounds().front();
}

// Time-boxed DiLoCo rounds (Note [Time-boxed rounds] in worker/outer_optimizer.h): c computes
// at a third of a and b's speed. With a 30 s box it takes a third of their inner steps and
// publishes when they do: every round holds all three, and a and b wait on c about as long as
// on each other. Without the box c's rounds take three times theirs, and the others either
// wait out the difference or (the deadline being shorter) leave c out every round.
struct SlowWorkerRun {
  std::vector<sim::SimObserver::Applied> of(const std::string& worker) const {
    std::vector<sim::SimObserver::Applied> rounds;
    for (const sim::SimObserver::Applied& a : history)
      if (a.worker == worker) rounds.push_back(a);
    return rounds;
  }
  std::vector<sim::SimObserver::Applied> history;
  std::map<std::string, uint64_t> finals;
};

SlowWorkerRun run_with_a_slow_worker(const std::string& name, double round_seconds) {
  ElasticRun run(name, {"a", "b", "c"});
  for (const std::string w : {"a", "b", "c"}) {
    sim::SimWorkerSpec s = run.spec(w, 8);
    s.inner_steps = 30;
    s.compute_s = w == "c" ? 2.9 : 1.0;
    s.round_seconds = round_seconds;
    s.exchange.contribution_timeout_s = 10;
    // Boxes close on a step's boundary: members' contributions differ by up to a step (1 s),
    // which a deadline adapted to the folder's lags alone (0.5 s) would not cover.
    s.exchange.deadline_floor_s = 2;
    s.exchange.failover_timeout_s = 20;
    s.exchange.give_up_timeout_s = 300;
    run.start(s);
  }
  run.cluster().sim().run_until(1e5);
  EXPECT_TRUE(run.cluster().sim().failures().empty()) << run.cluster().sim().failures().front();
  EXPECT_TRUE(run.divergent_rounds().empty()) << run.divergent_rounds().front();
  return {run.observer().history(), run.observer().finals()};
}

TEST(ElasticProtocol, ATimeBoxedRoundDoesNotWaitForASlowWorker) {
  const SlowWorkerRun boxed = run_with_a_slow_worker("boxed", 30.0);
  ASSERT_EQ(boxed.finals.size(), 3u);
  EXPECT_EQ(boxed.finals.at("a"), boxed.finals.at("c"));
  ASSERT_EQ(boxed.of("a").size(), 8u);
  for (const sim::SimObserver::Applied& a : boxed.of("a")) {
    EXPECT_EQ(a.contributors, 3) << "round " << a.round;
    if (a.round == 1) continue;  // the boxes of round 1 open as each worker gets the initial weights
    EXPECT_EQ(a.inner_steps, 30) << "round " << a.round;
    // c's last step ended at 29 s into the box: a waits for the folder's hops only.
    EXPECT_LT(a.wait_s, 1.0) << "round " << a.round;
  }
  for (const sim::SimObserver::Applied& c : boxed.of("c")) {
    EXPECT_TRUE(c.contributed) << "round " << c.round;
    EXPECT_EQ(c.inner_steps, 10) << "round " << c.round << ": as many 2.9 s steps as fit in 30 s";
  }

  // c's 87 s rounds against 30 s ones: past the deadline, every round goes on without c's work.
  const SlowWorkerRun unboxed = run_with_a_slow_worker("unboxed", 0.0);
  int with_c = 0;
  for (const sim::SimObserver::Applied& a : unboxed.of("a")) with_c += a.contributors == 3;
  EXPECT_LT(with_c, 4) << "of 8 rounds held c's delta";
}

// Note [Late entry]: a worker joining during a time-boxed round's inner phase loads the folder
// checkpoint of the round before, computes the inner steps left in the round's box and is in
// its average; nobody waits for it. Without late entry it idles through the round and first
// contributes to the next one.
struct LateJoinRun {
  uint64_t first_round_of_three = 0;  // the first round whose average held a, b and c (as a saw it)
  int c_steps_then = 0;               // c's inner steps in it
  double a_wait_then = 0;             // a's wait in it
};

LateJoinRun run_with_a_late_joiner(const std::string& name, bool late_entry) {
  ElasticRun run(name, {"a", "b"});
  auto spec = [&](const std::string& worker) {
    sim::SimWorkerSpec s = run.spec(worker, 8);
    s.inner_steps = 20;
    s.compute_s = 1.0;
    s.round_seconds = 20;
    s.checkpoint_interval = 1;
    s.exchange.contribution_timeout_s = 10;
    s.exchange.failover_timeout_s = 20;
    s.exchange.stale_after_s = 40;
    s.exchange.give_up_timeout_s = 300;
    s.exchange.late_entry = late_entry;
    return s;
  };
  run.start(spec("a"));
  run.start(spec("b"));
  // Rounds take ~21 s: at 50 s round 3 is half done.
  run.cluster().sim().at(50.0, [&] { run.start(spec("c")); });
  run.cluster().sim().run_until(1e5);
  EXPECT_TRUE(run.cluster().sim().failures().empty()) << run.cluster().sim().failures().front();
  EXPECT_TRUE(run.divergent_rounds().empty()) << run.divergent_rounds().front();
  const std::map<std::string, uint64_t> finals = run.observer().finals();
  EXPECT_EQ(finals.size(), 3u);
  if (finals.size() == 3) {
    EXPECT_EQ(finals.at("a"), finals.at("c"));
  }
  LateJoinRun out;
  for (const sim::SimObserver::Applied& a : run.observer().history())
    if (a.worker == "a" && a.contributors == 3 && out.first_round_of_three == 0) {
      out.first_round_of_three = a.round;
      out.a_wait_then = a.wait_s;
    }
  for (const sim::SimObserver::Applied& c : run.observer().history())
    if (c.worker == "c" && c.round == out.first_round_of_three) out.c_steps_then = c.inner_steps;
  return out;
}

TEST(ElasticProtocol, AJoinerEntersTheTimeBoxedRoundInProgress) {
  const LateJoinRun late = run_with_a_late_joiner("late_entry", true);
  std::cout << "late entry: first round of three " << late.first_round_of_three << ", c's steps in it "
            << late.c_steps_then << ", a waited " << late.a_wait_then << " s\n";
  EXPECT_EQ(late.first_round_of_three, 3u) << "c's steps were in the round it joined";
  EXPECT_GT(late.c_steps_then, 0);
  EXPECT_LT(late.c_steps_then, 18) << "c had what was left of round 3's box, not a box of its own";
  EXPECT_LT(late.a_wait_then, 2.0) << "a waited for c";
  const LateJoinRun next = run_with_a_late_joiner("next_round", false);
  std::cout << "without: first round of three " << next.first_round_of_three << "\n";
  EXPECT_GT(next.first_round_of_three, 3u) << "without late entry c waits for the next view";
}

// Note [Partial deltas]: c dies without warning in the middle of round 3's box. With partials
// every 2 inner steps, the owner of round 3 asks for c's, waits a deadline for them and pins the
// newest in c's place: round 3's average holds c's steps up to its last partial, a and b apply
// identical bytes, and c is out of round 4's view. Without partials round 3 goes on without c.
struct DyingMemberRun {
  std::vector<AgreedContribution> round3;  // as a applied it
  std::vector<AgreedContribution> round4;
  int c_steps_in_round3 = 0;                // the steps c computed before it died
  uint64_t salvaged = 0;                    // partials pinned, by every owner
  uint64_t tokens_per_step = 0;
};

DyingMemberRun run_with_a_member_dying_mid_box(const std::string& name, int partial_every) {
  ElasticRun run(name, {"a", "b", "c"});
  std::map<std::string, mirror::Simulation::ProcessId> ids;
  sim::SimWorkerSpec last;
  for (const std::string w : {"a", "b", "c"}) {
    sim::SimWorkerSpec s = run.spec(w, 6);
    s.inner_steps = 30;
    s.compute_s = 1.0;
    s.round_seconds = 20;
    s.overlap_steps = 10;
    s.partial_every = partial_every;
    s.checkpoint_interval = 2;
    s.exchange.late_entry = true;
    s.exchange.boxes_from_agreement = true;
    s.exchange.round_seconds = 20;
    s.exchange.partial_deltas = partial_every > 0;
    s.exchange.contribution_timeout_s = 5;
    s.exchange.failover_timeout_s = 30;
    s.exchange.stale_after_s = 60;
    s.exchange.give_up_timeout_s = 300;
    ids[w] = run.start(s);
    last = s;
  }
  // Boxes of 20 s from about 3 s (the initial weights): round 3's is open from ~43 s.
  run.cluster().sim().at(54.5, [&] { run.cluster().sim().kill(ids["c"]); });
  run.cluster().sim().run_until(1e5);
  EXPECT_TRUE(run.cluster().sim().failures().empty()) << run.cluster().sim().failures().front();
  EXPECT_TRUE(run.divergent_rounds().empty()) << run.divergent_rounds().front();
  const std::map<std::string, uint64_t> finals = run.observer().finals();
  EXPECT_EQ(finals.size(), 2u);
  if (finals.size() == 2) {
    EXPECT_EQ(finals.at("a"), finals.at("b"));
  }
  DyingMemberRun out;
  out.tokens_per_step = last.tokens_per_round;
  const auto& contributions = run.observer().contributions();
  if (contributions.count(3)) out.round3 = contributions.at(3);
  if (contributions.count(4)) out.round4 = contributions.at(4);
  for (const sim::SimObserver::Step& step : run.observer().steps()) out.c_steps_in_round3 += step.worker == "c" && step.round == 3;
  for (const std::string w : {"a", "b"}) out.salvaged += run.cluster().stats(w)["partials_salvaged"].get<uint64_t>();
  return out;
}

const AgreedContribution* contribution_of(const std::vector<AgreedContribution>& round, const std::string& worker) {
  for (const AgreedContribution& c : round)
    if (c.worker == worker) return &c;
  return nullptr;
}

TEST(ElasticProtocol, AMemberDyingMidBoxStillContributesItsPartialDelta) {
  const DyingMemberRun with = run_with_a_member_dying_mid_box("partial_deltas", 2);
  std::cout << "c computed " << with.c_steps_in_round3 << " steps of round 3 before it died\n";
  ASSERT_GE(with.c_steps_in_round3, 4) << "the kill must come mid-box, after a partial";
  const AgreedContribution* c = contribution_of(with.round3, "c");
  ASSERT_NE(c, nullptr) << "round 3's average has no part of c";
  EXPECT_TRUE(c->partial);
  const uint64_t steps = c->tokens / with.tokens_per_step;
  EXPECT_EQ(c->tokens % with.tokens_per_step, 0u);
  // Its newest partial: the last even step count it reached (one still uploading may miss).
  EXPECT_LE(steps, static_cast<uint64_t>(with.c_steps_in_round3));
  EXPECT_GE(steps + 2, static_cast<uint64_t>(with.c_steps_in_round3 / 2 * 2));
  EXPECT_EQ(steps % 2, 0u);
  ASSERT_NE(contribution_of(with.round3, "a"), nullptr);
  EXPECT_FALSE(contribution_of(with.round3, "a")->partial);
  EXPECT_EQ(with.salvaged, 1u) << "one owner pinned one partial";
  EXPECT_EQ(contribution_of(with.round4, "c"), nullptr) << "c is out of the next view";
  EXPECT_EQ(with.round4.size(), 2u);

  const DyingMemberRun without = run_with_a_member_dying_mid_box("no_partial_deltas", 0);
  EXPECT_EQ(contribution_of(without.round3, "c"), nullptr);
  EXPECT_EQ(without.round3.size(), 2u);
  EXPECT_EQ(without.salvaged, 0u);
}

// The contribution deadline follows the lags it observes: from the ceiling down to what the
// folder needs, so that a dead worker costs the others little.
TEST(ElasticProtocol, TheDeadlineAdaptsToTheObservedLags) {
  ElasticRun run("deadline", {"a", "b", "c"});
  std::map<std::string, mirror::Simulation::ProcessId> ids;
  for (const std::string w : {"a", "b", "c"}) {
    sim::SimWorkerSpec s = run.spec(w, 60);
    s.exchange.contribution_timeout_s = 20;  // the ceiling, held until 8 lags are seen
    s.exchange.failover_timeout_s = 30;
    s.exchange.stale_after_s = 40;
    ids[w] = run.start(s);
  }
  run.cluster().sim().at(20.0, [&] { run.cluster().sim().kill(ids["c"]); });
  run.cluster().sim().run_until(1e5);
  EXPECT_TRUE(run.cluster().sim().failures().empty()) << run.cluster().sim().failures().front();
  const double deadline = run.cluster().stats("a")["contribution_deadline_s"].get<double>();
  EXPECT_LT(deadline, 5.0) << "the deadline stayed near its 20 s ceiling";
  EXPECT_GE(deadline, 0.5);  // the floor
  // c died at 20 s; a and b then finished the run, having waited far less than the ceiling.
  EXPECT_EQ(run.observer().finals().size(), 2u);
  EXPECT_LT(run.observer().last_finish_s(), 20.0 + 60 * 1.0);
}

// A replica that silently diverges is found by the fingerprints and reloads the agreed state.
TEST(ElasticProtocol, ADivergedReplicaIsRepaired) {
  ElasticRun run("repair", {"a", "b", "c"});
  run.start(run.spec("a", 40));
  run.start(run.spec("b", 40));
  sim::SimWorkerSpec c = run.spec("c", 40);
  c.perturb_after_round = 12;
  run.start(c);
  run.cluster().sim().run_until(1e5);
  EXPECT_TRUE(run.cluster().sim().failures().empty()) << run.cluster().sim().failures().front();
  const auto resyncs = run.observer().resyncs();
  ASSERT_TRUE(resyncs.count("c"));
  EXPECT_LE(resyncs.at("c").front(), 12u + 2 * 2 + 2) << "found within a fingerprint interval or two";
  EXPECT_FALSE(resyncs.count("a"));
  EXPECT_FALSE(resyncs.count("b"));
  const std::map<std::string, uint64_t> finals = run.observer().finals();
  ASSERT_EQ(finals.size(), 3u);
  EXPECT_EQ(finals.at("a"), finals.at("c"));
  EXPECT_EQ(finals.at("b"), finals.at("c"));
}

// Every worker dies in the middle of a round; one restarts alone. Its round's early owners'
// windows closed long ago (they count from when the round began), and the owner after it in
// line is dead: owners take turns again, so it agrees the round itself and carries on.
TEST(ElasticProtocol, AllDieAndOneRestartedMemberResumesTheRun) {
  ElasticRun run("all_die", {"a", "b"});
  const auto a = run.start(run.spec("a", 60));
  const auto b = run.start(run.spec("b", 60));
  run.cluster().sim().at(7.9, [&] {
    run.cluster().sim().kill(a);
    run.cluster().sim().kill(b);
  });
  run.cluster().sim().at(20.0, [&] {
    sim::SimWorkerSpec again = run.spec("b", 60);
    again.exchange.incarnation_seed = 77;
    run.cluster().sim().spawn("b-restarted", [&, again](mirror::Clock& clock) {
      sim::run_sim_worker(again, run.cluster().folder().disk("b"), clock, run.observer());
    });
  });
  run.cluster().sim().run_until(1e5);
  EXPECT_TRUE(run.cluster().sim().failures().empty()) << run.cluster().sim().failures().front();
  ASSERT_TRUE(run.observer().finals().count("b"));
  EXPECT_EQ(run.observer().max_round(), 60u);
  EXPECT_TRUE(run.divergent_rounds().empty()) << run.divergent_rounds().front();
}

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

// A member who holds only its own credential (Note [Member signatures]) writes, beside its own
// honest files, gradients under a's name for the coming rounds: a's header with 1000x the
// tokens, the MAC right (its credential has the MAC's key), signed with its own key as that is
// all it has. Every replica refuses them before reading them, a always contributes, and the run
// ends where the same run without them does. Given the run secret instead (which can sign as
// anyone), the same member's forgeries carry the rounds: what the credential takes away.
TEST(ProtocolFaults, AMemberWithACredentialCannotWriteUnderAnothersName) {
  const wire::RunSecret secret = wire::RunSecret::from_text("the owner's run secret", "t");
  const auto credential = [&](const std::string& member) {
    return std::make_shared<const wire::FileMac>(
        wire::RunSecret::from_text(wire::FileMac(secret).issue_credential(member), "credential-" + member));
  };
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
        attacker == "secret" ? std::make_shared<const wire::FileMac>(secret) : credential("c");
    for (const char* w : {"a", "b", "c"}) {
      sim::SimWorkerSpec s = run.spec(w);
      s.exchange.contribution_timeout_s = s.exchange.deadline_floor_s = 30;  // every member, every round
      s.exchange.failover_timeout_s = 60;
      s.exchange.file_mac = std::string(w) == "c" ? c_keys : credential(w);
      run.start(s);
    }
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
    for (const sim::SimObserver::Applied& a : run.observer().history())
      if (a.worker == "a" && !a.contributed) out.a_always_contributed = false;
    for (const char* w : {"a", "b", "c"}) {
      const nlohmann::json stats = run.cluster().stats(w);
      out.refused += stats["unsigned_or_forged_files"].get<uint64_t>();
      for (const auto& reason : stats["rejected"]) out.reasons.insert(reason.get<std::string>().substr(reason.get<std::string>().find(": ") + 2));
    }
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


// stats.json is rewritten at round ends no more often than stats_interval_s (the random
// schedules read it only at the end), and always when the worker leaves: by default (0) it
// follows every round.
TEST(ElasticProtocol, StatsFollowEveryRoundOrTheirIntervalAndAreWrittenAtTheEnd) {
  for (const double interval : {0.0, 1e6}) {
    SCOPED_TRACE(str("stats_interval_s ", interval));
    ElasticRun run(str("stats_", interval > 0 ? "sparse" : "every"), {"a", "b"});
    for (const std::string name : {"a", "b"}) {
      sim::SimWorkerSpec s = run.spec(name, 40);
      s.exchange.stats_interval_s = interval;
      run.start(s);
    }
    uint64_t applied_mid = 0, written_mid = 0;
    run.cluster().sim().at(5.0, [&] {
      for (const sim::SimObserver::Applied& a : run.observer().history())
        if (a.worker == "a") applied_mid = std::max(applied_mid, a.round);
      written_mid = run.cluster().stats("a")["round"].get<uint64_t>();
    });
    run.cluster().sim().run_until(1e5);
    EXPECT_TRUE(run.cluster().sim().failures().empty()) << run.cluster().sim().failures().front();
    ASSERT_GT(applied_mid, 5u);
    if (interval == 0) EXPECT_EQ(written_mid, applied_mid);
    else EXPECT_EQ(written_mid, 1u) << "written at the first round only, then not for 1e6 s";
    EXPECT_EQ(run.cluster().stats("a")["round"].get<uint64_t>(), 40u) << "written at the end";
  }
}

// Note [Slowing down before the upload cap]: two members whose uploads would come to more than
// their cap in a day double grad_accum through the agreement, both from the same round; the
// rounds then carry twice the tokens for the same bytes and the pace falls under the cap, so
// it happens once.
TEST(ElasticProtocol, AnUploadPaceNearTheCapDoublesGradAccumForEveryoneOnce) {
  auto run_two = [](ElasticRun& run, uint64_t cap, uint64_t rounds) {
    for (const std::string w : {"a", "b"}) {
      sim::SimWorkerSpec s = run.spec(w, rounds, /*slowness=*/25);  // 5-second rounds
      s.parameters = 20000;  // contributions, not heartbeats, are what a round uploads
      s.exchange.upload_cap_bytes = cap;
      s.exchange.stats_interval_s = 60;
      run.start(s);
    }
    run.cluster().sim().run_until(1e6);
    ASSERT_TRUE(run.cluster().sim().failures().empty()) << run.cluster().sim().failures().front();
  };
  // What a member uploads a day at this pace, with no cap in sight.
  ElasticRun measured("upload_pace", {"a", "b"});
  run_two(measured, uint64_t{1} << 60, 100);
  const double pace = measured.cluster().stats("a")["bytes_written"].get<double>() /
                      measured.observer().last_finish_s() * 86400;
  EXPECT_EQ(measured.cluster().stats("a")["upload_cap_slowdowns"], 0);

  ElasticRun run("upload_cap", {"a", "b"});
  run_two(run, static_cast<uint64_t>(pace / 1.4), 600);
  EXPECT_TRUE(run.divergent_rounds().empty());
  uint64_t doubled_from = 0;
  for (const auto& [round, contributions] : run.observer().contributions()) {
    for (const AgreedContribution& c : contributions) {
      if (doubled_from == 0 && c.tokens == 2000) doubled_from = round;
      EXPECT_EQ(c.tokens, doubled_from != 0 && round >= doubled_from ? 2000u : 1000u)
          << c.worker << " round " << round;  // both members, from the same round
    }
  }
  ASSERT_NE(doubled_from, 0u) << "grad_accum was never doubled";
  // Acted on as soon as the pace had 10 minutes behind it, and never again: the slower pace is
  // under the cap (the run goes on for 80 minutes of rounds after the change).
  double doubled_at = 0;
  for (const sim::SimObserver::Applied& a : run.observer().history())
    if (a.round == doubled_from) doubled_at = a.at_s;
  EXPECT_GT(doubled_at, ExchangeContext::kUploadPaceMinS);
  EXPECT_LT(doubled_at, ExchangeContext::kUploadPaceMinS + 120);
  EXPECT_GT(run.observer().last_finish_s(), doubled_at + ExchangeContext::kUploadPaceWindowS + 600);
  EXPECT_EQ(run.cluster().stats("a")["upload_cap_slowdowns"].get<int>() +
                run.cluster().stats("b")["upload_cap_slowdowns"].get<int>(),
            1);
  for (const std::string w : {"a", "b"}) EXPECT_EQ(run.cluster().stats(w)["control_changes"], 1) << w;
}

}  // namespace
}  // namespace gradbox::exchange

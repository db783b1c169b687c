// Elastic runs in virtual time: simulated workers running the real protocol on the whole worker
// loop of the simulator (sim/sim_worker.h): join, rounds, checkpoints, repair, leave. First the
// elastic behaviours (joins, adaptive deadlines, repair), then faults the protocol once did not
// survive, each reproduced.
// The faults the protocol once did not survive are in protocol_faults_test.cpp, on the same
// harness (elastic_run.h).
#include <gtest/gtest.h>

#include <iostream>
#include <limits>
#include <tuple>
#include <set>

#include "common/error.h"
#include "exchange/exchange_context.h"
#include "exchange/folder_names.h"
#include "sim/sim_worker.h"
#include "elastic_run.h"
#include "virtual_cluster.h"
#include "wire/envelope.h"
#include "wire/file_mac.h"
#include "../wire/forged_files.h"

namespace gradbox::exchange {
namespace {

namespace fs = std::filesystem;

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

// Note [Founders' own initial weights]: a new run's founding members start from their own
// initial weights when the first member's run config offers the same checksum, without waiting
// for its step-0 checkpoint to go up and come down; one whose weights differ (another torch
// build) fetches that checkpoint. Either way every replica holds the same state.
TEST(ElasticProtocol, FoundersStartFromTheirOwnInitialWeightsOnlyWhenTheyAreTheFirstMembers) {
  for (const bool b_differs : {false, true}) {
    SCOPED_TRACE(b_differs ? "b's initial weights differ" : "the same initial weights");
    ElasticRun run(b_differs ? "own_init_differs" : "own_init", {"a", "b", "c"});
    sim::SimWorkerSpec b = run.spec("b", 12);
    b.other_initial_weights = b_differs;
    run.start(run.spec("a", 12));
    run.start(b);
    run.start(run.spec("c", 12));
    run.cluster().sim().run_until(1e5);
    EXPECT_TRUE(run.cluster().sim().failures().empty()) << run.cluster().sim().failures().front();
    // A fetched checkpoint of round 0 is kept in the run folder; a worker that started from its
    // own weights has no checkpoint before its first (round 5).
    auto fetched_round_0 = [&](const std::string& worker) {
      std::error_code ec;
      for (fs::directory_iterator it(run.spec(worker).run_dir / "checkpoints", ec), end; !ec && it != end; it.increment(ec))
        if (it->path().filename().string().find("00000000") != std::string::npos) return true;
      return false;
    };
    EXPECT_EQ(fetched_round_0("b"), b_differs);
    EXPECT_FALSE(fetched_round_0("c"));
    const std::map<std::string, uint64_t> finals = run.observer().finals();
    ASSERT_EQ(finals.size(), 3u);
    EXPECT_EQ(finals.at("a"), finals.at("b"));
    EXPECT_EQ(finals.at("a"), finals.at("c"));
    EXPECT_TRUE(run.divergent_rounds().empty()) << run.divergent_rounds().front();
  }
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
    // As many 1 s steps as fit in the 30 s box: 29 where the folder's work at a round's start
    // (the first rounds' config checks and joins) took part of the box's first second.
    EXPECT_GE(a.inner_steps, 29) << "round " << a.round;
    EXPECT_LE(a.inner_steps, 30) << "round " << a.round;
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

// A joiner loads the newest folder checkpoint, replays the rounds after it and may enter the
// round in progress late; a round the folder already holds the agreement of is replayed, never
// entered: a step computed for it would be thrown away (in the projection every joiner once
// lost its first step so, 243 s of a T4 each). Joiners arrive at many points of a round here.
TEST(ElasticProtocol, AJoinerComputesNoStepForARoundAlreadyAgreed) {
  ElasticRun run("no_wasted_steps", {"a", "b"});
  auto spec = [&](const std::string& worker) {
    sim::SimWorkerSpec s = run.spec(worker, 14);
    s.inner_steps = 20;
    s.compute_s = 1.0;
    s.round_seconds = 20;
    s.overlap_steps = 19;
    s.partial_every = 1;
    s.checkpoint_interval = 3;
    s.exchange.boxes_from_agreement = true;
    s.exchange.round_seconds = 20;
    s.exchange.partial_deltas = true;
    s.exchange.contribution_timeout_s = 10;
    s.exchange.failover_timeout_s = 30;
    s.exchange.stale_after_s = 60;
    s.exchange.give_up_timeout_s = 600;
    s.exchange.late_entry = true;
    return s;
  };
  run.start(spec("a"));
  run.start(spec("b"));
  const std::vector<std::string> joiners = {"c", "d", "e", "f", "g", "h"};
  for (size_t i = 0; i < joiners.size(); ++i)
    run.cluster().sim().at(45.0 + 23.7 * static_cast<double>(i), [&, i] { run.start(spec(joiners[i])); });
  run.cluster().sim().run_until(1e5);
  EXPECT_TRUE(run.cluster().sim().failures().empty()) << run.cluster().sim().failures().front();
  EXPECT_TRUE(run.divergent_rounds().empty()) << run.divergent_rounds().front();
  std::map<uint64_t, double> agreed;  // round -> when the first replica applied it
  for (const sim::SimObserver::Applied& a : run.observer().history())
    if (!agreed.count(a.round) || a.at_s < agreed[a.round]) agreed[a.round] = a.at_s;
  int joiner_steps = 0;
  for (const sim::SimObserver::Step& step : run.observer().steps()) {
    if (std::find(joiners.begin(), joiners.end(), step.worker) == joiners.end()) continue;
    ++joiner_steps;
    // Begun after its round was applied somewhere, by more than the folder's few hops.
    EXPECT_LT(step.at_s - 1.0, agreed.at(step.round) + 2.0) << step.worker << " computed for round " << step.round
                                                           << ", applied at " << agreed.at(step.round) << " s";
  }
  EXPECT_GT(joiner_steps, 0);
  EXPECT_EQ(run.observer().finals().size(), 2 + joiners.size());
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

#include "mirror/virtual_clock.h"

#include <gtest/gtest.h>

#include "common/error.h"  // str

#include <cmath>
#include <limits>
#include <optional>
#include <random>
#include <stdexcept>

namespace gradbox::mirror {
namespace {

using Trace = std::vector<std::string>;

// Records "<virtual ms> <what>" lines.
struct Recorder {
  explicit Recorder(Simulation& s) : sim(s) {}
  Simulation& sim;
  Trace lines;
  void note(const std::string& what) { lines.push_back(str(std::llround(sim.now_s() * 1000), " ", what)); }
};

TEST(Simulation, RunsByTimeThenSpawnOrder) {
  Simulation sim;
  Recorder rec{sim};
  for (std::string name : {"a", "b", "c"}) {
    const double step = name == "a" ? 0.3 : name == "b" ? 0.2 : 0.3;
    sim.spawn(name, [&rec, name, step](Clock& clock) {
      for (int i = 0; i < 3; ++i) {
        rec.note(name);
        clock.sleep_s(step);
      }
    });
  }
  sim.run_until(10);
  EXPECT_EQ(rec.lines, (Trace{"0 a", "0 b", "0 c", "200 b", "300 a", "300 c", "400 b", "600 a", "600 c"}));
  EXPECT_EQ(sim.now_s(), 10);
  EXPECT_EQ(sim.processes_running(), 0u);
  EXPECT_TRUE(sim.failures().empty());
}

TEST(Simulation, ZeroSleepGoesAfterOthersDueThen) {
  Simulation sim;
  Recorder rec{sim};
  sim.spawn("a", [&](Clock& clock) {
    rec.note("a1");
    clock.sleep_s(0);
    rec.note("a2");
    clock.sleep_s(-1);  // negative is 0
    rec.note("a3");
  });
  sim.spawn("b", [&](Clock& clock) {
    rec.note("b1");
    clock.sleep_s(0);
    rec.note("b2");
  });
  sim.run_until(1);
  EXPECT_EQ(rec.lines, (Trace{"0 a1", "0 b1", "0 a2", "0 b2", "0 a3"}));
}

TEST(Simulation, EventsRunBeforeProcessesAtTheSameTime) {
  Simulation sim;
  Recorder rec{sim};
  sim.spawn("p", [&](Clock& clock) {
    rec.note("p");
    clock.sleep_s(1);
    rec.note("p");
    sim.at(1, [&] { rec.note("late event"); });  // now: before the next process at t=1
    clock.sleep_s(0);
    rec.note("p");
  });
  sim.at(1, [&] { rec.note("event"); });
  sim.at(0.5, [&] { rec.note("half"); });
  sim.run_until(std::numeric_limits<double>::infinity());
  EXPECT_EQ(rec.lines, (Trace{"0 p", "500 half", "1000 event", "1000 p", "1000 late event", "1000 p"}));
  EXPECT_EQ(sim.now_s(), 1);  // nothing left: stops at the last thing run
}

TEST(Simulation, RunUntilStopsAtTimeAndResumes) {
  Simulation sim;
  Recorder rec{sim};
  sim.spawn("p", [&](Clock& clock) {
    for (;;) {
      rec.note("tick");
      clock.sleep_s(1);
    }
  });
  sim.run_until(2.5);
  EXPECT_EQ(rec.lines, (Trace{"0 tick", "1000 tick", "2000 tick"}));
  EXPECT_DOUBLE_EQ(sim.now_s(), 2.5);
  sim.run_until(3);
  EXPECT_EQ(rec.lines.size(), 4u);
  EXPECT_EQ(sim.processes_running(), 1u);
  sim.kill_all();  // before rec goes: the loop's frame refers to it
}

struct Guard {
  Recorder& rec;
  std::string what;
  ~Guard() { rec.note(what); }
};

TEST(Simulation, KillUnwindsASleepingProcessBeforeKillReturns) {
  Simulation sim;
  Recorder rec{sim};
  const auto victim = sim.spawn("victim", [&](Clock& clock) {
    Guard guard{rec, "victim unwound"};
    try {
      for (;;) clock.sleep_s(1);
    } catch (const std::exception&) {
      rec.note("swallowed");  // must not happen: Killed is no std::exception
    }
    rec.note("after loop");
  });
  sim.at(2.5, [&] {
    EXPECT_TRUE(sim.alive(victim));
    sim.kill(victim);
    rec.note("kill returned");
    EXPECT_FALSE(sim.alive(victim));
  });
  sim.run_until(10);
  EXPECT_EQ(rec.lines, (Trace{"2500 victim unwound", "2500 kill returned"}));
  EXPECT_EQ(sim.processes_running(), 0u);
  EXPECT_TRUE(sim.failures().empty());
  sim.kill(victim);  // killing the dead is a no-op
}

TEST(Simulation, KillFromAnotherProcessAndItself) {
  Simulation sim;
  Recorder rec{sim};
  const auto b = sim.spawn("b", [&](Clock& clock) {
    Guard guard{rec, "b unwound"};
    for (;;) clock.sleep_s(0.1);
  });
  Simulation::ProcessId a = -1;
  a = sim.spawn("a", [&](Clock& clock) {
    clock.sleep_s(1);
    sim.kill(b);
    rec.note("a killed b");
    clock.sleep_s(1);
    Guard guard{rec, "a unwound"};
    sim.kill(a);  // itself
    rec.note("a goes on until it sleeps");
    clock.sleep_s(1);
    rec.note("never");
  });
  const auto late = sim.spawn("never started", [&](Clock&) { rec.note("never"); });
  sim.kill(late);  // before its first run: the body never starts
  sim.run_until(10);
  EXPECT_EQ(rec.lines, (Trace{"1000 b unwound", "1000 a killed b", "2000 a goes on until it sleeps", "2000 a unwound"}));
  EXPECT_TRUE(sim.failures().empty());
}

TEST(Simulation, PauseHoldsSleepsUntilItEnds) {
  Simulation sim;
  Recorder rec{sim};
  const auto p = sim.spawn("p", [&](Clock& clock) {
    for (int i = 0; i < 5; ++i) {
      rec.note("tick");
      clock.sleep_s(1);
    }
  });
  sim.at(1.5, [&] { sim.pause(p, 4.2); });
  sim.run_until(100);
  EXPECT_EQ(rec.lines, (Trace{"0 tick", "1000 tick", "4200 tick", "5200 tick", "6200 tick"}));
}

TEST(Simulation, ClockSkewShiftsOnlyUnixMs) {
  Simulation sim(1'000'000);
  std::vector<std::pair<double, int64_t>> seen;
  const auto a = sim.spawn("a", [&](Clock& clock) {
    clock.sleep_s(1.5);
    seen.emplace_back(clock.now_s(), clock.unix_ms());
  });
  sim.spawn("b", [&](Clock& clock) {
    clock.sleep_s(1.5);
    seen.emplace_back(clock.now_s(), clock.unix_ms());
  });
  sim.set_clock_skew(a, -250);
  sim.run_until(2);
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0], (std::pair<double, int64_t>{1.5, 1'001'250}));
  EXPECT_EQ(seen[1], (std::pair<double, int64_t>{1.5, 1'001'500}));
  EXPECT_EQ(sim.unix_ms(), 1'002'000);
}

TEST(Simulation, FailuresNameTheProcess) {
  Simulation sim;
  sim.spawn("worker-3", [](Clock& clock) {
    clock.sleep_s(1);
    throw std::runtime_error("peer gone");
  });
  sim.spawn("fine", [](Clock& clock) { clock.sleep_s(2); });
  sim.run_until(5);
  EXPECT_EQ(sim.failures(), (std::vector<std::string>{"worker-3: peer gone"}));
}

TEST(Simulation, DestructorUnwindsParkedProcesses) {
  Trace lines;
  {
    Simulation sim;
    Recorder rec{sim};
    for (int i = 0; i < 4; ++i)
      sim.spawn(str("p", i), [&, i](Clock& clock) {
        Guard guard{rec, str("p", i, " unwound")};
        for (;;) clock.sleep_s(0.5 + i);
      });
    sim.run_until(3);
    sim.kill_all();
    lines = rec.lines;
    EXPECT_EQ(sim.processes_running(), 0u);
  }
  EXPECT_EQ(lines, (Trace{"3000 p0 unwound", "3000 p1 unwound", "3000 p2 unwound", "3000 p3 unwound"}));
  int unwound = 0;
  std::optional<Simulation> sim;  // and without kill_all: the destructor does it
  sim.emplace();
  sim->spawn("p", [&](Clock& clock) {
    struct Count {
      int& n;
      ~Count() { ++n; }
    } count{unwound};
    for (;;) clock.sleep_s(1);
  });
  sim->run_until(1);
  sim.reset();
  EXPECT_EQ(unwound, 1);
}

// Processes share one thread, whose runtime keeps "the exception being handled" and "how many
// are unwinding": each process must see only its own, across sleeps.
TEST(Simulation, EachProcessKeepsItsOwnExceptionsAcrossSleeps) {
  Simulation sim;
  Trace seen;
  for (std::string name : {"a", "b"})
    sim.spawn(name, [&seen, name](Clock& clock) {
      try {
        throw std::runtime_error(name);
      } catch (const std::exception&) {
        clock.sleep_s(1);  // the other one throws and catches meanwhile
        try {
          throw;  // this process's own exception
        } catch (const std::exception& e) {
          seen.push_back(str(name, " rethrew ", e.what()));
        }
      }
    });
  struct SleepsWhileUnwinding {
    Clock& clock;
    ~SleepsWhileUnwinding() { clock.sleep_s(1); }
  };
  sim.spawn("unwinding", [&seen](Clock& clock) {
    try {
      SleepsWhileUnwinding s{clock};
      throw std::runtime_error("x");
    } catch (const std::exception&) {
    }
    seen.push_back(str("unwinding done, in flight ", std::uncaught_exceptions()));
  });
  sim.spawn("bystander", [&seen](Clock& clock) {
    clock.sleep_s(0.5);  // while the others sleep in a catch block and in a destructor
    seen.push_back(str("bystander sees ", std::uncaught_exceptions(), " in flight"));
  });
  sim.run_until(5);
  EXPECT_EQ(seen, (Trace{"bystander sees 0 in flight", "a rethrew a", "b rethrew b", "unwinding done, in flight 0"}));
  EXPECT_TRUE(sim.failures().empty());
  EXPECT_EQ(std::uncaught_exceptions(), 0);
}

// A busy little world: random sleeps, spawns from events and processes, kills from both.
Trace chaos_trace(uint64_t seed) {
  Simulation sim;
  Recorder rec{sim};
  std::mt19937_64 rng(seed);  // drawn by one process at a time: the order is the schedule's
  Simulation::ProcessId last = 0;
  std::function<void(Clock&, std::string)> body = [&](Clock& clock, std::string name) {
    for (int i = 0;; ++i) {
      rec.note(str(name, " ", i, " ", clock.unix_ms()));
      const uint64_t r = rng();
      if (r % 11 == 0 && sim.processes_running() < 12)
        last = sim.spawn(str(name, ".", i), [&body, n = str(name, ".", i)](Clock& c) { body(c, n); });
      if (r % 13 == 0) sim.kill(static_cast<Simulation::ProcessId>(rng() % (last + 1)));
      clock.sleep_s(static_cast<double>(rng() % 5) * 0.25);  // often equal times, sometimes 0
    }
  };
  for (int i = 0; i < 4; ++i)
    last = sim.spawn(str("w", i), [&body, i](Clock& c) { body(c, str("w", i)); });
  for (int k = 1; k <= 5; ++k)
    sim.at(k * 1.1, [&, k] {
      rec.note(str("event ", k));
      sim.kill(k % 4);
      last = sim.spawn(str("r", k), [&body, k](Clock& c) { body(c, str("r", k)); });
    });
  sim.run_until(8);
  rec.note(str("running ", sim.processes_running()));
  sim.kill_all();  // before body, rng and rec go
  EXPECT_TRUE(sim.failures().empty());
  return rec.lines;
}

TEST(Simulation, SameProgramSameInterleaving) {
  const Trace first = chaos_trace(7);
  EXPECT_GT(first.size(), 50u);
  for (int run = 0; run < 3; ++run) EXPECT_EQ(chaos_trace(7), first);
  EXPECT_NE(chaos_trace(8), first);
}

}  // namespace
}  // namespace gradbox::mirror

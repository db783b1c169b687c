#pragma once
// Note [Simulation]
// Many simulated processes (workers, syncers, a chaos monkey) running the protocol's real code
// in one OS process on one virtual clock, FoundationDB style. Each process body runs on its own
// std::thread, but a single baton lets exactly one thread (a process, or the driver that called
// run_until) run at any moment. A process hands the baton back only inside sleep_s of the Clock
// it was given; the driver then picks what runs next, strictly by virtual time, and at one time:
// events (in the order at() was called), then processes whose sleep ends then (by id, which is
// spawn order), then new processes and 0-second sleeps (in the order they happened). The same
// program gives the same interleaving on every run: nothing here reads a real clock.
// kill() is a kill -9: the victim's sleep_s throws Killed (not a std::exception, so protocol
// code's catch (const std::exception&) cannot swallow it) and its stack unwinds at once, before
// kill() returns. Not safe to call from threads other than the baton holder's. Torch-free.
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "mirror/clock.h"

namespace gradbox::mirror {

// Thrown from a killed process's sleep_s. Deliberately not derived from std::exception.
struct Killed {
  int process;
};

class Simulation {
 public:
  using ProcessId = int;

  explicit Simulation(int64_t start_unix_ms = 1'700'000'000'000);
  // kill_all(), then joins every thread.
  ~Simulation();
  Simulation(const Simulation&) = delete;
  Simulation& operator=(const Simulation&) = delete;

  double now_s() const;
  // start_unix_ms + now: the wall clock of a machine without skew.
  int64_t unix_ms() const;
  int64_t unix_ms_at(double t_s) const;

  // A process that first runs at the current virtual time, after those already due then.
  ProcessId spawn(std::string name, std::function<void(Clock&)> body);
  // From the driver (an event) or from a process. Another process unwinds before kill()
  // returns; a process killing itself throws Killed from its next sleep_s.
  void kill(ProcessId id);
  // Every live process, in spawn order (from the driver): before what they use goes away.
  void kill_all();
  bool alive(ProcessId id) const;  // spawned, not killed, body not ended
  // A hung process: none of its sleeps returns before until_s (it keeps the baton otherwise).
  void pause(ProcessId id, double until_s);
  // The process's unix_ms() is off by skew_ms from everyone else's (its now_s() is not).
  void set_clock_skew(ProcessId id, int64_t skew_ms);

  // A driver event at virtual time t_s (now, if t_s is past). Runs while no process runs.
  void at(double t_s, std::function<void()> event);
  // Runs events and processes in order until virtual time t_s (then now_s() == t_s when t_s is
  // finite) or until nothing is left to run. Only from the driver, never from a process.
  void run_until(double t_s);

  // "name: what()" of every body that ended with an exception other than Killed.
  std::vector<std::string> failures() const;
  size_t processes_running() const;  // alive processes

 private:
  static constexpr int kDriver = -1;
  enum class State { parked, running, finished };  // running: holds the baton or waits in kill()
  // What runs next: events (kind 0) before processes (kind 1) at one time; then tier (0 for
  // a sleep that ends at that time, rising for later 0-second sleeps and spawns); then id.
  struct Due {
    double t;
    int kind;
    uint64_t tier;
    int64_t id;
    auto operator<=>(const Due&) const = default;
  };
  struct Process;
  class ProcessClock;

  void sleep(ProcessId id, double seconds);
  void thread_main(ProcessId id);
  // Gives the baton to id and waits (holding `lock`) until it comes back to `self`.
  void hand_over(std::unique_lock<std::mutex>& lock, ProcessId id, int self);
  std::condition_variable& cv_of(int id);
  Process& process(ProcessId id) const;
  void join_finished();

  const int64_t start_unix_ms_;
  mutable std::mutex mutex_;
  std::condition_variable driver_cv_;
  int baton_ = kDriver;
  bool in_run_ = false;
  double now_ = 0;
  uint64_t seq_ = 0;
  std::vector<std::unique_ptr<Process>> processes_;
  std::set<Due> queue_;
  std::map<uint64_t, std::function<void()>> events_;
  std::vector<std::string> failures_;
  std::vector<ProcessId> to_join_;
};

}  // namespace gradbox::mirror

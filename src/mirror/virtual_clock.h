#pragma once
// Note [Simulation]
// Many simulated processes (workers, syncers, a chaos monkey) running the protocol's real code
// in one OS process on one virtual clock, FoundationDB style. Each process body runs as a
// fiber (Boost.Context: its own stack, switched to and from on the caller's thread), so exactly
// one process, or the driver that called run_until, runs at any moment, and handing over costs
// a register swap instead of two thread wake-ups. A process gives control back only inside
// sleep_s of the Clock it was given; the driver then picks what runs next, strictly by virtual
// time, and at one time: events (in the order at() was called), then processes whose sleep
// ends then (by id, which is spawn order), then new processes and 0-second sleeps (in the order
// they happened). The same program gives the same interleaving on every run: nothing here
// reads a real clock.
// kill() is a kill -9: the victim's sleep_s throws Killed (not a std::exception, so protocol
// code's catch (const std::exception&) cannot swallow it) and its stack unwinds at once, before
// kill() returns. Everything runs on the thread that created the Simulation; call it from no
// other. Torch-free.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
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
  // kill_all(): every process's stack is unwound before what it refers to goes.
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
  enum class State { parked, running, finished };  // running: on the stack of switches now
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
  // Switches to process id until it sleeps or ends; from the driver, an event or a killer.
  void resume(ProcessId id);
  // The fiber's body: the process's body, then its end.
  void run_process(Process& p);
  Process& process(ProcessId id) const;

  const int64_t start_unix_ms_;
  int running_ = kDriver;  // the process whose code runs now
  bool in_run_ = false;
  double now_ = 0;
  uint64_t seq_ = 0;
  std::vector<std::unique_ptr<Process>> processes_;
  std::set<Due> queue_;
  std::map<uint64_t, std::function<void()>> events_;
  std::vector<std::string> failures_;
};

}  // namespace gradbox::mirror

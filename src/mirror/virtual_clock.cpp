#include "mirror/virtual_clock.h"

#include <cxxabi.h>

#include <boost/context/fiber.hpp>
#include <boost/context/protected_fixedsize_stack.hpp>
#include <cmath>
#include <exception>
#include <limits>

#include "common/error.h"

namespace gradbox::mirror {
namespace {

namespace context = boost::context;

// The protocol's deepest stacks (protobuf, zstd, nlohmann::json, spdlog) fit well within this;
// pages are committed only when touched, and a guard page turns an overflow into a crash at
// the overflow rather than a corrupt neighbour.
constexpr size_t kStackBytes = 1 << 20;

// The C++ runtime keeps the exceptions being handled per thread (the Itanium C++ ABI's
// __cxa_eh_globals: the chain of caught exceptions and the count of uncaught ones). Processes
// share one thread, so a switch swaps them: a process that sleeps inside a catch block must
// find its own exception there when it wakes, and std::uncaught_exceptions() must count only
// its own (sleep_s asks it to tell a destructor's sleep from a live one's).
struct ExceptionState {
  void* caught;
  unsigned int uncaught;
};
ExceptionState& thread_exception_state() {
  return *reinterpret_cast<ExceptionState*>(abi::__cxa_get_globals());
}

}  // namespace

class Simulation::ProcessClock final : public Clock {
 public:
  ProcessClock(Simulation& sim, ProcessId id) : sim_(sim), id_(id) {}
  double now_s() override { return sim_.now_; }
  int64_t unix_ms() override;
  void sleep_s(double seconds) override { sim_.sleep(id_, seconds); }

 private:
  Simulation& sim_;
  ProcessId id_;
};

struct Simulation::Process {
  Process(Simulation& sim, ProcessId id, std::string name, std::function<void(Clock&)> body)
      : name(std::move(name)), body(std::move(body)), clock(sim, id) {}
  std::string name;
  std::function<void(Clock&)> body;
  ProcessClock clock;
  context::fiber fiber;    // the process, suspended in sleep (or not yet started)
  context::fiber resumer;  // while it runs: whoever switched to it, to switch back to
  ExceptionState exceptions{nullptr, 0};  // its own while it is switched out
  State state = State::parked;
  bool killed = false;
  bool queued = false;
  Due due{};  // its entry in queue_ while queued
  double paused_until = 0;
  int64_t skew_ms = 0;
};

int64_t Simulation::ProcessClock::unix_ms() { return sim_.unix_ms() + sim_.process(id_).skew_ms; }

Simulation::Simulation(int64_t start_unix_ms) : start_unix_ms_(start_unix_ms) {}

Simulation::~Simulation() { kill_all(); }

void Simulation::kill_all() {
  GB_CHECK(running_ == kDriver, "kill_all from a simulated process");
  for (size_t id = 0; id < processes_.size(); ++id) {
    Process& p = *processes_[id];
    if (p.state != State::parked) continue;  // finished: with the driver running, none runs
    p.killed = true;
    if (p.queued) queue_.erase(p.due), p.queued = false;
    resume(static_cast<ProcessId>(id));
  }
}

Simulation::Process& Simulation::process(ProcessId id) const {
  GB_CHECK(id >= 0 && static_cast<size_t>(id) < processes_.size(), "no simulated process ", id, " (",
           processes_.size(), " spawned)");
  return *processes_[id];
}

double Simulation::now_s() const { return now_; }

int64_t Simulation::unix_ms() const { return unix_ms_at(now_); }

int64_t Simulation::unix_ms_at(double t_s) const { return start_unix_ms_ + std::llround(t_s * 1000); }

Simulation::ProcessId Simulation::spawn(std::string name, std::function<void(Clock&)> body) {
  const ProcessId id = static_cast<ProcessId>(processes_.size());
  processes_.push_back(std::make_unique<Process>(*this, id, std::move(name), std::move(body)));
  Process& p = *processes_.back();
  p.due = {now_, 1, ++seq_, id};
  p.queued = true;
  queue_.insert(p.due);
  // Starts at its first resume().
  p.fiber = context::fiber(std::allocator_arg, context::protected_fixedsize_stack(kStackBytes),
                           [this, &p](context::fiber&& resumer) {
                             p.resumer = std::move(resumer);
                             run_process(p);
                             return std::move(p.resumer);
                           });
  return id;
}

void Simulation::run_process(Process& p) {
  if (!p.killed) {
    try {
      p.body(p.clock);
    } catch (const Killed&) {
    } catch (const context::detail::forced_unwind&) {
      throw;  // Boost.Context unwinding a fiber it destroys: must reach its frame
    } catch (const std::exception& e) {
      failures_.push_back(p.name + ": " + e.what());
    } catch (...) {
      failures_.push_back(p.name + ": unknown exception");
    }
  }
  p.body = nullptr;  // its captures die on this process's stack, while it still runs
  p.state = State::finished;
}

void Simulation::resume(ProcessId id) {
  Process& p = process(id);
  const int resumer = running_;
  running_ = id;
  p.state = State::running;
  ExceptionState& thread_state = thread_exception_state();
  const ExceptionState mine = thread_state;
  thread_state = p.exceptions;
  p.fiber = std::move(p.fiber).resume();  // back here when p sleeps or ends
  p.exceptions = thread_state;
  thread_state = mine;
  running_ = resumer;
}

void Simulation::kill(ProcessId id) {
  Process& p = process(id);
  if (p.killed || p.state == State::finished) return;
  p.killed = true;
  // Running: the caller itself, or a process waiting inside kill() for its own victim; either
  // throws at its next sleep.
  if (p.state != State::parked) return;
  if (p.queued) queue_.erase(p.due), p.queued = false;
  resume(id);
  GB_CHECK(p.state == State::finished, "killed process ", p.name, " did not end");
}

bool Simulation::alive(ProcessId id) const {
  const Process& p = process(id);
  return !p.killed && p.state != State::finished;
}

void Simulation::pause(ProcessId id, double until_s) {
  Process& p = process(id);
  p.paused_until = std::max(p.paused_until, until_s);
  if (p.queued && p.due.t < until_s) {
    queue_.erase(p.due);
    p.due = {until_s, 1, 0, id};
    queue_.insert(p.due);
  }
}

void Simulation::set_clock_skew(ProcessId id, int64_t skew_ms) { process(id).skew_ms = skew_ms; }

void Simulation::at(double t_s, std::function<void()> event) {
  GB_CHECK(!std::isnan(t_s), "event at NaN seconds");
  const uint64_t seq = ++seq_;
  events_.emplace(seq, std::move(event));
  queue_.insert({std::max(t_s, now_), 0, seq, static_cast<int64_t>(seq)});
}

void Simulation::sleep(ProcessId id, double seconds) {
  GB_CHECK(!std::isnan(seconds), "sleep of NaN seconds");
  Process& p = process(id);
  GB_CHECK(running_ == id, "the clock of process ", p.name, " used while ",
           running_ == kDriver ? std::string("the driver") : process(running_).name, " runs");
  if (p.killed) {
    if (std::uncaught_exceptions() > 0) return;  // a destructor sleeping while Killed unwinds
    throw Killed{id};
  }
  Due due = seconds > 0 ? Due{now_ + seconds, 1, 0, id} : Due{now_, 1, ++seq_, id};
  if (p.paused_until > due.t) due = {p.paused_until, 1, 0, id};
  p.due = due;
  p.queued = true;
  queue_.insert(due);
  p.state = State::parked;
  p.resumer = std::move(p.resumer).resume();  // back here when resume(id) is called
  if (p.killed) throw Killed{id};
}

void Simulation::run_until(double t_s) {
  GB_CHECK(!std::isnan(t_s), "run_until NaN seconds");
  GB_CHECK(running_ == kDriver && !in_run_, "run_until called from a simulated process or an event");
  in_run_ = true;
  struct Reset {
    bool& flag;
    ~Reset() { flag = false; }
  } reset{in_run_};  // also when an event throws
  while (!queue_.empty() && queue_.begin()->t <= t_s) {
    const Due due = *queue_.begin();
    queue_.erase(queue_.begin());
    now_ = std::max(now_, due.t);
    if (due.kind == 0) {
      auto it = events_.find(static_cast<uint64_t>(due.id));
      std::function<void()> event = std::move(it->second);
      events_.erase(it);
      event();
    } else {
      process(static_cast<ProcessId>(due.id)).queued = false;
      resume(static_cast<ProcessId>(due.id));
    }
  }
  if (std::isfinite(t_s)) now_ = std::max(now_, t_s);
}

std::vector<std::string> Simulation::failures() const { return failures_; }

size_t Simulation::processes_running() const {
  size_t n = 0;
  for (const auto& p : processes_) n += !p->killed && p->state != State::finished;
  return n;
}

}  // namespace gradbox::mirror

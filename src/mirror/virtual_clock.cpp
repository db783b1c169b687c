#include "mirror/virtual_clock.h"

#include <cmath>
#include <exception>
#include <limits>

#include "common/error.h"

namespace gradbox::mirror {

class Simulation::ProcessClock final : public Clock {
 public:
  ProcessClock(Simulation& sim, ProcessId id) : sim_(sim), id_(id) {}
  double now_s() override { return sim_.now_s(); }
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
  std::thread thread;
  std::condition_variable cv;
  State state = State::parked;
  bool killed = false;
  bool queued = false;
  Due due{};  // its entry in queue_ while queued
  double paused_until = 0;
  int64_t skew_ms = 0;
  int return_to = kDriver;  // who gets the baton when the body ends
};

int64_t Simulation::ProcessClock::unix_ms() {
  std::lock_guard lock(sim_.mutex_);
  return sim_.start_unix_ms_ + std::llround(sim_.now_ * 1000) + sim_.process(id_).skew_ms;
}

Simulation::Simulation(int64_t start_unix_ms) : start_unix_ms_(start_unix_ms) {}

Simulation::~Simulation() {
  kill_all();
  for (auto& p : processes_)
    if (p->thread.joinable()) p->thread.join();
}

void Simulation::kill_all() {
  {
    std::unique_lock lock(mutex_);
    GB_CHECK(baton_ == kDriver, "kill_all from a simulated process");
    for (size_t id = 0; id < processes_.size(); ++id) {
      Process& p = *processes_[id];
      if (p.state != State::parked) continue;  // finished: with the driver running, none runs
      p.killed = true;
      if (p.queued) queue_.erase(p.due), p.queued = false;
      hand_over(lock, static_cast<ProcessId>(id), kDriver);
    }
  }
  join_finished();
}

Simulation::Process& Simulation::process(ProcessId id) const {
  GB_CHECK(id >= 0 && static_cast<size_t>(id) < processes_.size(), "no simulated process ", id, " (",
           processes_.size(), " spawned)");
  return *processes_[id];
}

std::condition_variable& Simulation::cv_of(int id) { return id == kDriver ? driver_cv_ : process(id).cv; }

double Simulation::now_s() const {
  std::lock_guard lock(mutex_);
  return now_;
}

int64_t Simulation::unix_ms() const {
  std::lock_guard lock(mutex_);
  return start_unix_ms_ + std::llround(now_ * 1000);
}

int64_t Simulation::unix_ms_at(double t_s) const { return start_unix_ms_ + std::llround(t_s * 1000); }

Simulation::ProcessId Simulation::spawn(std::string name, std::function<void(Clock&)> body) {
  std::lock_guard lock(mutex_);
  const ProcessId id = static_cast<ProcessId>(processes_.size());
  processes_.push_back(std::make_unique<Process>(*this, id, std::move(name), std::move(body)));
  Process& p = *processes_.back();
  p.due = {now_, 1, ++seq_, id};
  p.queued = true;
  queue_.insert(p.due);
  p.thread = std::thread(&Simulation::thread_main, this, id);  // waits for the baton
  return id;
}

void Simulation::kill(ProcessId id) {
  std::unique_lock lock(mutex_);
  Process& p = process(id);
  if (p.killed || p.state == State::finished) return;
  p.killed = true;
  // Running: the caller itself, or a process waiting inside kill() for its own victim; either
  // throws at its next sleep.
  if (p.state != State::parked) return;
  if (p.queued) queue_.erase(p.due), p.queued = false;
  hand_over(lock, id, baton_);
}

bool Simulation::alive(ProcessId id) const {
  std::lock_guard lock(mutex_);
  const Process& p = process(id);
  return !p.killed && p.state != State::finished;
}

void Simulation::pause(ProcessId id, double until_s) {
  std::lock_guard lock(mutex_);
  Process& p = process(id);
  p.paused_until = std::max(p.paused_until, until_s);
  if (p.queued && p.due.t < until_s) {
    queue_.erase(p.due);
    p.due = {until_s, 1, 0, id};
    queue_.insert(p.due);
  }
}

void Simulation::set_clock_skew(ProcessId id, int64_t skew_ms) {
  std::lock_guard lock(mutex_);
  process(id).skew_ms = skew_ms;
}

void Simulation::at(double t_s, std::function<void()> event) {
  GB_CHECK(!std::isnan(t_s), "event at NaN seconds");
  std::lock_guard lock(mutex_);
  const uint64_t seq = ++seq_;
  events_.emplace(seq, std::move(event));
  queue_.insert({std::max(t_s, now_), 0, seq, static_cast<int64_t>(seq)});
}

void Simulation::hand_over(std::unique_lock<std::mutex>& lock, ProcessId id, int self) {
  Process& p = process(id);
  p.return_to = self;
  baton_ = id;
  p.cv.notify_one();
  std::condition_variable& mine = cv_of(self);
  mine.wait(lock, [&] { return baton_ == self; });
}

void Simulation::sleep(ProcessId id, double seconds) {
  GB_CHECK(!std::isnan(seconds), "sleep of NaN seconds");
  std::unique_lock lock(mutex_);
  Process& p = process(id);
  GB_CHECK(baton_ == id, "the clock of process ", p.name, " used by another thread (baton at ", baton_, ")");
  if (p.killed) {
    if (std::uncaught_exceptions() > 0) return;  // a destructor sleeping while Killed unwinds
    throw Killed{id};
  }
  GB_CHECK(p.return_to == kDriver, "process ", p.name, " parks while a killer waits for it");
  Due due = seconds > 0 ? Due{now_ + seconds, 1, 0, id} : Due{now_, 1, ++seq_, id};
  if (p.paused_until > due.t) due = {p.paused_until, 1, 0, id};
  p.due = due;
  p.queued = true;
  queue_.insert(due);
  p.state = State::parked;
  baton_ = kDriver;
  driver_cv_.notify_one();
  p.cv.wait(lock, [&] { return baton_ == id; });
  p.state = State::running;
  if (p.killed) throw Killed{id};
}

void Simulation::thread_main(ProcessId id) {
  std::unique_lock lock(mutex_);
  Process& p = process(id);
  p.cv.wait(lock, [&] { return baton_ == id; });
  p.state = State::running;
  if (!p.killed) {
    lock.unlock();
    std::string failure;
    try {
      p.body(p.clock);
    } catch (const Killed&) {
    } catch (const std::exception& e) {
      failure = p.name + ": " + e.what();
    } catch (...) {
      failure = p.name + ": unknown exception";
    }
    p.body = nullptr;  // its captures die while this process still holds the baton
    lock.lock();
    if (!failure.empty()) failures_.push_back(std::move(failure));
  }
  p.state = State::finished;
  to_join_.push_back(id);
  baton_ = p.return_to;
  cv_of(p.return_to).notify_one();
}

void Simulation::join_finished() {
  std::vector<ProcessId> ids;
  {
    std::lock_guard lock(mutex_);
    ids.swap(to_join_);
  }
  for (ProcessId id : ids) processes_[id]->thread.join();
}

void Simulation::run_until(double t_s) {
  GB_CHECK(!std::isnan(t_s), "run_until NaN seconds");
  std::unique_lock lock(mutex_);
  GB_CHECK(baton_ == kDriver && !in_run_, "run_until called from a simulated process or an event");
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
      lock.unlock();
      event();
      join_finished();
      lock.lock();
    } else {
      Process& p = process(static_cast<ProcessId>(due.id));
      p.queued = false;
      hand_over(lock, static_cast<ProcessId>(due.id), kDriver);
      lock.unlock();
      join_finished();
      lock.lock();
    }
  }
  if (std::isfinite(t_s)) now_ = std::max(now_, t_s);
}

std::vector<std::string> Simulation::failures() const {
  std::lock_guard lock(mutex_);
  return failures_;
}

size_t Simulation::processes_running() const {
  std::lock_guard lock(mutex_);
  size_t n = 0;
  for (const auto& p : processes_) n += !p->killed && p->state != State::finished;
  return n;
}

}  // namespace gradbox::mirror

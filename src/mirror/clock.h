#pragma once
// Time, as the protocol sees it (Note [The seam] in mirror.h). The exchange never reads a
// clock or sleeps except through this interface: real runs use the steady clock and the wall
// clock; tests and the simulator use a virtual clock (virtual_clock.h) on which hours of
// deadlines, failovers and stale heartbeats pass in milliseconds. Torch-free.
#include <cstdint>

namespace gradbox::mirror {

class Clock {
 public:
  virtual ~Clock() = default;
  // Monotonic seconds from an arbitrary origin: deadlines and elapsed times.
  virtual double now_s() = 0;
  // Wall-clock milliseconds since the Unix epoch: written into file headers, for people and
  // for names; never trusted across machines.
  virtual int64_t unix_ms() = 0;
  // The only way the protocol waits. A virtual clock may throw from here to end a simulated
  // process (a kill -9 at a moment when it was waiting).
  virtual void sleep_s(double seconds) = 0;
};

// The process's real clocks (std::chrono::steady_clock, system_clock, this_thread::sleep_for).
Clock& system_clock();

}  // namespace gradbox::mirror

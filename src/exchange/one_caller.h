#pragma once
// Note [One caller at a time]
// An exchange holds one round's state (its agreement, views, kept buffers) and is not
// thread-safe. The trainer calls it from one thread at a time: a round handed to a background
// thread (--overlap, DiLoCo rounds in flight) runs while the training thread leaves the
// exchange alone. A second call while one is in flight is a bug in the caller, and a silent
// one: two rounds in one exchange overwrite each other's buffers. It happened (overlapped
// time-boxed DiLoCo launched a second all_reduce: heap corruption, garbage contributions,
// workers crashing far from the cause). So each entry point holds a OneCaller::Call, which
// turns that bug into an immediate error naming both calls.
#include <atomic>
#include <stdexcept>
#include <string>

namespace gradbox::exchange {

class OneCaller {
 public:
  // Held for the length of one entry point's call; `call` is a string literal naming it.
  class Call {
   public:
    Call(OneCaller& owner, const char* call) : owner_(owner) {
      const char* in_flight = nullptr;
      if (!owner_.in_call_.compare_exchange_strong(in_flight, call))
        throw std::logic_error(std::string(call) + " called while " + in_flight +
                               " is in flight: an exchange takes one call at a time "
                               "(Note [One caller at a time])");
    }
    ~Call() { owner_.in_call_.store(nullptr); }
    Call(const Call&) = delete;
    Call& operator=(const Call&) = delete;

   private:
    OneCaller& owner_;
  };

 private:
  std::atomic<const char*> in_call_{nullptr};
};

}  // namespace gradbox::exchange

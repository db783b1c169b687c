#pragma once
// Pieces of elastic membership (Note [Elastic membership] in folder_exchange.h) that stand on
// their own: the adaptive contribution deadline, and peers' heartbeats. Torch- and
// protobuf-free header.
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>

namespace gradbox::exchange {

class ExchangeContext;

// How long an owner waits for a missing contribution: median + k * spread (1.4826 * MAD) of the
// lags observed between a worker's own contribution and its peers', clamped to
// [floor, ceiling]. The ceiling holds until `min_samples` lags are seen.
class LagDeadline {
 public:
  LagDeadline(double floor_s, double ceiling_s, double k, size_t min_samples = 8, size_t window = 256);
  void observe(double lag_s);
  double deadline() const;
  size_t samples() const { return lags_.size(); }

 private:
  double floor_s_, ceiling_s_, k_;
  size_t min_samples_, window_;
  std::deque<double> lags_;
  mutable std::optional<double> cached_;  // deadline() sorts the window: once per new lag
};

// A worker's newest heartbeat, as far as membership cares.
struct PeerBeat {
  std::string state;  // joining | ready | live | left
  uint64_t applied_round = 0;
  // Since it arrived here, on this worker's clock. Never the writer's clock: a session whose
  // clock runs ahead and then dies would otherwise look alive for as long as it ran ahead.
  double age_s = 0;
  uint64_t incarnation = 0;
  int64_t started_unix_ms = 0;
};

// What a heartbeat reports besides the state.
struct Progress {
  uint64_t applied_round = 0;
  uint64_t step = 0;  // the optimizer step the parameters are at (0: unknown, = applied_round)
  double tokens_per_second = 0;
  double last_loss = 0;
  uint64_t tokens = 0;
};

// Peers' newest heartbeats under members/<worker>/ and this worker's own. Older mirrored
// heartbeats are forgotten on the way; this worker's previous one is withdrawn when it
// publishes a new one (the folder keeps one per worker).
class Heartbeats {
 public:
  explicit Heartbeats(ExchangeContext& context);

  void refresh();  // reads the mirror
  const std::map<std::string, PeerBeat>& peers() const { return peers_; }  // other workers
  // The newest heartbeat of another session under this worker's own name, if any.
  const std::optional<PeerBeat>& namesake() const { return namesake_; }
  bool fresh(const PeerBeat& beat) const;
  bool anyone_live() const;  // a fresh "live" peer

  void publish(const std::string& state, const Progress& progress);
  const std::string& last_state() const { return last_state_; }
  double seconds_since_publish() const;

 private:
  // A heartbeat file as read and verified once: names are written once, so the same name
  // never needs reading again.
  struct ReadBeat {
    std::string rel;
    PeerBeat beat;  // age_s unset: it grows with every refresh
  };

  ExchangeContext& context_;
  std::map<std::string, PeerBeat> peers_;
  std::optional<PeerBeat> namesake_;
  std::map<std::string, ReadBeat> newest_read_;  // worker folder -> its newest beat read
  std::string last_name_, last_state_;
  int64_t last_sequence_ = 0;
  double last_published_s_ = -1e300;
  bool withdrew_earlier_lives_ = false;
};

}  // namespace gradbox::exchange

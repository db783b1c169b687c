#pragma once
// Pieces of elastic membership (Note [Elastic membership] in folder_exchange.h) that stand on
// their own: the adaptive contribution deadline and peers' newest heartbeats. Torch- and
// protobuf-free header.
#include <cstddef>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <map>
#include <string>

namespace gradbox::exchange {

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
};

// A peer's newest heartbeat, as far as membership cares.
struct PeerBeat {
  std::string state;  // joining | ready | live | left
  uint64_t applied_round = 0;
  double age_s = 0;   // from the writer's clock to ours
};

// The newest flagged heartbeat of every worker but `self` under <inbox>/members/<worker>/;
// files of another run are ignored, older mirrored heartbeats are removed on the way.
std::map<std::string, PeerBeat> read_peer_heartbeats(const std::filesystem::path& inbox, const std::string& run_id,
                                                     const std::string& self);

}  // namespace gradbox::exchange

#pragma once
// Replica checks (Note [Elastic membership], repair): every fingerprint_interval rounds each
// replica publishes the checksum of its parameters; every fingerprint it sees for a round, from
// whoever published it (members, followers, the far side of a healed partition), is grouped
// with its own. The largest group wins (a tie goes to the group holding the smallest name); a
// replica outside it must reload the agreed state. Winners and who held them are remembered,
// so that a reload never picks a checkpoint the replicas disagreed with, nor one published by a
// replica that had just lost. Torch-free; uses protobuf.
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "exchange/exchange_context.h"

namespace gradbox::exchange {

class ReplicaCheck {
 public:
  explicit ReplicaCheck(ExchangeContext& context) : context_(context) {}

  // After applying `round`: publishes the fingerprint when the round is due, or always with
  // Due::always (the run's last round), once per round.
  enum class Due { on_interval, always };
  void publish(uint64_t round, const float* params, size_t n, Due due = Due::on_interval);
  bool due(uint64_t round) const;  // a fingerprint of `round` goes out on the interval
  // The fingerprints of `round` seen so far (worker -> checksum, this worker's own included),
  // and whether this replica is outside the winning group.
  struct Verdict {
    std::map<std::string, uint64_t> seen;
    bool minority = false;
  };
  Verdict verdict(uint64_t round);
  // Reads the fingerprints that arrived; true when this replica holds a minority checksum for
  // some round (it must reload). Rounds older than the gc window are forgotten.
  bool in_minority(uint64_t current_round);
  // The winning checksum of a round, when fingerprints of it were compared.
  std::optional<uint64_t> agreed(uint64_t round) const;
  // Whether `worker` was outside the winning group at the newest compared round <= `step` in
  // which its fingerprint was seen: its state at `step` (a checkpoint it published) likely grew
  // from the losing branch, so a reload passes it over. Kept across reloads.
  bool dissented_by(const std::string& worker, uint64_t step) const;
  void forget_own();  // after a reload: the old parameters are gone (the peers' fingerprints stay)
  // The newest round this replica came out in the minority of twice, a reload and replay
  // between: a reload must take a checkpoint of that step or later (0: any will do).
  uint64_t must_reload_past() const { return must_reload_past_; }

 private:
  uint64_t winner(uint64_t round, uint64_t own, const std::map<std::string, uint64_t>& peers);
  // Reads the fingerprints of `round` that arrived since the last look into seen; true when any.
  bool read_new(uint64_t round, uint64_t own, std::map<std::string, uint64_t>& seen);

  ExchangeContext& context_;
  std::map<uint64_t, uint64_t> own_;                            // round -> own checksum
  std::map<uint64_t, std::map<std::string, uint64_t>> peers_;   // round -> worker -> checksum
  std::map<uint64_t, uint64_t> agreed_;                         // round -> the winning checksum
  std::map<uint64_t, std::map<std::string, bool>> votes_;       // round -> worker -> held the winner
  std::map<uint64_t, uint64_t> judged_;                         // round -> the own checksum last judged
  std::map<uint64_t, int> times_outvoted_;                      // round -> times this replica lost it
  uint64_t must_reload_past_ = 0;
  std::set<std::string> read_;                                  // fingerprint files already counted
};

}  // namespace gradbox::exchange

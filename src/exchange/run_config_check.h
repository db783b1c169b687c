#pragma once
// Every worker publishes its RunConfig (model, pattern, shards, codec) under run/. A peer whose
// settings differ is refused: on this worker's first round a mismatch is a user error (it
// joined the wrong run) and throws an InputError naming the file and the setting; later the
// stranger's files are left out. A joiner that did not choose --shards adopts the run's.
// A config is its writer's only under that writer's name (RunConfig.worker, and in a signed run
// the signature): one under another's name, or forged, is refused as a file and held against
// nobody.
// Torch-free; uses protobuf.
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "exchange/exchange_context.h"

namespace gradbox::exchange {

class RunConfigCheck {
 public:
  explicit RunConfigCheck(ExchangeContext& context) : context_(context) {}

  // The run's --shards when a peer's config shows one (nullopt: none seen, or the same).
  std::optional<uint32_t> run_shard_count();
  void publish();  // once per life
  // Peers' configs that arrived since the last call; first_round: a mismatch throws.
  void check_peers(bool first_round);
  bool refused(const std::string& worker) const { return refused_.count(worker) > 0; }
  // The step-0 state checksums `worker`'s verified run configs offer (0: one that offers none);
  // empty while none of its configs is here.
  std::vector<uint64_t> initial_states_of(const std::string& worker);

 private:
  wire::RunConfig mine() const;
  // A peer's verified config under its writer's own name (nullopt: not here whole, or refused).
  std::optional<wire::RunConfig> read(const std::string& name);

  ExchangeContext& context_;
  bool published_ = false;
  std::set<std::string> checked_;
  // Run configs read for initial_states_of, by name (written once): a founder polls for them.
  std::map<std::string, uint64_t> initial_states_read_;
  std::set<std::string> refused_;
  bool peer_verified_ = false;  // another worker's config has verified here
};

}  // namespace gradbox::exchange

#pragma once
// Gradient exchange through a shared folder, as seen through the syncer's local mirror.
//
// Note [Round agreement]
// Each round r has its own folder rounds/r%08d/. The flat gradient is cut into S shards of
// contiguous elements. Shard k of round r has a deterministic owner per epoch e:
//     owner(k, e) = members[(k + r + e) mod N]       (members sorted by name)
// so ownership rotates with the round and fails over in a fixed order.
//
//   1. Every worker writes its contribution to each shard, once, under a unique name:
//        g-<worker>-s<k>.gbx     (GradientShard: tokens, loss, overflow, codec payload)
//   2. The epoch-0 owner waits until every member's contribution is there or its
//      contribution timeout passes, then publishes the agreement for the shard:
//        all-gather:  c-s<k>-e<e>-<owner>.gbx   (RoundCommit: the contributors, pinned by checksum)
//        sharded:     r-s<k>-e<e>-<owner>.gbx   (GradientShard reduced=true: the weighted
//                                                average itself, with its contributors)
//   3. Everyone applies, per shard, the lowest-epoch agreement it sees. If none has appeared
//      e * failover_timeout after a worker's own contribution, the epoch-e owner publishes one.
//
// Only the agreement decides who contributed, never each worker's own view; a slow owner and
// its successor can still both publish (the folder is eventually consistent), so replicas
// publish parameter fingerprints every K rounds and a mismatch is reported (and repaired in
// the elastic layer). Every replica decodes the same bytes and sums them in the same order
// (sorted by worker), so identical inputs give bit-identical averages.
//
// Every worker also publishes its RunConfig (model, pattern, shards, codec). A peer whose
// settings differ is refused: a worker that sees the mismatch on its first round exits with an
// error naming the file and the setting; one already training leaves the stranger's files out.
//
// Note [Elastic membership]
// Who is expected in round r (the view V_r) is itself agreed: shard 0's agreement of round r
// names V_r and V_{r+1}, so every replica that applied round r knows the owners of round r+1.
// The shard-0 owner builds V_{r+1} from
//   - the members of V_r that contributed to round r and did not announce "left", and
//   - followers whose newest heartbeat is fresh (--stale-after), says "ready" and shows them
//     caught up (applied round >= r - 2).
// A member that misses the contribution deadline is therefore out of the next view: a dead
// worker costs the others one deadline (one failover timeout if it owned a shard of the round;
// none for a worker that announced "left": its successor takes over at the deadline).
// A worker not in V_r follows: it waits for the round's agreements and applies them without
// contributing. Joiners and restarted workers start that way from the newest folder checkpoint
// (Note [Folder checkpoints] in folder_checkpoint.h), replay the rounds the folder keeps after
// it, publish "ready" once caught up, and are in a view a round or two later. Nobody waits for
// them. Round folders are kept back to the second-newest folder checkpoint for that replay.
// When nobody is live (every heartbeat stale or "left") a follower that has waited --stale-after
// for an agreement, and has the smallest name among the fresh followers, makes itself the view:
// the whole run resumes from where the folder's agreements end.
//
// The contribution deadline adapts to the lags observed between this worker's contribution and
// its peers' (median + k * spread over recent rounds), within --deadline-floor and
// --contribution-timeout (the ceiling, used until enough lags are seen); changes are logged.
//
// Repair: after each fingerprint round, a replica whose checksum is held by a minority of the
// replicas that reported (ties: the group holding the smallest worker name wins) reloads the
// agreed state (RoundResult::resync), as does a follower whose next round is gone from the
// folder while a newer checkpoint exists.
//
// Note [Live control]
// The run's control file <shared>/control.json (micro_batch, grad_accum, lr_multiplier,
// weight_decay, dropout; see live_control.h) is mirrored by the syncer. When a shard-0 owner
// sees its mirror change, its agreement for round r carries the new control with
// from_round = r + 2; every replica learns it with round r and switches before computing round
// r + 2 (also with --overlap), so all apply it at the same round. Every shard-0 agreement
// repeats the control in effect, so followers and restarted workers learn it too, and the
// trainer keeps it in its checkpoints.
//
// The local side (the syncer contract): this worker writes its files atomically into
// <local>/outbox/<rel> and reads peers' files from <local>/inbox/<rel> only once
// <local>/inbox/<rel>.flag exists. In the sharded pattern contributions are fetched on demand:
// the worker creates <local>/requests/<rel> and only the owners download them.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "codec/codec.h"
#include "exchange/gradient_exchange.h"

namespace gradbox::exchange {

enum class ExchangePattern { all_gather, sharded };
ExchangePattern parse_pattern(const std::string& name);  // InputError naming --exchange
const char* pattern_name(ExchangePattern pattern);

struct FolderExchangeConfig {
  std::string run_id;
  uint64_t model_fingerprint = 0;
  std::string model_config_json;  // published in run/config-<worker>.gbx for peers to check
  std::string train_config_json;
  std::string worker;
  // The founding members (the whole first view when the run is new); empty: this worker alone.
  // Later views come from the agreements (Note [Elastic membership]).
  std::vector<std::string> members;
  std::filesystem::path local_dir;
  ExchangePattern pattern = ExchangePattern::all_gather;
  uint32_t shard_count = 0;  // 0: the run's (a joiner adopts it); new runs: 1 for all-gather, one per founder for sharded
  codec::CodecOptions codec;
  double contribution_timeout_s = 30;  // the ceiling of the adaptive contribution deadline
  double deadline_floor_s = 2;         // its floor
  double deadline_k = 4;               // deadline = median lag + k * spread (MAD), clamped
  double failover_timeout_s = 60;      // then the next owner in line takes the shard over
  double give_up_timeout_s = 900;      // nothing waits forever
  int64_t fingerprint_interval = 10;   // rounds between parameter fingerprints (0: never)
  int64_t gc_window = 8;               // rounds kept behind the newest applied one
  double poll_interval_s = 0.002;
  double heartbeat_interval_s = 10;    // members/<worker>/hb-<unix ms>.gbx, newest kept
  double stale_after_s = 60;           // a heartbeat older than this (writer's clock) is stale
  double checkpoint_failover_s = 600;  // then the next in line publishes a missing checkpoint
  size_t keep_folder_checkpoints = 2;
  uint64_t checkpoint_part_bytes = 64ull << 20;
  bool wait_for_syncer = false;        // join(): wait until the syncer has listed the folder once
  // Called while waiting (about once a second); throws to abort, e.g. when the syncer died.
  std::function<void()> check_alive;

  void validate() const;  // InputError naming the flag
};

std::unique_ptr<GradientExchange> make_folder_exchange(FolderExchangeConfig config);

// Names of the files in a round folder (also used by tests and the status command).
std::string round_dir_name(uint64_t round);  // "rounds/r00000012"
uint64_t newest_round_folder(const std::filesystem::path& root);  // under root/rounds; 0: none
std::string contribution_name(const std::string& worker, uint32_t shard);
std::string agreement_name(ExchangePattern pattern, uint32_t shard, uint32_t epoch, const std::string& owner);
std::string fingerprint_name(const std::string& worker);
std::string run_config_name(const std::string& worker);  // "run/config-<worker>.gbx"
std::string heartbeat_name(const std::string& worker, int64_t unix_ms);  // "members/<worker>/hb-<ms>.gbx"

}  // namespace gradbox::exchange

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
  std::vector<std::string> members;  // every worker of the run, this one included
  std::filesystem::path local_dir;
  ExchangePattern pattern = ExchangePattern::all_gather;
  uint32_t shard_count = 0;  // 0: 1 for all-gather, one per member for sharded
  codec::CodecOptions codec;
  double contribution_timeout_s = 30;  // an owner waits this long for missing contributions
  double failover_timeout_s = 60;      // then the next owner in line takes the shard over
  double give_up_timeout_s = 900;      // nothing waits forever
  int64_t fingerprint_interval = 10;   // rounds between parameter fingerprints (0: never)
  int64_t gc_window = 8;               // rounds kept behind the newest applied one
  double poll_interval_s = 0.002;
  double heartbeat_interval_s = 10;    // members/<worker>/hb-<unix ms>.gbx, newest kept
  // Called while waiting (about once a second); throws to abort, e.g. when the syncer died.
  std::function<void()> check_alive;

  void validate() const;  // InputError naming the flag
};

std::unique_ptr<GradientExchange> make_folder_exchange(FolderExchangeConfig config);

// Names of the files in a round folder (also used by tests and the status command).
std::string round_dir_name(uint64_t round);  // "rounds/r00000012"
std::string contribution_name(const std::string& worker, uint32_t shard);
std::string agreement_name(ExchangePattern pattern, uint32_t shard, uint32_t epoch, const std::string& owner);
std::string fingerprint_name(const std::string& worker);
std::string run_config_name(const std::string& worker);  // "run/config-<worker>.gbx"
std::string heartbeat_name(const std::string& worker, int64_t unix_ms);  // "members/<worker>/hb-<ms>.gbx"

}  // namespace gradbox::exchange

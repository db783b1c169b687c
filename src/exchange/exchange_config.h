#pragma once
// The settings of one worker's folder exchange, in one place with their defaults and checks.
// Torch- and protobuf-free.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "codec/codec.h"
#include "wire/file_mac.h"

namespace gradbox::exchange {

enum class ExchangePattern { all_gather, sharded };
ExchangePattern parse_pattern(const std::string& name);  // InputError naming --exchange
const char* pattern_name(ExchangePattern pattern);

struct FolderExchangeConfig {
  std::string run_id;
  uint64_t model_fingerprint = 0;
  std::string model_config_json;  // published in run/config-<worker>-<token>.gbx for peers to check
  std::string train_config_json;
  std::string worker;
  // The run secret's MAC (Note [Signed files] in wire/file_mac.h): every file this worker writes
  // is tagged and every file it reads must carry a valid tag. Null: an unsigned run.
  std::shared_ptr<const wire::FileMac> file_mac;
  // An owner leaves out a contribution whose norm is above this many times the lower median of
  // the shard's (0: compares no norms; non-finite values are always refused). Note [Checked
  // contributions] in exchange/contribution_check.h.
  double max_norm_ratio = 10.0;
  // This worker's upload allowance per 24 hours (Drive: 750 GB per account); publishing warns as
  // the last day's uploads near it and when they reach it, and a run whose pace would reach it
  // is slowed down (Note [Slowing down before the upload cap] in exchange/control_agreement.h).
  uint64_t upload_cap_bytes = 750ull * 1000 * 1000 * 1000;
  // What a file counts against upload_cap_bytes; empty: its size. The speed-up projection runs a
  // small model's files through the protocol and charges a large model's sizes (sim/projection.h).
  std::function<uint64_t(const std::string& rel, uint64_t bytes)> nominal_upload_bytes;
  // The run's --grad-accum: what that slow-down doubles while no live control sets grad_accum.
  int64_t grad_accum = 1;
  // The founding members (the whole first view when the run is new); empty: this worker alone.
  // Later views come from the agreements (Note [Elastic membership]).
  std::vector<std::string> members;
  // The checksum of this worker's own step-0 state when it starts fresh (0: resumed, or none to
  // offer): Note [Founders' own initial weights] in folder_exchange.h.
  uint64_t initial_state_checksum = 0;
  // Where exchange/stats.json goes, and the default DiskMirror's folder (empty: no stats file).
  std::filesystem::path local_dir;
  // Clock seconds between rewrites of stats.json at round ends (0: every round); it is always
  // written when the run ends, leaves or resyncs. Simulations of hundreds of rounds raise it.
  double stats_interval_s = 0;
  ExchangePattern pattern = ExchangePattern::all_gather;
  uint32_t shard_count = 0;  // 0: the run's (a joiner adopts it); new runs: 1 for all-gather, one per founder for sharded
  codec::CodecOptions codec;
  // What a round averages, as peers must agree on it: "gradient", or the DiLoCo settings
  // (Note [DiLoCo rounds]); a peer with another is refused like one with another codec.
  std::string sync = "gradient";
  // Time-boxed DiLoCo rounds (Note [Late entry] in folder_exchange.h): a caught-up follower
  // contributes to the round in progress, and owners take such contributions when present.
  bool late_entry = false;
  // With --overlap-steps as well: every worker's box, not only a late entrant's, is timed from
  // the round's opening by its shard-0 agreement's clock, which realigns the workers each round
  // (Note [Overlapped time-boxed rounds] in folder_exchange.h).
  bool boxes_from_agreement = false;
  double round_seconds = 0;  // the box (--round-seconds): for boxes_from_agreement, and the upload-cap slow-down
  // With boxes_from_agreement: members publish their Δ so far during the box (the trainer's
  // --partial-every), and an owner about to leave a member out pins its newest one instead
  // (Note [Partial deltas] in folder_exchange.h).
  bool partial_deltas = false;
  double contribution_timeout_s = 30;  // the ceiling of the adaptive contribution deadline
  double deadline_floor_s = 2;         // its floor
  double deadline_k = 4;               // deadline = median lag + k * spread (MAD), clamped
  double failover_timeout_s = 60;      // then the next owner in line takes the shard over
  double give_up_timeout_s = 900;      // nothing waits forever
  int64_t fingerprint_interval = 10;   // rounds between parameter fingerprints (0: never)
  int64_t gc_window = 8;               // rounds kept behind the newest applied one
  double poll_interval_s = 0.002;
  double heartbeat_interval_s = 10;    // members/<worker>/hb-<unix ms>-<token>.gbx, newest kept
  double stale_after_s = 60;           // a heartbeat not followed by a newer one for this long (since it arrived) is stale
  double checkpoint_failover_s = 600;  // then the next in line publishes a missing checkpoint
  size_t keep_folder_checkpoints = 2;
  uint64_t checkpoint_part_bytes = 64ull << 20;
  bool wait_for_syncer = false;        // join(): wait until the syncer has listed the folder once
  // Seeds this process's unpredictable file-name tokens (Note [Unpredictable names]); 0: drawn
  // from the operating system. Simulations set it so that a run replays exactly.
  uint64_t incarnation_seed = 0;
  // Called while waiting (about once a second); throws to abort, e.g. when the syncer died.
  std::function<void()> check_alive;

  void validate() const;  // InputError naming the flag
};

}  // namespace gradbox::exchange

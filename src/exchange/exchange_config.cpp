#include "exchange/exchange_config.h"

#include <set>

#include "common/error.h"

namespace gradbox::exchange {

ExchangePattern parse_pattern(const std::string& name) {
  if (name == "all-gather") return ExchangePattern::all_gather;
  if (name == "sharded") return ExchangePattern::sharded;
  throw InputError(str("--exchange ", name, ": unknown pattern (all-gather or sharded)"));
}

const char* pattern_name(ExchangePattern pattern) {
  return pattern == ExchangePattern::sharded ? "sharded" : "all-gather";
}

void FolderExchangeConfig::validate() const {
  GB_REQUIRE(!worker.empty(), "--worker: a worker name is required with --shared");
  GB_REQUIRE(worker.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_") ==
                     std::string::npos && worker.size() <= 64,
             "--worker ", worker, ": use letters, digits, '-' and '_' only (it becomes part of file names)");
  GB_REQUIRE(std::set<std::string>(members.begin(), members.end()).size() == members.size(), "--peers: a name is repeated");
  GB_REQUIRE(shard_count >= 1 && shard_count <= 4096, "--shards ", shard_count, ": must be 1..4096");
  GB_REQUIRE(contribution_timeout_s > 0 && failover_timeout_s > contribution_timeout_s,
             "--failover-timeout must exceed --contribution-timeout (got ", failover_timeout_s, " and ",
             contribution_timeout_s, ")");
  // Note [Partial deltas]: an owner waits a deadline more for a partial Δ, within its window.
  GB_REQUIRE(!partial_deltas || failover_timeout_s > 2 * contribution_timeout_s,
             "--partial-every: --failover-timeout (", failover_timeout_s, ") must exceed twice --contribution-timeout (",
             contribution_timeout_s, "): an owner waits up to a deadline more for a partial delta before it decides");
  GB_REQUIRE(!partial_deltas || boxes_from_agreement,
             "--partial-every: only with overlapped time-boxed DiLoCo rounds (--round-seconds with --overlap-steps)");
  GB_REQUIRE(gc_window >= 2, "--gc-window ", gc_window, ": must be at least 2");
  GB_REQUIRE(deadline_floor_s > 0, "--deadline-floor ", deadline_floor_s, ": must be > 0");
  GB_REQUIRE(deadline_k >= 0, "--deadline-k ", deadline_k, ": must be >= 0");
  GB_REQUIRE(heartbeat_interval_s >= 0 && stale_after_s > heartbeat_interval_s, "--stale-after ", stale_after_s,
             ": must exceed --heartbeat-interval (", heartbeat_interval_s, ")");
  GB_REQUIRE(checkpoint_failover_s > 0, "--checkpoint-failover ", checkpoint_failover_s, ": must be > 0");
  GB_REQUIRE(keep_folder_checkpoints >= 1, "--keep-folder-checkpoints: must be >= 1");
}

}  // namespace gradbox::exchange

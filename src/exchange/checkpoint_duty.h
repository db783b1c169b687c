#pragma once
// The exchange's part in folder checkpoints (Note [Folder checkpoints] in folder_checkpoint.h):
// publishing the local checkpoints this worker is the agreed publisher of (or the next in line,
// after checkpoint_failover_s), pruning, and finding and fetching the newest good one for a
// joiner or a replica that must reload. Torch-free.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "exchange/exchange_context.h"
#include "exchange/folder_checkpoint.h"
#include "exchange/replica_check.h"

namespace gradbox::exchange {

class CheckpointDuty {
 public:
  // Members of the round a step's checkpoint was taken after (nullptr: unknown here).
  using MembersOf = std::function<const std::vector<std::string>*(uint64_t step)>;

  CheckpointDuty(ExchangeContext& context, const ReplicaCheck& replicas, MembersOf members_of);

  void local_checkpoint_written(uint64_t step, const std::filesystem::path& dir, uint64_t tokens,
                                uint64_t parameters_checksum);
  // Once a round (and while waiting): advances a publish, starts one when due, prunes.
  void maintain();
  bool publishing() const;
  // Publishes the local checkpoint of `step` now, whoever's turn it was (the replicas disagree on
  // the run's last step and this one holds the agreed state); false when there is none to publish.
  bool publish_now(uint64_t step);
  // Epoch of such an out-of-turn publish (Note [Folder checkpoints] readers skip a checkpoint
  // whose parameters the replicas disagreed with, whatever its epoch).
  static constexpr uint32_t kContestedEpoch = 99;
  // The newest folder checkpoint not known to be broken or disagreed with; with `wait`, waits
  // for one (until give_up_timeout_s after `since`, on the exchange's clock).
  std::optional<FolderCheckpoint> newest(bool wait, double since);
  // The newest such checkpoint once it holds `round` or later, waiting (publishes advancing)
  // until `wait_s` after `since`; nullopt when none came by then.
  std::optional<FolderCheckpoint> newest_from(uint64_t round, double since, double wait_s);
  // Fetches `wanted` (or, when it turns out broken, the newest older one) into
  // run_dir/checkpoints/step_N, the layout the trainer resumes from.
  std::filesystem::path fetch(FolderCheckpoint wanted, const std::filesystem::path& run_dir, double since);
  // Rounds after the oldest kept checkpoint stay in the folder, so a joiner can replay them.
  std::optional<uint64_t> replay_floor() const { return replay_floor_; }

 private:
  struct LocalCheckpoint {
    uint64_t step = 0;
    std::filesystem::path dir;
    uint64_t tokens = 0;
    uint64_t parameters_checksum = 0;
    double written_s = 0;
    bool settled = false;  // in the folder (by anyone), or not this worker's to publish
  };
  struct FetchProgress {
    std::string dir_rel;  // the checkpoint being fetched
    double started_s = 0;
    double reported_s = 0;
    double first_mb = 0;  // already here when the fetch began
  };
  void start_publish_if_due(const std::vector<FolderCheckpoint>& folder);
  void report_fetch(const FolderCheckpoint& wanted, FetchProgress& progress) const;
  void give_up_check(double since, const std::string& what) const;

  ExchangeContext& context_;
  const ReplicaCheck& replicas_;
  MembersOf members_of_;
  CheckpointPublisher publisher_;
  std::optional<LocalCheckpoint> local_;
  std::optional<uint64_t> publishing_step_;
  std::optional<uint64_t> replay_floor_;
  std::set<std::string> broken_;
  ManifestCache manifests_;  // the folder's manifests, parsed once each
};

}  // namespace gradbox::exchange

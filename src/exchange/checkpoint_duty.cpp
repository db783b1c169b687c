#include "exchange/checkpoint_duty.h"

#include <algorithm>
#include <cstdio>

#include "common/disk_space.h"
#include "common/error.h"

namespace gradbox::exchange {

namespace fs = std::filesystem;

CheckpointDuty::CheckpointDuty(ExchangeContext& context, const ReplicaCheck& replicas, MembersOf members_of)
    : context_(context),
      replicas_(replicas),
      members_of_(std::move(members_of)),
      publisher_(context.mirror, context.clock, context.identity(), context.config.checkpoint_part_bytes) {}

void CheckpointDuty::local_checkpoint_written(uint64_t step, const fs::path& dir, uint64_t tokens,
                                              uint64_t parameters_checksum) {
  local_ = LocalCheckpoint{step, dir, tokens, parameters_checksum, context_.clock.now_s(), false};
  maintain();
}

bool CheckpointDuty::publishing() const { return publisher_.busy(); }

bool CheckpointDuty::publish_now(uint64_t step) {
  std::error_code ec;
  if (!local_ || local_->step != step || !fs::exists(local_->dir / "manifest.json", ec)) return false;
  if (publisher_.busy()) return publishing_step_ == step;  // already on its way
  local_->settled = true;
  context_.log().warn(str("publishing the checkpoint of round ", step, " out of turn: the replicas disagree on it"));
  publisher_.start(local_->dir, step, kContestedEpoch, context_.config.worker, local_->tokens, local_->parameters_checksum);
  publishing_step_ = step;
  return true;
}

// The agreed publisher of step s is V_s[(s + e) mod |V_s|] for epoch e; epoch e starts
// e * checkpoint_failover_s after the step's local checkpoint was written, unless a checkpoint
// of that step (or newer) is in the folder by then.
void CheckpointDuty::start_publish_if_due(const std::vector<FolderCheckpoint>& folder) {
  if (!local_ || local_->settled || publisher_.busy()) return;
  LocalCheckpoint& local = *local_;
  const bool present =
      std::any_of(folder.begin(), folder.end(), [&](const FolderCheckpoint& c) { return c.step >= local.step; });
  const std::vector<std::string>* members = members_of_(local.step);
  const std::string& self = context_.config.worker;
  if (present || !members || std::find(members->begin(), members->end(), self) == members->end()) {
    local.settled = true;
    return;
  }
  const size_t n = members->size();
  const size_t index = static_cast<size_t>(std::find(members->begin(), members->end(), self) - members->begin());
  const uint32_t epoch = static_cast<uint32_t>((index + n - local.step % n) % n);
  const double waited = context_.clock.now_s() - local.written_s;
  if (waited < epoch * context_.config.checkpoint_failover_s) return;
  local.settled = true;
  std::error_code ec;
  if (!fs::exists(local.dir / "manifest.json", ec)) {
    context_.log().warn(str("local checkpoint ", local.dir.string(), " is gone; not publishing step ", local.step));
    return;
  }
  if (epoch > 0) {
    ++context_.stats.checkpoint_failovers;
    context_.log().warn(str("no folder checkpoint of round ", local.step, " after ", waited, " s; ", self,
                            " publishes it as epoch ", epoch));
  }
  publisher_.start(local.dir, local.step, epoch, self, local.tokens, local.parameters_checksum);
  publishing_step_ = local.step;
}

void CheckpointDuty::maintain() {
  try {
    if (publisher_.poll()) {
      ++context_.stats.checkpoints_published;
      context_.log().info(str("folder checkpoint of round ", *publishing_step_, " complete (manifest written)"));
    }
    const std::vector<FolderCheckpoint> folder = list_folder_checkpoints(context_.mirror, context_.identity(), &manifests_);
    start_publish_if_due(folder);
    prune_folder_checkpoints(context_.mirror, folder, context_.config.keep_folder_checkpoints);
    if (!folder.empty())
      replay_floor_ = folder[std::min(folder.size(), context_.config.keep_folder_checkpoints) - 1].step;
  } catch (const std::exception& e) {
    if (is_disk_full(e)) throw;  // Note [A full disk]: retrying in place cannot help
    context_.log().error(str("folder checkpoints: ", e.what()));
  }
}

void CheckpointDuty::give_up_check(double since, const std::string& what) const {
  context_.check_alive();
  GB_CHECK(context_.clock.now_s() - since < context_.config.give_up_timeout_s, what, " after ",
           context_.config.give_up_timeout_s, " s");
}

std::optional<FolderCheckpoint> CheckpointDuty::newest_from(uint64_t round, double since, double wait_s) {
  while (true) {
    maintain();
    const std::optional<FolderCheckpoint> found = newest(/*wait=*/false, since);
    if (found && found->step >= round) return found;
    if (context_.clock.now_s() - since >= wait_s) return std::nullopt;
    context_.check_alive();
    context_.clock.sleep_s(0.05);
  }
}

std::optional<FolderCheckpoint> CheckpointDuty::newest(bool wait, double since) {
  while (true) {
    for (const FolderCheckpoint& c : list_folder_checkpoints(context_.mirror, context_.identity(), &manifests_)) {
      if (broken_.count(c.dir_rel)) continue;
      const std::optional<uint64_t> agreed = replicas_.agreed(c.step);
      if (agreed && *agreed != c.parameters_checksum) {
        context_.log().warn(str(c.dir_rel, " holds parameters the replicas disagreed with; not loading it"));
        broken_.insert(c.dir_rel);
        continue;
      }
      if (replicas_.dissented_by(c.publisher, c.step)) {
        // A replica on the losing side of a split can publish before it learns so: reloading
        // its checkpoint would put this replica back on that side (seed 2362).
        context_.log().warn(str(c.dir_rel, " was published by ", c.publisher,
                                ", whose replica had lost the last fingerprint comparison before it; not loading it"));
        broken_.insert(c.dir_rel);
        continue;
      }
      return c;
    }
    if (!wait) return std::nullopt;
    give_up_check(since, str("no checkpoint of run ", context_.config.run_id, " appeared in the folder"));
    context_.clock.sleep_s(0.05);
  }
}

// A joiner waits minutes for GPT-2-Large's 15 GB: say how far the parts are, every 10 s.
void CheckpointDuty::report_fetch(const FolderCheckpoint& wanted, FetchProgress& progress) const {
  if (wanted.parts == 0) return;
  const double now = context_.clock.now_s();
  const bool first = progress.dir_rel != wanted.dir_rel;
  if (!first && now - progress.reported_s < 10) return;
  size_t here = 0;
  for (const mirror::Arrival& arrival : context_.mirror.list(wanted.dir_rel)) here += arrival.name != kCheckpointManifestName;
  here = std::min(here, wanted.parts);
  const double total_mb = static_cast<double>(wanted.bytes) / 1e6;
  const double done_mb = total_mb * static_cast<double>(here) / static_cast<double>(wanted.parts);
  if (first) {
    progress = FetchProgress{wanted.dir_rel, now, now, done_mb};
    return;
  }
  progress.reported_s = now;
  const double mb_per_s = (done_mb - progress.first_mb) / (now - progress.started_s);
  const std::string eta = mb_per_s > 0 ? str(static_cast<int64_t>((total_mb - done_mb) / mb_per_s), " s") : "unknown";
  context_.log().info(str("fetching ", wanted.dir_rel, ": ", here, "/", wanted.parts, " parts (",
                          static_cast<int64_t>(done_mb), " of ", static_cast<int64_t>(total_mb), " MB), ETA ", eta));
}

fs::path CheckpointDuty::fetch(FolderCheckpoint wanted, const fs::path& run_dir, double since) {
  std::string cleared_for;  // the checkpoint whose target was cleared (the fetch fills it only when whole)
  FetchProgress progress;
  while (true) {
    char name[32];
    std::snprintf(name, sizeof name, "step_%08llu", static_cast<unsigned long long>(wanted.step));
    const fs::path target = run_dir / "checkpoints" / name;
    try {
      if (cleared_for != wanted.dir_rel) {
        std::error_code ec;
        fs::remove_all(target, ec);  // a local copy of the same step may be the diverged state
        cleared_for = wanted.dir_rel;
      }
      if (fetch_folder_checkpoint(context_.mirror, wanted, context_.identity(), target)) return target;
    } catch (const InputError& e) {
      context_.log().error(str("folder checkpoint ", wanted.dir_rel, " is unusable: ", e.what(), "; trying an older one"));
      broken_.insert(wanted.dir_rel);
      wanted = *newest(true, since);
      continue;
    }
    report_fetch(wanted, progress);
    give_up_check(since, str("folder checkpoint ", wanted.dir_rel, " did not arrive"));
    // A newer one appeared, or this one was pruned while its parts were coming: take the newest.
    const std::optional<FolderCheckpoint> now_newest = newest(true, since);
    if (now_newest->dir_rel != wanted.dir_rel) {
      context_.log().info(str("fetching ", now_newest->dir_rel, " instead of ", wanted.dir_rel));
      wanted = *now_newest;
    }
    context_.clock.sleep_s(0.02);
  }
}

}  // namespace gradbox::exchange

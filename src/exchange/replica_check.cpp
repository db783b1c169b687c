#include "exchange/replica_check.h"

#include <algorithm>

#include "common/checksum.h"
#include "common/error.h"
#include "exchange/folder_names.h"

namespace gradbox::exchange {

bool ReplicaCheck::due(uint64_t round) const {
  const int64_t interval = context_.config.fingerprint_interval;
  return interval > 0 && round % static_cast<uint64_t>(interval) == 0;
}

void ReplicaCheck::publish(uint64_t round, const float* params, size_t n, Due when) {
  if (when == Due::on_interval && !due(round)) return;
  const uint64_t checksum = checksum64(params, n * sizeof(float));
  own_[round] = checksum;
  const std::string dir = round_dir_name(round);
  // Once per round and worker: after a restart or a reload the earlier file stands.
  for (const std::string& name : context_.mirror.list_published(dir))
    if (is_fingerprint_name(name)) return;
  wire::FileHeader header = context_.new_header();
  wire::Fingerprint* fp = header.mutable_fingerprint();
  fp->set_round(round);
  fp->set_worker(context_.config.worker);
  fp->set_parameters_checksum(checksum);
  const std::string rel = dir + "/" + fingerprint_name(context_.config.worker, context_.incarnation.token(str("fp/", round)));
  context_.publish(rel, context_.frame(rel, header));
}

bool ReplicaCheck::read_new(uint64_t round, uint64_t own, std::map<std::string, uint64_t>& seen) {
  const size_t before = seen.size();
  const std::string dir = round_dir_name(round);
  for (const mirror::Arrival& file : context_.mirror.list(dir)) {
    if (!is_fingerprint_name(file.name)) continue;
    const std::string rel = dir + "/" + file.name;
    if (!read_.insert(rel).second) continue;
    std::optional<wire::WireFile> wf = context_.read_checked(rel);
    if (!wf || !wf->header.has_fingerprint() || wf->header.fingerprint().round() != round) continue;
    const wire::Fingerprint& fp = wf->header.fingerprint();
    if (fp.worker() == context_.config.worker) continue;  // another session under this name: Heartbeats says so
    ++context_.stats.fingerprints_checked;
    seen[fp.worker()] = fp.parameters_checksum();
    if (fp.parameters_checksum() != own) {
      ++context_.stats.fingerprint_mismatches;
      context_.log().error(str("replica divergence: after round ", round, " ", fp.worker(), " holds parameters ",
                               to_hex64(fp.parameters_checksum()), ", ", context_.config.worker, " holds ", to_hex64(own)));
    }
  }
  return seen.size() != before;
}

bool ReplicaCheck::in_minority(uint64_t current_round) {
  bool minority = false;
  for (auto it = own_.begin(); it != own_.end();) {
    const uint64_t round = it->first;
    std::map<std::string, uint64_t>& seen = peers_[round];
    // Judged again when new fingerprints came, or when this replica holds a new checksum for
    // the round (a replay after a reload): the peers' fingerprints seen before still count.
    const bool fresh = read_new(round, it->second, seen) | (judged_[round] != it->second);
    if (fresh && !seen.empty()) {
      judged_[round] = it->second;
      if (winner(round, it->second, seen) != it->second) {
        context_.log().error(str("after round ", round, " this replica is in the minority; reloading the agreed state"));
        minority = true;
        // A replay from an older checkpoint came out the same: only a checkpoint past this round mends it.
        if (++times_outvoted_[round] >= 2) must_reload_past_ = std::max(must_reload_past_, round);
      }
    }
    if (round + static_cast<uint64_t>(context_.config.gc_window) <= current_round) {
      peers_.erase(round);
      judged_.erase(round);
      it = own_.erase(it);
    } else {
      ++it;
    }
  }
  return minority;
}

ReplicaCheck::Verdict ReplicaCheck::verdict(uint64_t round) {
  Verdict v;
  auto own = own_.find(round);
  if (own == own_.end()) return v;
  std::map<std::string, uint64_t>& seen = peers_[round];
  read_new(round, own->second, seen);
  v.seen = seen;
  v.seen[context_.config.worker] = own->second;
  v.minority = winner(round, own->second, seen) != own->second;
  return v;
}

uint64_t ReplicaCheck::winner(uint64_t round, uint64_t own, const std::map<std::string, uint64_t>& peers) {
  std::map<uint64_t, std::pair<size_t, std::string>> groups;  // checksum -> (size, smallest name)
  auto add = [&](const std::string& worker, uint64_t checksum) {
    auto& g = groups[checksum];
    if (g.first++ == 0 || worker < g.second) g.second = worker;
  };
  add(context_.config.worker, own);
  for (const auto& [worker, checksum] : peers) add(worker, checksum);
  const auto best = std::max_element(groups.begin(), groups.end(), [](const auto& a, const auto& b) {
    return a.second.first != b.second.first ? a.second.first < b.second.first : a.second.second > b.second.second;
  });
  agreed_[round] = best->first;
  while (agreed_.size() > 64) agreed_.erase(agreed_.begin());
  std::map<std::string, bool>& votes = votes_[round];
  votes[context_.config.worker] = own == best->first;
  for (const auto& [worker, checksum] : peers) votes[worker] = checksum == best->first;
  while (votes_.size() > 64) votes_.erase(votes_.begin());
  return best->first;
}

bool ReplicaCheck::dissented_by(const std::string& worker, uint64_t step) const {
  for (auto it = votes_.upper_bound(step); it != votes_.begin();) {
    --it;
    const auto vote = it->second.find(worker);
    if (vote != it->second.end()) return !vote->second;
  }
  return false;
}

std::optional<uint64_t> ReplicaCheck::agreed(uint64_t round) const {
  auto it = agreed_.find(round);
  if (it == agreed_.end()) return std::nullopt;
  return it->second;
}

void ReplicaCheck::forget_own() { own_.clear(); }

}  // namespace gradbox::exchange

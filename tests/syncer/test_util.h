#pragma once
#include <filesystem>
#include <string>
#include <vector>

#include "mirror/sync_contract.h"

namespace gradbox::syncer::testing {

namespace fs = std::filesystem;

// The local names of Note [The syncer contract].
using mirror::kCheckpointPartPrefix;
using mirror::kContributionPrefix;
using mirror::kControlFile;
using mirror::kFlagSuffix;
using mirror::kInboxDir;
using mirror::kOutboxDir;
using mirror::kQuarantineDir;
using mirror::kRequestsDir;
using mirror::kSentSuffix;
using mirror::kSyncerStatsFile;
using mirror::kTempMarker;
std::string flag_of(const std::string& rel);  // rel's inbox flag: rel + kFlagSuffix
std::string sent_of(const std::string& rel);  // rel's outbox marker: rel + kSentSuffix

// An empty directory unique to this process and name, removed when the process ends.
fs::path fresh_dir(const std::string& name);
// A complete framed gradbox file (heartbeat body, run "t") with a random payload.
std::string framed_file(uint64_t seed, size_t payload_size = 300);
void write_bytes(const fs::path& path, const std::string& bytes);  // plain write, makes dirs
// Regular files under dir as relative generic paths, sorted.
std::vector<std::string> files_under(const fs::path& dir);

}  // namespace gradbox::syncer::testing

#pragma once
// The names of the exchange's files in the shared folder, and how to read them back.
//
// Note [Unpredictable names]
// Every file is written once and never overwritten, so whoever writes a name first owns it. A
// name a stranger can predict can therefore be squatted: a copy of an old round's file placed
// under a member's name for a coming round used to block the member's real upload (write-once)
// and hang its peers. So each name a worker writes ends in a token derived from a secret that
// never leaves the process (XXH3 of the secret and the rest of the name): nobody can take a
// name before it is written. Agreements pin the exact file they used (name and payload
// checksum), so every replica reads the same bytes even when a folder holds several candidates.
// (Telling a forged file from a member's own needs a key: issue "signed files".)
// Torch- and protobuf-free.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "exchange/exchange_config.h"

namespace gradbox::exchange {

inline constexpr const char* kRoundsDirPrefix = "rounds/";
std::string round_dir_name(uint64_t round);  // "rounds/r00000012"
std::optional<uint64_t> parse_round_dir(const std::string& name);  // "r00000012" -> 12
// The newest round folder under root/rounds of a plain folder (gradbox status); 0: none.
uint64_t newest_round_folder(const std::filesystem::path& root);

// Files of a round folder (relative to it); `token` from Incarnation::token().
std::string contribution_name(const std::string& worker, uint32_t shard, const std::string& token);
std::string agreement_name(ExchangePattern pattern, uint32_t shard, uint32_t epoch, const std::string& owner,
                           const std::string& token);
std::string fingerprint_name(const std::string& worker, const std::string& token);

// A DiLoCo Δ published mid-round (Note [Partial deltas] in folder_exchange.h): "p-..." where
// a whole contribution is "g-...".
std::string partial_name(const std::string& worker, uint32_t shard, const std::string& token);

// What a contribution's or an agreement's name says; nullopt for anything else.
struct ContributionName {
  std::string worker;
  uint32_t shard = 0;
  bool partial = false;
};
std::optional<ContributionName> parse_contribution_name(const std::string& name);  // "g-" only
std::optional<ContributionName> parse_partial_name(const std::string& name);       // "p-" only
struct AgreementName {
  uint32_t shard = 0;
  uint32_t epoch = 0;
  std::string owner;
};
std::optional<AgreementName> parse_agreement_name(ExchangePattern pattern, const std::string& name);
bool is_fingerprint_name(const std::string& name);

inline constexpr const char* kRunConfigDir = "run";
inline constexpr const char* kMembersDir = "members";
std::string run_config_name(const std::string& worker, const std::string& token);  // "run/config-<worker>-<token>.gbx"
bool is_run_config_name(const std::string& name);  // within kRunConfigDir
// "members/<worker>/hb-<unix ms, 13 digits>-<token>.gbx": names sort by time within a worker.
std::string heartbeat_name(const std::string& worker, int64_t unix_ms, const std::string& token);
bool is_heartbeat_name(const std::string& name);

}  // namespace gradbox::exchange

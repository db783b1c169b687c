#include "exchange/folder_names.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>

#include "common/error.h"

namespace gradbox::exchange {
namespace {

constexpr std::string_view kSuffix = ".gbx";

bool parse_uint(std::string_view text, uint64_t* out) {
  if (text.empty() || text.size() > 19 || text.find_first_not_of("0123456789") != std::string_view::npos) return false;
  *out = std::strtoull(std::string(text).c_str(), nullptr, 10);
  return true;
}

// "<body>-<token>.gbx" -> body, for names this module writes.
std::optional<std::string_view> strip_token(std::string_view name) {
  if (!name.ends_with(kSuffix)) return std::nullopt;
  name.remove_suffix(kSuffix.size());
  const size_t dash = name.rfind('-');
  if (dash == std::string_view::npos || dash + 1 == name.size()) return std::nullopt;
  return name.substr(0, dash);
}

}  // namespace

// "rounds/r%08llu", without printf: the protocol names a round's folder at every poll.
std::string round_dir_name(uint64_t round) {
  char digits[24];
  const size_t n = static_cast<size_t>(std::to_chars(digits, digits + sizeof digits, round).ptr - digits);
  std::string name = "rounds/r";
  if (n < 8) name.append(8 - n, '0');
  name.append(digits, n);
  return name;
}

std::optional<uint64_t> parse_round_dir(const std::string& name) {
  uint64_t round = 0;
  if (name.size() < 2 || name[0] != 'r' || !parse_uint(std::string_view(name).substr(1), &round)) return std::nullopt;
  return round;
}

uint64_t newest_round_folder(const std::filesystem::path& root) {
  uint64_t newest = 0;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(root / "rounds", ec), end; !ec && it != end; it.increment(ec))
    newest = std::max(newest, parse_round_dir(it->path().filename().string()).value_or(0));
  return newest;
}

std::string contribution_name(const std::string& worker, uint32_t shard, const std::string& token) {
  return str("g-", worker, "-s", shard, "-", token, ".gbx");
}

std::string partial_name(const std::string& worker, uint32_t shard, const std::string& token) {
  return str("p-", worker, "-s", shard, "-", token, ".gbx");
}

namespace {
// "<prefix><worker>-s<shard>-<token>.gbx"
std::optional<ContributionName> parse_worker_shard(const std::string& name, std::string_view prefix, bool partial) {
  if (!name.starts_with(prefix)) return std::nullopt;
  std::optional<std::string_view> body = strip_token(std::string_view(name).substr(prefix.size()));
  if (!body) return std::nullopt;
  const size_t s = body->rfind("-s");  // worker names may hold "-s" too: the shard is last
  uint64_t shard = 0;
  if (s == std::string_view::npos || s == 0 || !parse_uint(body->substr(s + 2), &shard) || shard > 4096)
    return std::nullopt;
  return ContributionName{std::string(body->substr(0, s)), static_cast<uint32_t>(shard), partial};
}
}  // namespace

std::optional<ContributionName> parse_contribution_name(const std::string& name) {
  return parse_worker_shard(name, "g-", false);
}

std::optional<ContributionName> parse_partial_name(const std::string& name) {
  return parse_worker_shard(name, "p-", true);
}

std::string agreement_name(ExchangePattern pattern, uint32_t shard, uint32_t epoch, const std::string& owner,
                           const std::string& token) {
  return str(pattern == ExchangePattern::sharded ? "r-s" : "c-s", shard, "-e", epoch, "-", owner, "-", token, ".gbx");
}

std::optional<AgreementName> parse_agreement_name(ExchangePattern pattern, const std::string& name) {
  const std::string_view prefix = pattern == ExchangePattern::sharded ? "r-s" : "c-s";
  if (!name.starts_with(prefix)) return std::nullopt;
  std::optional<std::string_view> body = strip_token(std::string_view(name).substr(prefix.size()));
  if (!body) return std::nullopt;
  const size_t e = body->find("-e");
  if (e == std::string_view::npos) return std::nullopt;
  const size_t owner_dash = body->find('-', e + 2);
  uint64_t shard = 0, epoch = 0;
  if (owner_dash == std::string_view::npos || !parse_uint(body->substr(0, e), &shard) ||
      !parse_uint(body->substr(e + 2, owner_dash - e - 2), &epoch) || shard > 4096 || epoch > 1u << 20 ||
      owner_dash + 1 == body->size())
    return std::nullopt;
  return AgreementName{static_cast<uint32_t>(shard), static_cast<uint32_t>(epoch),
                       std::string(body->substr(owner_dash + 1))};
}

std::string fingerprint_name(const std::string& worker, const std::string& token) {
  return str("fp-", worker, "-", token, ".gbx");
}

bool is_fingerprint_name(const std::string& name) { return name.starts_with("fp-") && name.ends_with(kSuffix); }

std::string run_config_name(const std::string& worker, const std::string& token) {
  return str(kRunConfigDir, "/config-", worker, "-", token, ".gbx");
}

bool is_run_config_name(const std::string& name) { return name.starts_with("config-") && name.ends_with(kSuffix); }

std::string heartbeat_name(const std::string& worker, int64_t unix_ms, const std::string& token) {
  char ms[24];
  std::snprintf(ms, sizeof ms, "%013lld", static_cast<long long>(unix_ms));
  return str(kMembersDir, "/", worker, "/hb-", ms, "-", token, ".gbx");
}

bool is_heartbeat_name(const std::string& name) { return name.starts_with("hb-") && name.ends_with(kSuffix); }

}  // namespace gradbox::exchange

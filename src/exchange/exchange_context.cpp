#include "exchange/exchange_context.h"

#include <algorithm>
#include <iterator>
#include <random>

#include "common/atomic_file.h"
#include "common/checksum.h"
#include "common/error.h"
#include "exchange/folder_names.h"

namespace gradbox::exchange {

nlohmann::json ExchangeStats::to_json() const {
  return {{"rounds", rounds},
          {"skipped_rounds", skipped_rounds},
          {"bytes_written", bytes_written},
          {"bytes_read", bytes_read},
          {"round_bytes_written", round_bytes_written},
          {"round_bytes_read", round_bytes_read},
          {"agreements_published", agreements_published},
          {"failovers", failovers},
          {"late_agreements_seen", late_agreements_seen},
          {"rejected_files", rejected_files},
          {"unsigned_or_forged_files", unsigned_or_forged_files},
          {"upload_cap_warnings", upload_cap_warnings},
          {"upload_cap_slowdowns", upload_cap_slowdowns},
          {"contributions_left_out", contributions_left_out},
          {"contributions_refused", contributions_refused},
          {"contributions_decoded", contributions_decoded},
          {"commits_summed_ahead", commits_summed_ahead},
          {"fingerprints_checked", fingerprints_checked},
          {"fingerprint_mismatches", fingerprint_mismatches},
          {"config_mismatches", config_mismatches},
          {"followed_rounds", followed_rounds},
          {"members_added", members_added},
          {"members_dropped", members_dropped},
          {"self_elections", self_elections},
          {"resyncs", resyncs},
          {"checkpoints_published", checkpoints_published},
          {"checkpoint_failovers", checkpoint_failovers},
          {"control_changes", control_changes},
          {"blind_waits", blind_waits},
          {"agreements_withdrawn", agreements_withdrawn},
          {"partials_published", partials_published},
          {"partials_salvaged", partials_salvaged},
          {"contribution_deadline_s", contribution_deadline_s},
          {"wait_seconds", wait_seconds},
          {"rejected", rejected}};
}

nlohmann::json earlier_lives(const std::filesystem::path& stats_file, const std::string& worker) {
  std::error_code ec;
  if (!std::filesystem::exists(stats_file, ec)) return nlohmann::json::object();
  const nlohmann::json previous_stats = nlohmann::json::parse(read_file(stats_file), nullptr, /*allow_exceptions=*/false);
  if (!previous_stats.is_object() || previous_stats.value("worker", std::string()) != worker) return nlohmann::json::object();
  if (previous_stats.contains("all_lives") && previous_stats["all_lives"].is_object()) return previous_stats["all_lives"];
  return all_lives(nlohmann::json::object(), previous_stats);  // written by a gradbox before all_lives
}

nlohmann::json all_lives(const nlohmann::json& earlier, const nlohmann::json& this_life) {
  nlohmann::json sum = earlier.is_object() ? earlier : nlohmann::json::object();
  for (const auto& [key, value] : this_life.items()) {
    // A state, not a count: the round reached, the deadline now.
    if (key == "round" || key == "contribution_deadline_s" || key == "lives") continue;
    if (value.is_number_unsigned()) {
      const nlohmann::json& before = sum.contains(key) ? sum[key] : nlohmann::json(0u);
      sum[key] = (before.is_number_unsigned() ? before.get<uint64_t>() : 0u) + value.get<uint64_t>();
    } else if (value.is_number()) {
      const nlohmann::json& before = sum.contains(key) ? sum[key] : nlohmann::json(0.0);
      sum[key] = (before.is_number() ? before.get<double>() : 0.0) + value.get<double>();
    } else if (key == "rejected" && value.is_array()) {
      nlohmann::json reasons = sum.contains(key) && sum[key].is_array() ? sum[key] : nlohmann::json::array();
      for (const auto& reason : value) reasons.push_back(reason);
      while (reasons.size() > 100) reasons.erase(reasons.begin());
      sum[key] = std::move(reasons);
    }
  }
  sum["lives"] = (earlier.is_object() && earlier.contains("lives") && earlier["lives"].is_number_unsigned()
                      ? earlier["lives"].get<uint64_t>() : 0u) + 1u;
  return sum;
}

Incarnation::Incarnation(uint64_t seed, int64_t started_unix_ms) : started_unix_ms_(started_unix_ms) {
  if (seed == 0) {
    std::random_device device;
    seed = (static_cast<uint64_t>(device()) << 32) ^ device();
  }
  std::mt19937_64 rng(seed);
  secret_ = rng();
  id_ = rng();
}

std::string Incarnation::token(const std::string& what) const {
  const std::string keyed = str(secret_, "/", what);
  return to_hex64(checksum64(keyed.data(), keyed.size()));
}

std::string BufferPool::take(size_t bytes) {
  std::string buffer;
  if (!spare_.empty()) {
    auto fit = std::find_if(spare_.begin(), spare_.end(), [bytes](const std::string& b) { return b.capacity() >= bytes; });
    if (fit == spare_.end()) fit = std::prev(spare_.end());
    buffer = std::move(*fit);
    spare_.erase(fit);
  }
  // Too small: grow it now, with room for the next rounds' files of about this size (they
  // vary by a few percent), rather than by doubling mid-write.
  if (bytes != SIZE_MAX && buffer.capacity() < bytes) buffer.reserve(bytes + bytes / 8);
  return buffer;
}

void BufferPool::give(std::string&& buffer) {
  if (buffer.capacity() < kWorthKeeping) return;
  buffer.clear();
  const auto at = std::upper_bound(spare_.begin(), spare_.end(), buffer.capacity(),
                                   [](size_t capacity, const std::string& b) { return capacity < b.capacity(); });
  spare_.insert(at, std::move(buffer));
  if (spare_.size() > kKept) spare_.erase(spare_.begin());
}

ExchangeContext::ExchangeContext(FolderExchangeConfig c, mirror::Mirror& m, mirror::Clock& clk)
    : config(std::move(c)),
      mirror(m),
      clock(clk),
      incarnation(config.incarnation_seed, clk.unix_ms()),
      logger_("exchange " + config.worker) {}

wire::FileHeader ExchangeContext::new_header() {
  wire::FileHeader header;
  header.set_run_id(config.run_id);
  header.set_model_fingerprint(config.model_fingerprint);
  header.set_created_unix_ms(clock.unix_ms());
  return header;
}

std::string ExchangeContext::frame(const std::string& rel, wire::FileHeader header, std::string_view payload) const {
  return wire::frame(std::move(header), payload, key(rel));
}

wire::FramedPieces ExchangeContext::frame_pieces(const std::string& rel, wire::FileHeader header,
                                                std::string_view payload) const {
  return wire::frame_pieces(std::move(header), payload, key(rel));
}

void ExchangeContext::publish(const std::string& rel, const std::string& bytes) {
  mirror.publish(rel, bytes);
  count_published(rel, bytes.size());
}

void ExchangeContext::publish(const std::string& rel, const wire::FramedPieces& framed) {
  const std::array<std::string_view, 3> pieces = framed.pieces();
  mirror.publish_pieces(rel, pieces);
  count_published(rel, framed.size());
}

void ExchangeContext::count_published(const std::string& rel, uint64_t size) {
  stats.bytes_written += size;
  if (rel.starts_with(kRoundsDirPrefix)) stats.round_bytes_written += size;
  uploads_.emplace_back(clock.unix_ms(), config.nominal_upload_bytes ? config.nominal_upload_bytes(rel, size) : size);
  if (!first_upload_ms_) first_upload_ms_ = uploads_.back().first;
  check_upload_cap();
}

// One warning as the last day's uploads pass kUploadWarnFraction of the cap, one error at the
// cap, each again only after the uploads fell well below it.
void ExchangeContext::check_upload_cap() {
  const double cap = static_cast<double>(config.upload_cap_bytes);
  if (cap <= 0) return;
  const double used = static_cast<double>(bytes_published_last_day()) / cap;
  const int level = used >= 1.0 ? 2 : used >= kUploadWarnFraction ? 1 : 0;
  if (level > upload_warning_level_) {
    ++stats.upload_cap_warnings;
    const std::string what = str("uploaded ", static_cast<double>(bytes_published_last_day()) / 1e9, " GB in the last 24 h, ",
                                 static_cast<int>(100 * used), "% of --upload-cap-gb ", cap / 1e9);
    if (level == 2) log().error(what + ": Drive refuses this account's uploads past its daily cap; use a slower "
                                       "rate (longer DiLoCo rounds, a smaller codec) or another account");
    else log().warn(what + ": `gradbox status` says when it reaches the cap at this rate");
  }
  if (level > upload_warning_level_ || used < kUploadWarnFraction - 0.1) upload_warning_level_ = level;
}

std::optional<double> ExchangeContext::upload_pace_bytes_per_day() {
  if (!first_upload_ms_) return std::nullopt;
  const int64_t now = clock.unix_ms();
  const double window_s = std::min(kUploadPaceWindowS, static_cast<double>(now - *first_upload_ms_) / 1000);
  if (window_s < kUploadPaceMinS) return std::nullopt;
  bytes_published_last_day();  // drops what is older than a day
  uint64_t bytes = 0;
  for (auto it = uploads_.rbegin(); it != uploads_.rend() && now - it->first <= window_s * 1000; ++it) bytes += it->second;
  return static_cast<double>(bytes) / window_s * 86400;
}

uint64_t ExchangeContext::bytes_published_last_day() {
  const int64_t now = clock.unix_ms();
  while (!uploads_.empty() && now - uploads_.front().first > 24ll * 3600 * 1000) uploads_.pop_front();
  uint64_t total = 0;
  for (const auto& [when, bytes] : uploads_) total += bytes;
  return total;
}

std::optional<wire::WireFile> ExchangeContext::read_checked(const std::string& rel, Side side) {
  if (rejected(rel)) return std::nullopt;
  std::string bytes = buffers.take();
  const bool found = (side == Side::own_first && mirror.read_published_into(rel, bytes)) || mirror.read_into(rel, bytes);
  if (!found) {  // gone meanwhile (garbage-collected): not an error
    buffers.give(std::move(bytes));
    return std::nullopt;
  }
  try {
    const size_t size = bytes.size();
    wire::WireFile file = wire::parse(std::move(bytes), mirror.where(rel), key(rel));
    wire::check_identity(file.header, config.run_id, config.model_fingerprint, mirror.where(rel));
    stats.bytes_read += size;
    if (rel.starts_with(kRoundsDirPrefix)) count_round_read(rel, size);
    return file;
  } catch (const std::exception& e) {
    buffers.give(std::move(bytes));  // parse takes the bytes over only when they check out
    if (dynamic_cast<const wire::SignatureError*>(&e) && !rejected(rel)) ++stats.unsigned_or_forged_files;
    reject(rel, e.what());
    return std::nullopt;
  }
}

void ExchangeContext::count_round_read(const std::string& rel, size_t bytes) {
  const std::string folder = rel.substr(0, rel.find('/', std::string(kRoundsDirPrefix).size()));
  if (!round_reads_[folder].insert(rel).second) return;
  stats.round_bytes_read += bytes;
  while (round_reads_.size() > kRoundsCounted) round_reads_.erase(round_reads_.begin());  // names sort by round
}

void ExchangeContext::reject(const std::string& rel, const std::string& reason) {
  if (!rejected_.insert(rel).second) return;  // logged once
  ++stats.rejected_files;
  if (stats.rejected.size() < 100) stats.rejected.push_back(reason);
  log().error(str("rejected ", rel, ": ", reason));
}

uint64_t ExchangeContext::listings() {
  const double now = clock.now_s();
  if (now - listings_read_at_ >= 0.2) {
    const uint64_t passes = mirror.settled_passes();
    if (passes != listings_) {
      // The first listing after a blind spell. A spell needs a look that found nothing new:
      // a worker that looks less often than kListingStallS (a slow poll, minutes between
      // DiLoCo's inner steps) and finds new listings each time was never blind.
      if (looked_without_growth_ && now - listings_grew_at_ > kListingStallS) seen_since_s_ = now;
      listings_grew_at_ = now;
      looked_without_growth_ = false;
    } else {
      looked_without_growth_ = true;
    }
    listings_ = passes;
    listings_read_at_ = now;
  }
  return listings_;
}

double ExchangeContext::seen_since_s() {
  if (seconds_since_new_listing() > kListingStallS) return clock.now_s();  // blind now
  return seen_since_s_;
}

double ExchangeContext::seconds_since_new_listing() {
  listings();
  return clock.now_s() - listings_grew_at_;
}

}  // namespace gradbox::exchange

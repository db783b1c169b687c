#include "exchange/folder_exchange.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/atomic_file.h"
#include "common/checksum.h"
#include "common/error.h"
#include "common/log.h"
#include "wire/envelope.h"

namespace gradbox::exchange {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

const log::Logger& logger() {
  static const log::Logger instance("exchange");
  return instance;
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

int64_t unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

wire::CodecSpec codec_spec(const codec::CodecOptions& opt) {
  wire::CodecSpec spec;
  spec.set_codec(codec::codec_name(opt.codec));
  spec.set_zstd_level(opt.zstd_level);
  spec.set_shuffle(opt.shuffle);
  spec.set_int8_block(opt.int8_block);
  return spec;
}

// Decoding options come from the file, bounded by what this run accepts: a file may not pick
// its own codec behind the run's back.
codec::CodecOptions decode_options(const wire::CodecSpec& spec, const codec::CodecOptions& run, const std::string& origin) {
  if (spec.codec() != codec::codec_name(run.codec) || spec.shuffle() != run.shuffle ||
      spec.int8_block() != run.int8_block) {
    throw wire::WireError(str(origin, ": encoded as ", spec.codec(), " (shuffle ", spec.shuffle(), ", block ",
                              spec.int8_block(), "), but this run uses ", codec::codec_name(run.codec)));
  }
  codec::CodecOptions opt = run;
  opt.threads = run.threads;
  return opt;
}

struct Range {
  size_t begin = 0;
  size_t end = 0;
  size_t size() const { return end - begin; }
};

Range shard_range(size_t n, uint32_t shards, uint32_t k) {
  return Range{n * k / shards, n * (k + 1) / shards};
}

// What an agreement says about one contributor.
struct Contributor {
  std::string worker;
  uint64_t tokens = 0;
  double loss = 0;
  bool overflow = false;
  uint64_t checksum = 0;
};

struct ShardOutcome {
  bool done = false;
  bool skip = false;
  std::vector<Contributor> contributors;
};

struct Stats {
  uint64_t rounds = 0;
  uint64_t skipped_rounds = 0;
  uint64_t bytes_written = 0;
  uint64_t bytes_read = 0;
  uint64_t agreements_published = 0;
  uint64_t failovers = 0;
  uint64_t late_agreements_seen = 0;  // a higher epoch won over this replica's view: logged
  uint64_t rejected_files = 0;
  uint64_t contributions_left_out = 0;
  uint64_t fingerprints_checked = 0;
  uint64_t fingerprint_mismatches = 0;
  uint64_t config_mismatches = 0;
  double wait_seconds = 0;
  std::vector<std::string> rejected;

  nlohmann::json to_json() const {
    return {{"rounds", rounds},
            {"skipped_rounds", skipped_rounds},
            {"bytes_written", bytes_written},
            {"bytes_read", bytes_read},
            {"agreements_published", agreements_published},
            {"failovers", failovers},
            {"late_agreements_seen", late_agreements_seen},
            {"rejected_files", rejected_files},
            {"contributions_left_out", contributions_left_out},
            {"fingerprints_checked", fingerprints_checked},
            {"fingerprint_mismatches", fingerprint_mismatches},
            {"config_mismatches", config_mismatches},
            {"wait_seconds", wait_seconds},
            {"rejected", rejected}};
  }
};

class FolderExchange final : public GradientExchange {
 public:
  explicit FolderExchange(FolderExchangeConfig config) : config_(std::move(config)) {
    std::sort(config_.members.begin(), config_.members.end());
    if (config_.shard_count == 0)
      config_.shard_count = config_.pattern == ExchangePattern::sharded ? static_cast<uint32_t>(config_.members.size()) : 1;
    config_.validate();
    for (uint32_t k = 0; k < config_.shard_count; ++k) encoders_.emplace_back(config_.codec);
    fs::create_directories(config_.local_dir / "outbox");
    fs::create_directories(config_.local_dir / "inbox");
    fs::create_directories(config_.local_dir / "exchange");
    publish_run_config();
  }

  std::string describe() const override {
    return str(pattern_name(config_.pattern), " over ", config_.members.size(), " workers, ", config_.shard_count,
               " shard(s), ", codec::codec_name(config_.codec.codec), "+zstd");
  }

  RoundResult all_reduce(uint64_t round, float* grad, size_t n, const LocalContribution& mine) override {
    const auto start = Clock::now();
    if (rounds_done_ == 0) first_round_start_ = start;
    round_ = round;
    n_ = n;
    shards_.assign(config_.shard_count, ShardOutcome{});
    own_payloads_.assign(config_.shard_count, std::string());
    own_checksums_.assign(config_.shard_count, 0);
    mine_ = mine;
    rejected_this_round_.clear();
    own_agreements_.clear();
    check_peer_configs(rounds_done_ == 0);
    publish_contributions(grad, mine);
    const auto contributed = Clock::now();

    size_t pending = config_.shard_count;
    double next_alive_check = 1.0;
    while (pending > 0) {
      const double elapsed = seconds_since(contributed);
      const std::set<std::string> visible = visible_files();
      for (uint32_t k = 0; k < config_.shard_count; ++k) {
        if (shards_[k].done) continue;
        if (try_apply_agreement(k, visible, grad)) {
          --pending;
          continue;
        }
        // One agreement is enough: never publish a competing one once any is visible.
        if (agreements(k, visible).empty()) maybe_publish_agreement(k, visible, elapsed, grad);
        if (shards_[k].done) --pending;
      }
      if (pending == 0) break;
      if (config_.check_alive && elapsed >= next_alive_check) {
        config_.check_alive();
        next_alive_check = elapsed + 1.0;
      }
      if (elapsed > config_.give_up_timeout_s) {
        throw std::runtime_error(str("round ", round, ": no usable agreement for ", pending, " shard(s) after ",
                                     config_.give_up_timeout_s, " s (folder ", inbox_dir().string(), ")"));
      }
      std::this_thread::sleep_for(std::chrono::duration<double>(config_.poll_interval_s));
    }

    RoundResult result;
    result.wait_seconds = seconds_since(start);
    double loss_sum = 0;
    for (const ShardOutcome& shard : shards_) result.skip = result.skip || shard.skip;
    for (const Contributor& c : shards_[0].contributors) {
      result.tokens += c.tokens;
      loss_sum += c.loss * static_cast<double>(c.tokens);
    }
    result.contributors = static_cast<int>(shards_[0].contributors.size());
    result.loss = result.tokens > 0 ? loss_sum / static_cast<double>(result.tokens) : mine.loss;
    ++stats_.rounds;
    ++rounds_done_;
    if (result.skip) ++stats_.skipped_rounds;
    stats_.wait_seconds += result.wait_seconds;
    check_fingerprints();
    collect_garbage(round);
    applied_tokens_ += result.tokens;
    last_loss_ = result.loss;
    if (Clock::now() - last_heartbeat_ >= std::chrono::duration<double>(config_.heartbeat_interval_s))
      publish_heartbeat("live");
    write_stats();
    return result;
  }

  void leave() override {
    if (!left_) publish_heartbeat("left");
    left_ = true;
  }

  void after_update(uint64_t round, const float* params, size_t n) override {
    if (config_.fingerprint_interval <= 0 || round % config_.fingerprint_interval != 0) return;
    wire::FileHeader header = new_header();
    wire::Fingerprint* fp = header.mutable_fingerprint();
    fp->set_round(round);
    fp->set_worker(config_.worker);
    fp->set_parameters_checksum(checksum64(params, n * sizeof(float)));
    own_fingerprints_[round] = fp->parameters_checksum();
    publish(round_dir_name(round) + "/" + fingerprint_name(config_.worker), wire::frame(header, {}));
  }

 private:
  fs::path inbox_dir() const { return config_.local_dir / "inbox" / round_dir_name(round_); }

  wire::RunConfig run_config() const {
    wire::RunConfig rc;
    rc.set_model_config_json(config_.model_config_json);
    rc.set_train_config_json(config_.train_config_json);
    rc.set_pattern(pattern_name(config_.pattern));
    rc.set_shard_count(config_.shard_count);
    *rc.mutable_codec() = codec_spec(config_.codec);
    return rc;
  }

  void publish_run_config() {
    wire::FileHeader header = new_header();
    *header.mutable_run_config() = run_config();
    publish(run_config_name(config_.worker), wire::frame(header, {}));
  }

  // Peers' RunConfigs that arrived since the last round. On this worker's first round a
  // mismatch is a user error (it joined the wrong run); later, the stranger is left out.
  void check_peer_configs(bool first_round) {
    const fs::path dir = config_.local_dir / "inbox" / "run";
    const wire::RunConfig mine = run_config();
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string name = it->path().filename().string();
      if (!name.starts_with("config-") || !name.ends_with(".gbx.flag")) continue;
      const fs::path file = dir / name.substr(0, name.size() - 5);
      if (!checked_configs_.insert(file.string()).second) continue;
      std::string problem;
      const std::string peer = name.substr(7, name.size() - 7 - 9);  // config-<peer>.gbx.flag
      try {
        wire::WireFile wf = wire::read_wire_file(file);
        wire::check_identity(wf.header, config_.run_id, config_.model_fingerprint, file.string());
        const wire::RunConfig& theirs = wf.header.run_config();
        if (theirs.pattern() != mine.pattern()) problem = str("--exchange ", theirs.pattern(), " (this worker: ", mine.pattern(), ")");
        else if (theirs.shard_count() != mine.shard_count()) problem = str("--shards ", theirs.shard_count(), " (this worker: ", mine.shard_count(), ")");
        else if (theirs.codec().SerializeAsString() != mine.codec().SerializeAsString())
          problem = str("--codec ", theirs.codec().codec(), " level ", theirs.codec().zstd_level(), " (this worker: ",
                        mine.codec().codec(), " level ", mine.codec().zstd_level(), ")");
        if (!problem.empty()) problem = str(file.string(), ": a peer of this run uses ", problem);
      } catch (const std::exception& e) {
        problem = e.what();  // another run or model; names the file
      }
      if (problem.empty()) continue;
      ++stats_.config_mismatches;
      refused_workers_.insert(peer);
      const std::string& message = problem;
      if (first_round) throw InputError(message + "; start every worker with the same model and exchange settings");
      logger().error(message + "; its files are left out");
    }
  }

  wire::FileHeader new_header() const {
    wire::FileHeader header;
    header.set_run_id(config_.run_id);
    header.set_model_fingerprint(config_.model_fingerprint);
    header.set_created_unix_ms(unix_ms());
    return header;
  }

  const std::string& owner(uint32_t shard, uint32_t epoch) const {
    return config_.members[(shard + round_ + epoch) % config_.members.size()];
  }

  void publish(const std::string& rel, const std::string& bytes) {
    const fs::path path = config_.local_dir / "outbox" / rel;
    fs::create_directories(path.parent_path());
    write_file_atomic(path, bytes);
    stats_.bytes_written += bytes.size();
    uploads_.emplace_back(std::chrono::system_clock::now(), bytes.size());
  }

  // Liveness and progress for the peers and `gradbox status`. Written once under a new name;
  // the previous one is dropped from the outbox, so the syncer deletes it from the folder.
  void publish_heartbeat(const std::string& state) {
    const auto now_wall = std::chrono::system_clock::now();
    while (!uploads_.empty() && now_wall - uploads_.front().first > std::chrono::hours(24)) uploads_.pop_front();
    uint64_t day_bytes = 0;
    for (const auto& [when, bytes] : uploads_) day_bytes += bytes;
    const auto now = Clock::now();
    // Cluster tokens per second since this worker's first round (steady, unlike a per-beat rate).
    const double seconds = rounds_done_ > 0 ? std::chrono::duration<double>(now - first_round_start_).count() : 0.0;
    wire::FileHeader header = new_header();
    wire::Heartbeat* hb = header.mutable_heartbeat();
    hb->set_worker(config_.worker);
    const int64_t sequence = std::max<int64_t>(header.created_unix_ms(), last_heartbeat_sequence_ + 1);
    hb->set_sequence(static_cast<uint64_t>(sequence));
    hb->set_applied_round(round_);
    hb->set_state(state);
    hb->set_tokens_per_second(seconds > 0 ? static_cast<double>(applied_tokens_) / seconds : 0.0);
    hb->set_last_loss(last_loss_);
    hb->set_bytes_uploaded(stats_.bytes_written);
    hb->set_bytes_uploaded_24h(day_bytes);
    hb->set_tokens(applied_tokens_);
    const std::string name = heartbeat_name(config_.worker, sequence);
    publish(name, wire::frame(header, {}));
    if (!last_heartbeat_name_.empty()) {
      std::error_code ec;
      fs::remove(config_.local_dir / "outbox" / last_heartbeat_name_, ec);
    }
    last_heartbeat_name_ = name;
    last_heartbeat_sequence_ = sequence;
    last_heartbeat_ = now;
  }

  // A GradientShard body for shard k of this round, written by this worker.
  wire::GradientShard* new_shard(wire::FileHeader& header, uint32_t k) const {
    const Range range = shard_range(n_, config_.shard_count, k);
    wire::GradientShard* g = header.mutable_gradient();
    g->set_round(round_);
    g->set_worker(config_.worker);
    g->set_shard_index(k);
    g->set_shard_count(config_.shard_count);
    g->set_begin(range.begin);
    g->set_end(range.end);
    *g->mutable_codec() = codec_spec(config_.codec);
    return g;
  }

  void publish_contributions(const float* grad, const LocalContribution& mine) {
    for (uint32_t k = 0; k < config_.shard_count; ++k) {
      const Range range = shard_range(n_, config_.shard_count, k);
      wire::FileHeader header = new_header();
      wire::GradientShard* g = new_shard(header, k);
      g->set_tokens(mine.tokens);
      g->set_loss(mine.loss);
      g->set_overflow(mine.overflow);
      std::string payload;
      if (!mine.overflow) {
        // Error feedback only where the codec loses something (it costs a full decode).
        std::vector<uint8_t> encoded = config_.codec.codec == codec::Codec::fp32
                                           ? codec::encode(grad + range.begin, range.size(), config_.codec)
                                           : encoders_[k].encode(grad + range.begin, range.size());
        payload.assign(reinterpret_cast<const char*>(encoded.data()), encoded.size());
      }
      own_checksums_[k] = checksum64(payload.data(), payload.size());
      publish(round_dir_name(round_) + "/" + contribution_name(config_.worker, k), wire::frame(header, payload));
      own_payloads_[k] = std::move(payload);
    }
  }

  // Flagged files of this round in the inbox (names relative to the round folder).
  std::set<std::string> visible_files() const {
    std::set<std::string> names;
    std::error_code ec;
    for (fs::directory_iterator it(inbox_dir(), ec), end; !ec && it != end; it.increment(ec)) {
      const std::string name = it->path().filename().string();
      if (name.ends_with(".flag")) names.insert(name.substr(0, name.size() - 5));
    }
    for (const auto& [name, bytes] : own_agreements_) names.insert(name);
    return names;
  }

  // Reads and validates a peer file of this round; nullopt (logged, counted) when it must not be used.
  std::optional<wire::WireFile> read_peer(const std::string& name) {
    if (rejected_this_round_.count(name)) return std::nullopt;
    const fs::path path = inbox_dir() / name;
    try {
      wire::WireFile file = wire::read_wire_file(path);
      wire::check_identity(file.header, config_.run_id, config_.model_fingerprint, path.string());
      stats_.bytes_read += file.payload.size();
      return file;
    } catch (const std::exception& e) {
      reject(name, e.what());
      return std::nullopt;
    }
  }

  void reject(const std::string& name, const std::string& reason) {
    rejected_this_round_.insert(name);
    ++stats_.rejected_files;
    if (stats_.rejected.size() < 100) stats_.rejected.push_back(reason);
    logger().error(str("rejected ", name, ": ", reason));
  }

  // The lowest-epoch agreement for shard k; nullopt when none is usable yet.
  struct Agreement {
    uint32_t epoch = 0;
    std::string name;
  };
  std::vector<Agreement> agreements(uint32_t k, const std::set<std::string>& visible) const {
    const std::string prefix = str(config_.pattern == ExchangePattern::sharded ? "r-s" : "c-s", k, "-e");
    std::vector<Agreement> found;
    for (auto it = visible.lower_bound(prefix); it != visible.end() && it->starts_with(prefix); ++it) {
      unsigned epoch = 0;
      if (std::sscanf(it->c_str() + prefix.size(), "%u", &epoch) == 1) found.push_back({epoch, *it});
    }
    std::sort(found.begin(), found.end(), [](const Agreement& a, const Agreement& b) { return a.epoch < b.epoch; });
    return found;
  }

  bool try_apply_agreement(uint32_t k, const std::set<std::string>& visible, float* grad) {
    for (const Agreement& agreement : agreements(k, visible)) {
      if (rejected_this_round_.count(agreement.name)) continue;
      std::optional<wire::WireFile> file = load_agreement(agreement.name);
      if (!file) continue;
      const bool applied = config_.pattern == ExchangePattern::sharded ? apply_reduced(k, *file, agreement.name, grad)
                                                                       : apply_commit(k, *file, agreement.name, visible, grad);
      if (!applied) return false;  // waiting for contributions the agreement names
      if (agreement.epoch > 0) {
        ++stats_.late_agreements_seen;
        logger().warn(str("round ", round_, " shard ", k, ": applied failover agreement ", agreement.name));
      }
      shards_[k].done = true;
      return true;
    }
    return false;
  }

  std::optional<wire::WireFile> load_agreement(const std::string& name) {
    auto own = own_agreements_.find(name);
    if (own != own_agreements_.end()) return wire::parse(own->second, "own " + name);
    return read_peer(name);
  }

  std::vector<Contributor> contributors_of(const google::protobuf::RepeatedPtrField<wire::Contribution>& list) const {
    std::vector<Contributor> out;
    for (const wire::Contribution& c : list)
      out.push_back({c.worker(), c.tokens(), c.loss(), c.overflow(), c.payload_checksum()});
    std::sort(out.begin(), out.end(), [](const Contributor& a, const Contributor& b) { return a.worker < b.worker; });
    return out;
  }

  bool valid_agreement_shape(uint64_t round, uint32_t shard, uint32_t count, uint32_t k, const std::string& name) {
    if (round == round_ && shard == k && count == config_.shard_count) return true;
    reject(name, str(inbox_dir().string(), "/", name, ": describes round ", round, " shard ", shard, "/", count,
                     ", expected round ", round_, " shard ", k, "/", config_.shard_count));
    return false;
  }

  // All-gather: sum exactly the contributions the commit names, in worker order.
  bool apply_commit(uint32_t k, const wire::WireFile& file, const std::string& name, const std::set<std::string>& visible,
                    float* grad) {
    if (!file.header.has_commit()) {
      reject(name, "not a round commit");
      return false;
    }
    const wire::RoundCommit& commit = file.header.commit();
    if (!valid_agreement_shape(commit.round(), commit.shard_index(), commit.shard_count(), k, name)) return false;
    std::vector<Contributor> contributors = contributors_of(commit.contributors());
    for (const Contributor& c : contributors)
      if (c.worker != config_.worker && !visible.count(contribution_name(c.worker, k))) return false;
    const Range range = shard_range(n_, config_.shard_count, k);
    ShardOutcome& shard = shards_[k];
    shard.contributors = contributors;
    shard.skip = std::any_of(contributors.begin(), contributors.end(), [](const Contributor& c) { return c.overflow; });
    if (shard.skip) return true;
    uint64_t total = 0;
    for (const Contributor& c : contributors) total += c.tokens;
    std::vector<float> sum(range.size(), 0.0f);
    for (const Contributor& c : contributors) {
      const float weight = contribution_weight(c.tokens, total);
      if (c.worker == config_.worker) {
        GB_CHECK(c.checksum == own_checksums_[k], "commit ", name, " pins another contribution of ", config_.worker);
        accumulate(own_payloads_[k], weight, sum);
        continue;
      }
      const std::string part = contribution_name(c.worker, k);
      std::optional<wire::WireFile> contribution = read_peer(part);
      if (!contribution) return false;
      if (checksum64(contribution->payload.data(), contribution->payload.size()) != c.checksum) {
        reject(part, str(part, ": is not the contribution commit ", name, " names (checksum differs)"));
        return false;
      }
      codec::CodecOptions opt = decode_options(contribution->header.gradient().codec(), config_.codec, part);
      codec::decode_accumulate(reinterpret_cast<const uint8_t*>(contribution->payload.data()),
                               contribution->payload.size(), opt, weight, sum.data(), sum.size());
    }
    std::copy(sum.begin(), sum.end(), grad + range.begin);
    return true;
  }

  void accumulate(const std::string& payload, float weight, std::vector<float>& sum) {
    codec::decode_accumulate(reinterpret_cast<const uint8_t*>(payload.data()), payload.size(), config_.codec, weight,
                             sum.data(), sum.size());
  }

  // Sharded: the owner already averaged; decode its result.
  bool apply_reduced(uint32_t k, const wire::WireFile& file, const std::string& name, float* grad) {
    if (!file.header.has_gradient() || !file.header.gradient().reduced()) {
      reject(name, "not a reduced shard");
      return false;
    }
    const wire::GradientShard& g = file.header.gradient();
    if (!valid_agreement_shape(g.round(), g.shard_index(), g.shard_count(), k, name)) return false;
    const Range range = shard_range(n_, config_.shard_count, k);
    ShardOutcome& shard = shards_[k];
    shard.contributors = contributors_of(g.contributors());
    shard.skip = g.overflow();
    if (shard.skip) return true;
    try {
      codec::CodecOptions opt = decode_options(g.codec(), config_.codec, name);
      codec::decode(reinterpret_cast<const uint8_t*>(file.payload.data()), file.payload.size(), opt, grad + range.begin,
                    range.size());
    } catch (const std::exception& e) {
      reject(name, e.what());
      return false;
    }
    return true;
  }

  // Owners publish the agreement of the shards they hold for the current epoch.
  void maybe_publish_agreement(uint32_t k, const std::set<std::string>& visible, double elapsed, float* grad) {
    for (uint32_t epoch = 0; epoch < config_.members.size(); ++epoch) {
      if (owner(k, epoch) != config_.worker) continue;
      const double epoch_start = epoch * config_.failover_timeout_s;
      if (elapsed < epoch_start) return;
      if (own_agreements_.count(agreement_name(config_.pattern, k, epoch, config_.worker))) return;
      request_contributions(k);
      std::vector<std::string> present{config_.worker};
      for (const std::string& member : config_.members)
        if (member != config_.worker && !refused_workers_.count(member) && visible.count(contribution_name(member, k)))
          present.push_back(member);
      const bool everyone = present.size() == config_.members.size();
      if (!everyone && elapsed < epoch_start + config_.contribution_timeout_s) return;
      if (epoch > 0) {
        ++stats_.failovers;
        logger().warn(str("round ", round_, " shard ", k, ": no agreement from ", owner(k, epoch - 1),
                          " after ", elapsed, " s; ", config_.worker, " takes over as epoch ", epoch, " owner"));
      }
      publish_agreement(k, epoch, present);
      try_apply_agreement(k, visible_files(), grad);
      return;
    }
  }

  void request_contributions(uint32_t k) {
    if (config_.pattern != ExchangePattern::sharded) return;
    for (const std::string& member : config_.members) {
      if (member == config_.worker) continue;
      const fs::path request =
          config_.local_dir / "requests" / round_dir_name(round_) / contribution_name(member, k);
      if (fs::exists(request)) continue;
      fs::create_directories(request.parent_path());
      write_file_atomic(request, "");
    }
  }

  void publish_agreement(uint32_t k, uint32_t epoch, const std::vector<std::string>& present) {
    std::vector<Contributor> contributors;
    std::map<std::string, wire::WireFile> files;
    for (const std::string& worker : present) {
      if (worker == config_.worker) {
        contributors.push_back({worker, mine_.tokens, mine_.loss, mine_.overflow, own_checksums_[k]});
        continue;
      }
      const std::string name = contribution_name(worker, k);
      std::optional<wire::WireFile> file = read_peer(name);
      if (!file) continue;
      if (!file->header.has_gradient() || file->header.gradient().round() != round_ ||
          file->header.gradient().shard_index() != k || file->header.gradient().worker() != worker ||
          file->header.gradient().reduced()) {
        reject(name, str(name, ": header does not describe round ", round_, " shard ", k, " of ", worker));
        continue;
      }
      const wire::GradientShard& g = file->header.gradient();
      contributors.push_back({worker, g.tokens(), g.loss(), g.overflow(), file->header.payload_checksum()});
      if (config_.pattern == ExchangePattern::sharded) files.emplace(worker, std::move(*file));
    }
    stats_.contributions_left_out += config_.members.size() - contributors.size();
    if (contributors.size() < config_.members.size()) {
      std::string missing;
      for (const std::string& member : config_.members)
        if (std::none_of(contributors.begin(), contributors.end(), [&](const Contributor& c) { return c.worker == member; }))
          missing += " " + member;
      logger().warn(str("round ", round_, " shard ", k, ": agreed without", missing));
    }

    wire::FileHeader header = new_header();
    std::string payload;
    auto fill = [&](auto* list) {
      for (const Contributor& c : contributors) {
        wire::Contribution* entry = list->Add();
        entry->set_worker(c.worker);
        entry->set_tokens(c.tokens);
        entry->set_loss(c.loss);
        entry->set_overflow(c.overflow);
        entry->set_payload_checksum(c.checksum);
      }
    };
    if (config_.pattern == ExchangePattern::all_gather) {
      wire::RoundCommit* commit = header.mutable_commit();
      commit->set_round(round_);
      commit->set_shard_index(k);
      commit->set_shard_count(config_.shard_count);
      commit->set_owner(config_.worker);
      commit->set_epoch(epoch);
      fill(commit->mutable_contributors());
    } else {
      const Range range = shard_range(n_, config_.shard_count, k);
      wire::GradientShard* g = new_shard(header, k);
      g->set_reduced(true);
      g->set_epoch(epoch);
      fill(g->mutable_contributors());
      const bool overflow = std::any_of(contributors.begin(), contributors.end(), [](const Contributor& c) { return c.overflow; });
      g->set_overflow(overflow);
      uint64_t total = 0;
      for (const Contributor& c : contributors) total += c.tokens;
      g->set_tokens(total);
      if (!overflow) {
        std::sort(contributors.begin(), contributors.end(),
                  [](const Contributor& a, const Contributor& b) { return a.worker < b.worker; });
        std::vector<float> sum(range.size(), 0.0f);
        for (const Contributor& c : contributors) {
          const float weight = contribution_weight(c.tokens, total);
          if (c.worker == config_.worker) {
            accumulate(own_payloads_[k], weight, sum);
          } else {
            const wire::WireFile& file = files.at(c.worker);
            codec::decode_accumulate(reinterpret_cast<const uint8_t*>(file.payload.data()), file.payload.size(),
                                     decode_options(file.header.gradient().codec(), config_.codec, c.worker),
                                     weight, sum.data(), sum.size());
          }
        }
        std::vector<uint8_t> encoded = codec::encode(sum.data(), sum.size(), config_.codec);
        payload.assign(reinterpret_cast<const char*>(encoded.data()), encoded.size());
      }
    }
    const std::string name = agreement_name(config_.pattern, k, epoch, config_.worker);
    std::string bytes = wire::frame(header, payload);
    publish(round_dir_name(round_) + "/" + name, bytes);
    own_agreements_[name] = std::move(bytes);
    ++stats_.agreements_published;
  }

  void check_fingerprints() {
    for (auto it = own_fingerprints_.begin(); it != own_fingerprints_.end();) {
      const uint64_t round = it->first;
      const fs::path dir = config_.local_dir / "inbox" / round_dir_name(round);
      std::error_code ec;
      for (fs::directory_iterator d(dir, ec), end; !ec && d != end; d.increment(ec)) {
        const std::string name = d->path().filename().string();
        if (!name.starts_with("fp-") || !name.ends_with(".gbx.flag")) continue;
        const std::string file_name = name.substr(0, name.size() - 5);
        if (!checked_fingerprints_.insert(str(round, "/", file_name)).second) continue;
        try {
          wire::WireFile file = wire::read_wire_file(dir / file_name);
          wire::check_identity(file.header, config_.run_id, config_.model_fingerprint, (dir / file_name).string());
          ++stats_.fingerprints_checked;
          if (file.header.fingerprint().parameters_checksum() != it->second) {
            ++stats_.fingerprint_mismatches;
            logger().error(str("replica divergence: after round ", round, " ", file.header.fingerprint().worker(),
                               " holds parameters ", to_hex64(file.header.fingerprint().parameters_checksum()), ", ",
                               config_.worker, " holds ", to_hex64(it->second)));
          }
        } catch (const std::exception& e) {
          reject(file_name, e.what());
        }
      }
      it = (round + static_cast<uint64_t>(config_.gc_window) <= round_) ? own_fingerprints_.erase(it) : std::next(it);
    }
  }

  // Rounds more than gc_window behind are done: drop our files (the syncer then deletes the
  // shared copies) and our local mirror of everyone else's.
  void collect_garbage(uint64_t round) {
    if (round <= static_cast<uint64_t>(config_.gc_window)) return;
    const uint64_t limit = round - config_.gc_window;  // rounds < limit go
    std::error_code ec;
    for (const char* side : {"outbox", "inbox", "requests"}) {
      const fs::path rounds = config_.local_dir / side / "rounds";
      for (fs::directory_iterator it(rounds, ec), end; !ec && it != end; it.increment(ec)) {
        unsigned long long r = 0;
        if (std::sscanf(it->path().filename().c_str(), "r%llu", &r) != 1 || r >= limit) continue;
        if (std::string(side) != "outbox") {
          fs::remove_all(it->path(), ec);
          continue;
        }
        // Keep the syncer's .sent markers: they tell it which shared files to delete.
        bool empty = true;
        for (fs::directory_iterator f(it->path(), ec); !ec && f != fs::directory_iterator(); f.increment(ec)) {
          if (f->path().extension() == ".sent") empty = false;
          else fs::remove(f->path(), ec);
        }
        if (empty) fs::remove(it->path(), ec);
      }
    }
  }

  void write_stats() {
    nlohmann::json j = stats_.to_json();
    j["worker"] = config_.worker;
    j["round"] = round_;
    write_file_atomic(config_.local_dir / "exchange" / "stats.json", j.dump(2));
  }

  FolderExchangeConfig config_;
  std::vector<codec::ErrorFeedbackEncoder> encoders_;
  uint64_t round_ = 0;
  size_t n_ = 0;
  LocalContribution mine_;
  std::vector<ShardOutcome> shards_;
  std::vector<std::string> own_payloads_;
  std::vector<uint64_t> own_checksums_;
  std::map<std::string, std::string> own_agreements_;
  std::set<std::string> rejected_this_round_;
  std::map<uint64_t, uint64_t> own_fingerprints_;
  std::set<std::string> checked_fingerprints_;
  std::set<std::string> checked_configs_;
  std::set<std::string> refused_workers_;
  uint64_t rounds_done_ = 0;
  // Heartbeats.
  std::deque<std::pair<std::chrono::system_clock::time_point, uint64_t>> uploads_;
  Clock::time_point last_heartbeat_{};
  std::string last_heartbeat_name_;
  int64_t last_heartbeat_sequence_ = 0;
  uint64_t applied_tokens_ = 0;
  Clock::time_point first_round_start_{};
  double last_loss_ = 0;
  bool left_ = false;
  Stats stats_;
};

}  // namespace

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
  GB_REQUIRE(worker.find_first_of("/\\ .") == std::string::npos && worker.size() <= 64,
             "--worker ", worker, ": use letters, digits, '-' and '_' only (it becomes part of file names)");
  GB_REQUIRE(std::find(members.begin(), members.end(), worker) != members.end(), "--peers: must include this worker (",
             worker, ")");
  GB_REQUIRE(std::set<std::string>(members.begin(), members.end()).size() == members.size(), "--peers: a name is repeated");
  GB_REQUIRE(shard_count >= 1 && shard_count <= 4096, "--shards ", shard_count, ": must be 1..4096");
  GB_REQUIRE(contribution_timeout_s > 0 && failover_timeout_s > contribution_timeout_s,
             "--failover-timeout must exceed --contribution-timeout (got ", failover_timeout_s, " and ",
             contribution_timeout_s, ")");
  GB_REQUIRE(gc_window >= 2, "--gc-window ", gc_window, ": must be at least 2");
}

std::unique_ptr<GradientExchange> make_folder_exchange(FolderExchangeConfig config) {
  return std::make_unique<FolderExchange>(std::move(config));
}

std::string round_dir_name(uint64_t round) {
  char name[32];
  std::snprintf(name, sizeof name, "rounds/r%08llu", static_cast<unsigned long long>(round));
  return name;
}

std::string contribution_name(const std::string& worker, uint32_t shard) { return str("g-", worker, "-s", shard, ".gbx"); }

std::string agreement_name(ExchangePattern pattern, uint32_t shard, uint32_t epoch, const std::string& owner) {
  return str(pattern == ExchangePattern::sharded ? "r-s" : "c-s", shard, "-e", epoch, "-", owner, ".gbx");
}

std::string fingerprint_name(const std::string& worker) { return str("fp-", worker, ".gbx"); }

std::string run_config_name(const std::string& worker) { return str("run/config-", worker, ".gbx"); }

std::string heartbeat_name(const std::string& worker, int64_t unix_ms) {
  char ms[24];
  std::snprintf(ms, sizeof ms, "%013lld", static_cast<long long>(unix_ms));
  return str("members/", worker, "/hb-", ms, ".gbx");
}

}  // namespace gradbox::exchange

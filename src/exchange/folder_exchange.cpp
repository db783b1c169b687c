#include "exchange/folder_exchange.h"

#include <algorithm>
#include <chrono>
#include <cmath>
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
#include "exchange/folder_checkpoint.h"
#include "exchange/live_control.h"
#include "exchange/membership.h"
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
  wire::RoundView view;  // shard 0's is authoritative
};

bool contains(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

std::string join_names(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ",") + n;
  return out.empty() ? "(none)" : out;
}


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
  uint64_t followed_rounds = 0;      // applied without contributing (joining, catching up)
  uint64_t members_added = 0;        // by views this worker agreed
  uint64_t members_dropped = 0;
  uint64_t self_elections = 0;       // whole-run resumes started here
  uint64_t resyncs = 0;              // reloads of the agreed state
  uint64_t checkpoints_published = 0;
  uint64_t checkpoint_failovers = 0;
  uint64_t control_changes = 0;
  double contribution_deadline_s = 0;
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
            {"followed_rounds", followed_rounds},
            {"members_added", members_added},
            {"members_dropped", members_dropped},
            {"self_elections", self_elections},
            {"resyncs", resyncs},
            {"checkpoints_published", checkpoints_published},
            {"checkpoint_failovers", checkpoint_failovers},
            {"control_changes", control_changes},
            {"contribution_deadline_s", contribution_deadline_s},
            {"wait_seconds", wait_seconds},
            {"rejected", rejected}};
  }
};

class FolderExchange final : public GradientExchange {
 public:
  explicit FolderExchange(FolderExchangeConfig config)
      : config_(std::move(config)),
        deadline_(config_.deadline_floor_s, config_.contribution_timeout_s, config_.deadline_k) {
    if (config_.members.empty()) config_.members = {config_.worker};
    std::sort(config_.members.begin(), config_.members.end());
    shards_from_run_ = config_.shard_count == 0;
    if (config_.shard_count == 0)
      config_.shard_count = config_.pattern == ExchangePattern::sharded ? static_cast<uint32_t>(config_.members.size()) : 1;
    config_.validate();
    encoders_.assign(config_.shard_count, codec::ErrorFeedbackEncoder(config_.codec));
    fs::create_directories(config_.local_dir / "outbox");
    fs::create_directories(config_.local_dir / "inbox");
    fs::create_directories(config_.local_dir / "exchange");
    publisher_ = std::make_unique<CheckpointPublisher>(config_.local_dir, identity(), config_.checkpoint_part_bytes);
    views_[1] = config_.members;  // a new run, unless join() finds an existing one
    if (!shards_from_run_) publish_run_config();  // otherwise join() may still adopt the run's
  }

  std::string describe() const override {
    return str(pattern_name(config_.pattern), ", ", config_.shard_count, " shard(s), ", codec::codec_name(config_.codec.codec),
               "+zstd, ", views_.count(1) ? "founding members " + join_names(config_.members) : "joining a running run");
  }

  JoinPlan join(const fs::path& run_dir, int64_t local_step) override {
    const auto start = Clock::now();
    if (config_.wait_for_syncer) wait_for_syncer_pass(start);
    adopt_run_shape();
    check_peer_configs(true);  // a mismatch is refused before anything is loaded
    publish_run_config();
    JoinPlan plan;
    const bool has_checkpoint = !list_folder_checkpoints(config_.local_dir, identity()).empty();
    // Round 1 agreed means the founders have started: anyone else follows and is let in later.
    const bool started = newest_round_seen() > 1 || round_has_agreement(1);
    const bool founding_member = contains(config_.members, config_.worker) && !started;
    if (!has_checkpoint && !started && config_.members.front() == config_.worker) {
      plan.founder = true;  // publishes the initial weights (the trainer's step-0 checkpoint)
      logger().info(str("founding run ", config_.run_id, " with ", join_names(config_.members)));
      return plan;
    }
    plan.founder = founding_member;
    if (!founding_member) views_.clear();  // follow until an agreement lets this worker in
    if (!has_checkpoint)
      logger().info(str("waiting for ", config_.members.front(), " to publish the initial weights of run ", config_.run_id));
    std::optional<FolderCheckpoint> newest = wait_for_newest_checkpoint(start, !has_checkpoint);
    if (newest && static_cast<int64_t>(newest->step) > local_step) {
      plan.checkpoint = fetch_checkpoint(*newest, run_dir, start);
      logger().info(str(founding_member ? "starting run " : "joining run ", config_.run_id,
                        " from the folder checkpoint of step ", newest->step, " (by ", newest->publisher, ")"));
    } else if (newest) {
      logger().info(str("joining run ", config_.run_id, " from the local checkpoint of step ", local_step,
                        " (the folder's newest is step ", newest->step, ")"));
    }
    publish_heartbeat("joining");
    return plan;
  }

  bool will_contribute(uint64_t round) const override {
    auto view = views_.find(round);
    if (view != views_.end()) return contains(view->second, config_.worker);
    return !anyone_live();  // nobody to follow: this worker may have to resume the run itself
  }

  RoundResult all_reduce(uint64_t round, float* grad, size_t n, const LocalContribution& mine) override {
    const auto start = Clock::now();
    if (rounds_done_ == 0) first_round_start_ = start;
    if (!run_config_published_) publish_run_config();
    round_ = round;
    n_ = n;
    shards_.assign(config_.shard_count, ShardOutcome{});
    own_payloads_.assign(config_.shard_count, std::string());
    own_checksums_.assign(config_.shard_count, 0);
    mine_ = mine;
    rejected_this_round_.clear();
    own_agreements_.clear();
    lag_seen_.clear();
    check_peer_configs(rounds_done_ == 0);
    auto view = views_.find(round);
    round_members_ = view != views_.end() ? view->second : std::vector<std::string>{};
    member_ = contains(round_members_, config_.worker);
    refresh_departed();
    if (member_) publish_contributions(grad, mine);
    auto contributed = Clock::now();
    bool waited = false;

    RoundResult result;
    size_t pending = config_.shard_count;
    double next_housekeeping = 1.0;
    while (pending > 0) {
      const double elapsed = seconds_since(contributed);
      const std::set<std::string> visible = visible_files();
      if (member_) observe_lags(visible, elapsed);
      for (uint32_t k = 0; k < config_.shard_count; ++k) {
        if (shards_[k].done) continue;
        if (try_apply_agreement(k, visible, grad)) {
          --pending;
          continue;
        }
        // One agreement is enough: never publish a competing one once any is visible.
        if (member_ && agreements(k, visible).empty()) maybe_publish_agreement(k, visible, elapsed, grad);
        if (shards_[k].done) --pending;
      }
      if (pending == 0) break;
      waited = true;
      if (elapsed >= next_housekeeping) {
        next_housekeeping = elapsed + 1.0;
        if (config_.check_alive) config_.check_alive();
        maintain_checkpoints();
        refresh_departed();
        if (!member_) {
          if (follower_cannot_catch_up()) {
            result.resync = true;
            break;
          }
          if (elapsed >= config_.stale_after_s && may_resume_run()) {
            if (mine.tokens == 0) {  // it did not compute a gradient: reload, then come back with one
              result.resync = true;
              break;
            }
            resume_run_alone(grad, mine);
            contributed = Clock::now();
            next_housekeeping = 1.0;
            continue;
          }
        }
      }
      if (elapsed > config_.give_up_timeout_s) {
        throw std::runtime_error(str("round ", round, ": no usable agreement for ", pending, " shard(s) after ",
                                     config_.give_up_timeout_s, " s (folder ", inbox_dir().string(), ")"));
      }
      std::this_thread::sleep_for(std::chrono::duration<double>(config_.poll_interval_s));
    }
    result.wait_seconds = seconds_since(start);
    if (result.resync) {
      ++stats_.resyncs;
      views_.clear();
      write_stats();
      return result;
    }

    double loss_sum = 0;
    for (const ShardOutcome& shard : shards_) result.skip = result.skip || shard.skip;
    for (const Contributor& c : shards_[0].contributors) {
      result.tokens += c.tokens;
      loss_sum += c.loss * static_cast<double>(c.tokens);
    }
    result.contributors = static_cast<int>(shards_[0].contributors.size());
    result.loss = result.tokens > 0 ? loss_sum / static_cast<double>(result.tokens) : mine.loss;
    result.control = learn_from_agreement(round, shards_[0].view);
    ++stats_.rounds;
    ++rounds_done_;
    if (!member_) ++stats_.followed_rounds;
    if (result.skip) ++stats_.skipped_rounds;
    stats_.wait_seconds += result.wait_seconds;
    check_fingerprints();
    result.resync = resync_needed_;
    if (resync_needed_) {
      ++stats_.resyncs;
      resync_needed_ = false;
      views_.clear();
    }
    maintain_checkpoints();
    collect_garbage(round);
    applied_tokens_ += result.tokens;
    last_loss_ = result.loss;
    publish_progress_heartbeat(waited);
    write_stats();
    return result;
  }

  void leave() override {
    if (left_) return;
    left_ = true;
    // A checkpoint being published (the final one, typically) gets its manifest if the syncer
    // uploads its parts soon; otherwise the next worker in line publishes it.
    const auto start = Clock::now();
    try {
      while (publisher_->busy() && seconds_since(start) < 30) {
        if (config_.check_alive) config_.check_alive();
        maintain_checkpoints();
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    } catch (const std::exception& e) {
      logger().warn(str("leaving before the folder checkpoint is complete: ", e.what()));
    }
    publish_heartbeat("left");
  }

  void after_update(uint64_t round, const float* params, size_t n) override {
    if (config_.fingerprint_interval <= 0 || round % config_.fingerprint_interval != 0) return;
    wire::FileHeader header = new_header();
    wire::Fingerprint* fp = header.mutable_fingerprint();
    fp->set_round(round);
    fp->set_worker(config_.worker);
    fp->set_parameters_checksum(checksum64(params, n * sizeof(float)));
    own_fingerprints_[round] = fp->parameters_checksum();
    // Once per round and worker: after a restart or a reload the earlier file stands (write-once).
    const std::string rel = round_dir_name(round) + "/" + fingerprint_name(config_.worker);
    if (!fs::exists(config_.local_dir / "outbox" / rel)) publish(rel, wire::frame(header, {}));
  }

  void after_checkpoint(uint64_t step, const fs::path& dir, uint64_t tokens, uint64_t parameters_checksum) override {
    local_checkpoint_ = LocalCheckpoint{step, dir, tokens, parameters_checksum, Clock::now(), false};
    maintain_checkpoints();
  }

  std::optional<fs::path> fetch_agreed_state(const fs::path& run_dir) override {
    const auto start = Clock::now();
    std::optional<FolderCheckpoint> newest = wait_for_newest_checkpoint(start, true);
    GB_CHECK(newest.has_value(), "no folder checkpoint to reload");
    fs::path dir = fetch_checkpoint(*newest, run_dir, start);
    logger().warn(str("reloaded the agreed state: folder checkpoint of step ", newest->step, " by ", newest->publisher));
    views_.clear();
    return dir;
  }

 private:
  struct LocalCheckpoint {
    uint64_t step = 0;
    fs::path dir;
    uint64_t tokens = 0;
    uint64_t parameters_checksum = 0;
    Clock::time_point written;
    bool settled = false;  // in the folder (by anyone), or not this worker's to publish
  };

  FileIdentity identity() const { return FileIdentity{config_.run_id, config_.model_fingerprint}; }

  void wait_for_syncer_pass(Clock::time_point start) {
    const fs::path stats = config_.local_dir / "syncer" / "stats.json";
    while (true) {
      if (fs::exists(stats)) {
        const nlohmann::json j = nlohmann::json::parse(read_file(stats), nullptr, false);
        if (j.is_object() && j.value("settled_passes", uint64_t{0}) >= 1) return;
      }
      if (config_.check_alive) config_.check_alive();
      GB_CHECK(seconds_since(start) < config_.give_up_timeout_s, "the syncer has not listed the shared folder after ",
               config_.give_up_timeout_s, " s (see ", (config_.local_dir / "syncer.log").string(), ")");
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  // A joiner that did not choose --shards takes the run's.
  void adopt_run_shape() {
    if (!shards_from_run_) return;
    const fs::path dir = config_.local_dir / "inbox" / "run";
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string name = it->path().filename().string();
      if (!name.starts_with("config-") || !name.ends_with(".gbx.flag")) continue;
      try {
        wire::WireFile wf = wire::read_wire_file(dir / name.substr(0, name.size() - 5));
        if (wf.header.run_id() != config_.run_id || !wf.header.has_run_config()) continue;
        const uint32_t shards = wf.header.run_config().shard_count();
        if (shards >= 1 && shards <= 4096 && shards != config_.shard_count) {
          logger().info(str("using the run's --shards ", shards));
          config_.shard_count = shards;
          encoders_.assign(config_.shard_count, codec::ErrorFeedbackEncoder(config_.codec));
        }
        return;
      } catch (const std::exception&) {
        // check_peer_configs reports it
      }
    }
  }

  bool round_has_agreement(uint64_t round) const {
    std::error_code ec;
    for (fs::directory_iterator it(config_.local_dir / "inbox" / round_dir_name(round), ec), end; !ec && it != end;
         it.increment(ec)) {
      const std::string name = it->path().filename().string();
      if ((name.starts_with("c-") || name.starts_with("r-")) && name.ends_with(".gbx.flag")) return true;
    }
    return false;
  }

  uint64_t newest_round_seen() const { return newest_round_folder(config_.local_dir / "inbox"); }

  // The newest folder checkpoint not known to be broken; waits for one when `wait` is set.
  std::optional<FolderCheckpoint> wait_for_newest_checkpoint(Clock::time_point start, bool wait) {
    while (true) {
      for (const FolderCheckpoint& c : list_folder_checkpoints(config_.local_dir, identity())) {
        if (broken_checkpoints_.count(c.dir_rel)) continue;
        auto agreed = agreed_fingerprints_.find(c.step);
        if (agreed != agreed_fingerprints_.end() && agreed->second != c.parameters_checksum) {
          logger().warn(str(c.dir_rel, " holds parameters the replicas disagreed with; not loading it"));
          broken_checkpoints_.insert(c.dir_rel);
          continue;
        }
        return c;
      }
      if (!wait) return std::nullopt;
      if (config_.check_alive) config_.check_alive();
      GB_CHECK(seconds_since(start) < config_.give_up_timeout_s, "no checkpoint of run ", config_.run_id,
               " appeared in the folder after ", config_.give_up_timeout_s, " s");
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }

  // Fetches `wanted` (or, when a part of it turns out broken, the newest older one) into
  // run_dir/checkpoints/step_N, the layout the trainer resumes from.
  fs::path fetch_checkpoint(FolderCheckpoint wanted, const fs::path& run_dir, Clock::time_point start) {
    while (true) {
      char name[32];
      std::snprintf(name, sizeof name, "step_%08llu", static_cast<unsigned long long>(wanted.step));
      const fs::path target = run_dir / "checkpoints" / name;
      try {
        std::error_code ec;
        fs::remove_all(target, ec);  // a local copy of the same step may be the diverged state
        if (fetch_folder_checkpoint(config_.local_dir, wanted, identity(), target)) return target;
      } catch (const InputError& e) {
        logger().error(str("folder checkpoint ", wanted.dir_rel, " is unusable: ", e.what(), "; trying an older one"));
        broken_checkpoints_.insert(wanted.dir_rel);
        wanted = *wait_for_newest_checkpoint(start, true);
        continue;
      }
      if (config_.check_alive) config_.check_alive();
      GB_CHECK(seconds_since(start) < config_.give_up_timeout_s, "folder checkpoint ", wanted.dir_rel,
               " did not arrive in ", config_.give_up_timeout_s, " s");
      // A newer one appeared, or this one was pruned while its parts were coming: take the newest.
      std::optional<FolderCheckpoint> newest = wait_for_newest_checkpoint(start, true);
      if (newest->dir_rel != wanted.dir_rel) {
        logger().info(str("fetching ", newest->dir_rel, " instead of ", wanted.dir_rel));
        wanted = *newest;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  std::map<std::string, PeerBeat> read_heartbeats() const {
    return read_peer_heartbeats(config_.local_dir / "inbox", config_.run_id, config_.worker);
  }

  // Members of this round whose newest heartbeat says "left" (read about once a second).
  void refresh_departed() {
    departed_.clear();
    for (const auto& [worker, beat] : read_heartbeats())
      if (beat.state == "left" && contains(round_members_, worker)) departed_.insert(worker);
  }

  bool fresh(const PeerBeat& beat) const { return beat.age_s < config_.stale_after_s; }

  bool anyone_live() const {
    for (const auto& [worker, beat] : read_heartbeats())
      if (beat.state == "live" && fresh(beat)) return true;
    return false;
  }

  // Nobody is live: the follower with the smallest name among the fresh ones resumes the run.
  bool may_resume_run() const {
    for (const auto& [worker, beat] : read_heartbeats()) {
      if (!fresh(beat) || beat.state == "left") continue;
      if (beat.state == "live" || worker < config_.worker) return false;
    }
    return true;
  }

  void resume_run_alone(float* grad, const LocalContribution& mine) {
    ++stats_.self_elections;
    logger().warn(str("round ", round_, ": no live member and no agreement after ", config_.stale_after_s, " s; ",
                      config_.worker, " resumes the run alone (others join as they come)"));
    round_members_ = {config_.worker};
    views_[round_] = round_members_;
    member_ = true;
    publish_contributions(grad, mine);
  }

  // The round this follower needs is gone from the folder and a newer checkpoint exists.
  bool follower_cannot_catch_up() {
    std::error_code ec;
    if (fs::exists(inbox_dir(), ec) && !fs::is_empty(inbox_dir(), ec)) return false;
    if (newest_round_seen() <= round_ + 1) return false;
    for (const FolderCheckpoint& c : list_folder_checkpoints(config_.local_dir, identity()))
      if (c.step >= round_ && !broken_checkpoints_.count(c.dir_rel)) {
        logger().warn(str("round ", round_, " is gone from the folder; reloading the checkpoint of step ", c.step));
        return true;
      }
    return false;
  }

  // Lags from this worker's contribution to each peer's (first shard seen), for the deadline.
  void observe_lags(const std::set<std::string>& visible, double elapsed) {
    for (const std::string& member : round_members_) {
      if (member == config_.worker || lag_seen_.count(member)) continue;
      for (uint32_t k = 0; k < config_.shard_count; ++k) {
        if (!visible.count(contribution_name(member, k))) continue;
        lag_seen_.insert(member);
        deadline_.observe(elapsed);
        break;
      }
    }
  }

  // The deadline in force (membership.h: LagDeadline); logged when it moves by more than 20%.
  double contribution_deadline() {
    const double deadline = deadline_.deadline();
    if (std::abs(deadline - stats_.contribution_deadline_s) > 0.2 * std::max(stats_.contribution_deadline_s, 0.5)) {
      logger().info(str("contribution deadline ", deadline, " s (", deadline_.samples(), " lags observed, floor ",
                        config_.deadline_floor_s, " s, ceiling ", config_.contribution_timeout_s, " s)"));
      stats_.contribution_deadline_s = deadline;
    }
    return deadline;
  }

  // Shard 0's owner decides who is expected next round (Note [Elastic membership]).
  std::vector<std::string> next_view(const std::vector<Contributor>& contributors) {
    std::set<std::string> next;
    for (const Contributor& c : contributors)
      if (!refused_workers_.count(c.worker)) next.insert(c.worker);
    for (const auto& [worker, beat] : read_heartbeats()) {
      if (beat.state == "left") next.erase(worker);
      else if (beat.state == "ready" && fresh(beat) && beat.applied_round + 2 >= round_ && !refused_workers_.count(worker))
        next.insert(worker);
    }
    std::vector<std::string> view(next.begin(), next.end());
    if (view != round_members_) {
      for (const std::string& w : view)
        if (!contains(round_members_, w)) ++stats_.members_added;
      for (const std::string& w : round_members_)
        if (!contains(view, w)) ++stats_.members_dropped;
      logger().info(str("round ", round_ + 1, " members: ", join_names(view), " (round ", round_, ": ",
                        join_names(round_members_), ")"));
    }
    return view;
  }

  // The control every replica uses from control_from_round on (Note [Live control]). A change is
  // proposed only when this worker's mirror of control.json changed since it last looked, so an
  // owner with an older mirror never undoes a newer change.
  AgreedControl decide_control() {
    AgreedControl control = agreed_control_;
    const fs::path file = config_.local_dir / "inbox" / "control.json";
    std::error_code ec;
    if (!fs::exists(file, ec)) return control;
    std::string text;
    try {
      text = read_file(file);
    } catch (const std::exception&) {
      return control;
    }
    if (text == control_text_seen_) return control;
    control_text_seen_ = text;
    try {
      const std::string json = LiveControl::parse(text, "control.json").to_json().dump();
      if (json == control.json) return control;
      control = AgreedControl{agreed_control_.version + 1, round_ + 2, json};
      logger().info(str("live control changed (control.json): ", json, " from round ", control.from_round));
    } catch (const std::exception& e) {
      logger().error(str(e.what(), "; the control stays ", control.json));
    }
    return control;
  }

  std::optional<AgreedControl> learn_from_agreement(uint64_t round, const wire::RoundView& view) {
    if (view.members_size() == 0) return std::nullopt;  // an agreement without a view (older writer)
    applied_views_[round] = {view.members().begin(), view.members().end()};
    if (view.next_members_size() > 0) views_[round + 1] = {view.next_members().begin(), view.next_members().end()};
    while (applied_views_.size() > 4096) applied_views_.erase(applied_views_.begin());
    while (views_.size() > 4) views_.erase(views_.begin());
    if (view.control_json().empty()) return std::nullopt;
    const AgreedControl control{view.control_version(), view.control_from_round(), view.control_json()};
    if (control.json != agreed_control_.json) ++stats_.control_changes;
    agreed_control_ = control;
    return control;
  }

  void fill_view(wire::RoundView* view, uint32_t k, const std::vector<Contributor>& contributors) {
    for (const std::string& m : round_members_) view->add_members(m);
    if (k != 0) return;
    for (const std::string& m : next_view(contributors)) view->add_next_members(m);
    const AgreedControl control = decide_control();
    view->set_control_json(control.json);
    view->set_control_from_round(control.from_round);
    view->set_control_version(control.version);
  }

  // Members publish "live" every heartbeat interval; a follower says "ready" every round once it
  // is caught up (an owner only lets in a follower whose beat shows a recent round).
  void publish_progress_heartbeat(bool waited) {
    const auto since = Clock::now() - last_heartbeat_;
    const bool due = since >= std::chrono::duration<double>(config_.heartbeat_interval_s);
    if (member_) {
      if (due || last_heartbeat_state_ != "live") publish_heartbeat("live");
      return;
    }
    const bool caught_up = waited || newest_round_seen() <= round_ + 1;
    if (caught_up) publish_heartbeat("ready");
    else if (due || last_heartbeat_state_ != "joining") publish_heartbeat("joining");
  }

  // Folder checkpoints: the agreed publisher of step s is V_s[(s + e) mod |V_s|] for epoch e;
  // epoch e starts e * checkpoint_failover_s after the step's local checkpoint was written,
  // unless a checkpoint of that step (or newer) is in the folder by then.
  void maintain_checkpoints() {
    try {
      if (publisher_->poll()) {
        ++stats_.checkpoints_published;
        logger().info(str("folder checkpoint of step ", *last_published_step_, " complete (manifest written)"));
      }
      const std::vector<FolderCheckpoint> folder = list_folder_checkpoints(config_.local_dir, identity());
      if (local_checkpoint_ && !local_checkpoint_->settled && !publisher_->busy()) {
        LocalCheckpoint& local = *local_checkpoint_;
        const bool present = std::any_of(folder.begin(), folder.end(),
                                         [&](const FolderCheckpoint& c) { return c.step >= local.step; });
        auto view = applied_views_.find(local.step);
        const std::vector<std::string>* members = nullptr;
        if (view != applied_views_.end()) members = &view->second;
        else if (local.step == 0 && views_.count(1)) members = &views_.at(1);
        if (present || !members || !contains(*members, config_.worker)) {
          local.settled = true;
        } else {
          const size_t n = members->size();
          const size_t index = static_cast<size_t>(std::find(members->begin(), members->end(), config_.worker) - members->begin());
          const uint32_t epoch = static_cast<uint32_t>((index + n - local.step % n) % n);
          if (seconds_since(local.written) >= epoch * config_.checkpoint_failover_s) {
            local.settled = true;
            if (!fs::exists(local.dir / "manifest.json")) {
              logger().warn(str("local checkpoint ", local.dir.string(), " is gone; not publishing step ", local.step));
            } else {
              if (epoch > 0) {
                ++stats_.checkpoint_failovers;
                logger().warn(str("no folder checkpoint of step ", local.step, " after ",
                                  epoch * config_.checkpoint_failover_s, " s; ", config_.worker,
                                  " publishes it as epoch ", epoch));
              }
              publisher_->start(local.dir, local.step, epoch, config_.worker, local.tokens, local.parameters_checksum);
              last_published_step_ = local.step;
            }
          }
        }
      }
      prune_folder_checkpoints(config_.local_dir, identity(), config_.keep_folder_checkpoints);
      // Rounds after the oldest kept checkpoint stay, so a joiner can replay from it.
      if (!folder.empty()) replay_floor_ = folder[std::min(folder.size(), config_.keep_folder_checkpoints) - 1].step;
    } catch (const std::exception& e) {
      logger().error(str("folder checkpoints: ", e.what()));
    }
  }

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
    if (run_config_published_) return;
    wire::FileHeader header = new_header();
    *header.mutable_run_config() = run_config();
    if (!fs::exists(config_.local_dir / "outbox" / run_config_name(config_.worker)))  // an earlier life's stands
      publish(run_config_name(config_.worker), wire::frame(header, {}));
    run_config_published_ = true;
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
    return round_members_[(shard + round_ + epoch) % round_members_.size()];
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
    hb->set_step(round_);
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
    last_heartbeat_state_ = state;
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

  // A contribution this worker already published in an earlier life (before a kill -9) is
  // reused: the shared folder keeps its first bytes (write-once), and agreements may pin them.
  bool reuse_earlier_contributions() {
    std::vector<wire::WireFile> earlier;
    for (uint32_t k = 0; k < config_.shard_count; ++k) {
      const fs::path path = config_.local_dir / "outbox" / round_dir_name(round_) / contribution_name(config_.worker, k);
      if (!fs::exists(path)) return false;
      try {
        earlier.push_back(wire::read_wire_file(path));
      } catch (const std::exception& e) {
        logger().warn(str(path.string(), ": unreadable (", e.what(), "); contributing afresh"));
        return false;
      }
    }
    for (uint32_t k = 0; k < config_.shard_count; ++k) {
      own_payloads_[k] = std::move(earlier[k].payload);
      own_checksums_[k] = checksum64(own_payloads_[k].data(), own_payloads_[k].size());
    }
    const wire::GradientShard& g = earlier[0].header.gradient();
    mine_ = LocalContribution{g.tokens(), g.loss(), g.overflow()};
    logger().info(str("round ", round_, ": reusing the contribution this worker published before it restarted"));
    return true;
  }

  void publish_contributions(const float* grad, const LocalContribution& mine) {
    if (reuse_earlier_contributions()) return;
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
    // Our own files, also from an earlier life: the syncer never mirrors them into the inbox.
    for (fs::directory_iterator it(outbox_round_dir(), ec), end; !ec && it != end; it.increment(ec)) {
      const std::string name = it->path().filename().string();
      if (name.ends_with(".gbx") && name.find(".tmp") == std::string::npos) names.insert(name);
    }
    return names;
  }

  fs::path outbox_round_dir() const { return config_.local_dir / "outbox" / round_dir_name(round_); }

  // Reads and validates a peer file of this round; nullopt (logged, counted) when it must not be used.
  std::optional<wire::WireFile> read_peer(const std::string& name) {
    if (rejected_this_round_.count(name)) return std::nullopt;
    fs::path path = inbox_dir() / name;
    if (!fs::exists(path.string() + ".flag") && fs::exists(outbox_round_dir() / name)) path = outbox_round_dir() / name;
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
    // Equal epochs (two eras of a resumed run) fall back to name order: the same on every replica.
    std::stable_sort(found.begin(), found.end(), [](const Agreement& a, const Agreement& b) { return a.epoch < b.epoch; });
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
    shards_[k].view = commit.view();
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
      if (c.worker == config_.worker && !own_payloads_[k].empty() && c.checksum == own_checksums_[k]) {
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
    shard.view = g.view();
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
    uint32_t owners_to_wait_for = 0;  // earlier owners that may still publish
    for (uint32_t epoch = 0; epoch < round_members_.size(); ++epoch) {
      if (owner(k, epoch) != config_.worker) {
        // One that announced its departure will not publish: no failover timeout for it.
        if (!departed_.count(owner(k, epoch))) ++owners_to_wait_for;
        continue;
      }
      const double epoch_start = owners_to_wait_for * config_.failover_timeout_s;
      if (elapsed < epoch_start) return;
      if (own_agreements_.count(agreement_name(config_.pattern, k, epoch, config_.worker))) return;
      request_contributions(k);
      std::vector<std::string> present{config_.worker};
      for (const std::string& member : round_members_)
        if (member != config_.worker && !refused_workers_.count(member) && visible.count(contribution_name(member, k)))
          present.push_back(member);
      const bool everyone = present.size() == round_members_.size();
      if (!everyone && elapsed < epoch_start + contribution_deadline()) return;
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
    for (const std::string& member : round_members_) {
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
    stats_.contributions_left_out += round_members_.size() - contributors.size();
    if (contributors.size() < round_members_.size()) {
      std::string missing;
      for (const std::string& member : round_members_)
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
      fill_view(commit->mutable_view(), k, contributors);
    } else {
      const Range range = shard_range(n_, config_.shard_count, k);
      wire::GradientShard* g = new_shard(header, k);
      g->set_reduced(true);
      g->set_epoch(epoch);
      fill(g->mutable_contributors());
      fill_view(g->mutable_view(), k, contributors);
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

  // Replica checks (Note [Elastic membership], repair): every fingerprint round's checksums
  // are grouped; the replica outside the winning group reloads the agreed state.
  void check_fingerprints() {
    for (auto it = own_fingerprints_.begin(); it != own_fingerprints_.end();) {
      const uint64_t round = it->first;
      std::map<std::string, uint64_t>& seen = peer_fingerprints_[round];
      const size_t before = seen.size();
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
          const uint64_t theirs = file.header.fingerprint().parameters_checksum();
          seen[file.header.fingerprint().worker()] = theirs;
          if (theirs != it->second) {
            ++stats_.fingerprint_mismatches;
            logger().error(str("replica divergence: after round ", round, " ", file.header.fingerprint().worker(),
                               " holds parameters ", to_hex64(theirs), ", ", config_.worker, " holds ",
                               to_hex64(it->second)));
          }
        } catch (const std::exception& e) {
          reject(file_name, e.what());
        }
      }
      if (seen.size() != before && agreed_checksum(round, it->second, seen) != it->second) {
        logger().error(str("after round ", round, " this replica is in the minority; reloading the agreed state"));
        resync_needed_ = true;
      }
      if (round + static_cast<uint64_t>(config_.gc_window) <= round_) {
        peer_fingerprints_.erase(round);
        it = own_fingerprints_.erase(it);
      } else {
        ++it;
      }
    }
    if (resync_needed_) {
      own_fingerprints_.clear();
      peer_fingerprints_.clear();
    }
  }

  // The largest group of equal checksums wins; a tie goes to the group of the smallest name.
  // Remembered, so that a reload never picks a checkpoint the replicas disagreed with.
  uint64_t agreed_checksum(uint64_t round, uint64_t own, const std::map<std::string, uint64_t>& peers) {
    std::map<uint64_t, std::pair<size_t, std::string>> groups;  // checksum -> (size, smallest name)
    auto add = [&](const std::string& worker, uint64_t checksum) {
      auto& g = groups[checksum];
      if (g.first++ == 0 || worker < g.second) g.second = worker;
    };
    add(config_.worker, own);
    for (const auto& [worker, checksum] : peers) add(worker, checksum);
    const auto best = std::max_element(groups.begin(), groups.end(), [](const auto& a, const auto& b) {
      return a.second.first != b.second.first ? a.second.first < b.second.first : a.second.second > b.second.second;
    });
    agreed_fingerprints_[round] = best->first;
    while (agreed_fingerprints_.size() > 64) agreed_fingerprints_.erase(agreed_fingerprints_.begin());
    return best->first;
  }

  // Rounds more than gc_window behind are done: drop our files (the syncer then deletes the
  // shared copies) and our local mirror of everyone else's.
  void collect_garbage(uint64_t round) {
    if (round <= static_cast<uint64_t>(config_.gc_window)) return;
    uint64_t limit = round - config_.gc_window;  // rounds < limit go
    // Keep what a joiner replays after the oldest kept folder checkpoint.
    if (replay_floor_) limit = std::min<uint64_t>(limit, *replay_floor_ + 1);
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
  bool shards_from_run_ = false;
  bool run_config_published_ = false;
  // Membership (Note [Elastic membership]).
  std::map<uint64_t, std::vector<std::string>> views_;          // expected contributors by round
  std::map<uint64_t, std::vector<std::string>> applied_views_;  // members of rounds applied
  std::vector<std::string> round_members_;                      // this round's; empty: following
  bool member_ = false;
  std::set<std::string> departed_;  // members of this round that announced "left"
  LagDeadline deadline_;
  std::set<std::string> lag_seen_;
  bool resync_needed_ = false;
  // Live control (Note [Live control]).
  AgreedControl agreed_control_;
  std::string control_text_seen_;
  // Folder checkpoints.
  std::unique_ptr<CheckpointPublisher> publisher_;
  std::optional<LocalCheckpoint> local_checkpoint_;
  std::optional<uint64_t> last_published_step_;
  std::optional<uint64_t> replay_floor_;
  std::set<std::string> broken_checkpoints_;
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
  std::map<uint64_t, std::map<std::string, uint64_t>> peer_fingerprints_;
  std::map<uint64_t, uint64_t> agreed_fingerprints_;  // round -> the winning checksum
  std::set<std::string> checked_fingerprints_;
  std::set<std::string> checked_configs_;
  std::set<std::string> refused_workers_;
  uint64_t rounds_done_ = 0;
  // Heartbeats.
  std::deque<std::pair<std::chrono::system_clock::time_point, uint64_t>> uploads_;
  Clock::time_point last_heartbeat_{};
  std::string last_heartbeat_name_;
  std::string last_heartbeat_state_;
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
  GB_REQUIRE(std::set<std::string>(members.begin(), members.end()).size() == members.size(), "--peers: a name is repeated");
  GB_REQUIRE(shard_count >= 1 && shard_count <= 4096, "--shards ", shard_count, ": must be 1..4096");
  GB_REQUIRE(contribution_timeout_s > 0 && failover_timeout_s > contribution_timeout_s,
             "--failover-timeout must exceed --contribution-timeout (got ", failover_timeout_s, " and ",
             contribution_timeout_s, ")");
  GB_REQUIRE(gc_window >= 2, "--gc-window ", gc_window, ": must be at least 2");
  GB_REQUIRE(deadline_floor_s > 0, "--deadline-floor ", deadline_floor_s, ": must be > 0");
  GB_REQUIRE(deadline_k >= 0, "--deadline-k ", deadline_k, ": must be >= 0");
  GB_REQUIRE(heartbeat_interval_s >= 0 && stale_after_s > heartbeat_interval_s, "--stale-after ", stale_after_s,
             ": must exceed --heartbeat-interval (", heartbeat_interval_s, ")");
  GB_REQUIRE(checkpoint_failover_s > 0, "--checkpoint-failover ", checkpoint_failover_s, ": must be > 0");
  GB_REQUIRE(keep_folder_checkpoints >= 1, "--keep-folder-checkpoints: must be >= 1");
}

std::unique_ptr<GradientExchange> make_folder_exchange(FolderExchangeConfig config) {
  return std::make_unique<FolderExchange>(std::move(config));
}

std::string round_dir_name(uint64_t round) {
  char name[32];
  std::snprintf(name, sizeof name, "rounds/r%08llu", static_cast<unsigned long long>(round));
  return name;
}

uint64_t newest_round_folder(const std::filesystem::path& root) {
  uint64_t newest = 0;
  std::error_code ec;
  for (fs::directory_iterator it(root / "rounds", ec), end; !ec && it != end; it.increment(ec)) {
    unsigned long long r = 0;
    if (std::sscanf(it->path().filename().c_str(), "r%llu", &r) == 1) newest = std::max<uint64_t>(newest, r);
  }
  return newest;
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

#include "exchange/folder_exchange.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <set>

#include "common/atomic_file.h"
#include "common/checksum.h"
#include "common/error.h"
#include "exchange/checkpoint_duty.h"
#include "exchange/control_agreement.h"
#include "exchange/exchange_context.h"
#include "exchange/membership.h"
#include "exchange/membership_views.h"
#include "exchange/one_caller.h"
#include "exchange/replica_check.h"
#include "exchange/round_agreement.h"
#include "exchange/round_gc.h"
#include "exchange/run_config_check.h"
#include "mirror/disk_mirror.h"

namespace gradbox::exchange {
namespace {

namespace fs = std::filesystem;

bool contains(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

std::string join_names(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ",") + n;
  return out.empty() ? "(none)" : out;
}

FolderExchangeConfig with_defaults(FolderExchangeConfig config) {
  if (config.members.empty()) config.members = {config.worker};
  std::sort(config.members.begin(), config.members.end());
  if (config.shard_count == 0)
    config.shard_count = config.pattern == ExchangePattern::sharded ? static_cast<uint32_t>(config.members.size()) : 1;
  config.validate();
  return config;
}

class FolderExchange final : public GradientExchange {
 public:
  FolderExchange(FolderExchangeConfig config, mirror::Mirror& mirror, mirror::Clock& clock,
                 std::unique_ptr<mirror::Mirror> owned_mirror)
      : owned_mirror_(std::move(owned_mirror)),
        shards_from_run_(config.shard_count == 0),
        context_(with_defaults(std::move(config)), mirror, clock),
        deadline_(context_.config.deadline_floor_s, context_.config.contribution_timeout_s, context_.config.deadline_k),
        beats_(context_),
        views_(context_),
        configs_(context_),
        replicas_(context_),
        control_(context_),
        checkpoints_(context_, replicas_, [this](uint64_t step) { return checkpoint_members(step); }),
        agreement_(
            context_, deadline_,
            [this](wire::RoundView* view, const std::vector<Contributor>& contributors) { decide_view(view, contributors); },
            [this](const std::string& worker) { return configs_.refused(worker); }) {
    if (!context_.config.local_dir.empty()) {
      fs::create_directories(context_.config.local_dir / "exchange");
      earlier_lives_ = earlier_lives(stats_file(), context_.config.worker);  // Note [Counters across lives]
    }
    views_.expect(1, context_.config.members);  // a new run, unless join() finds an existing one
    if (!shards_from_run_) configs_.publish();   // otherwise join() may still adopt the run's
  }

  void between_rounds(uint64_t step) override {
    const OneCaller::Call call(caller_, "FolderExchange::between_rounds");
    if (left_) return;
    step_ = step;
    checkpoints_.maintain();
    if (beats_.seconds_since_publish() >= context_.config.heartbeat_interval_s)
      publish_heartbeat(agreement_.member() ? "live" : beats_.last_state().empty() ? "joining" : beats_.last_state());
  }

  std::string describe() const override {
    const FolderExchangeConfig& c = context_.config;
    return str(pattern_name(c.pattern), ", ", c.shard_count, " shard(s), ", codec::codec_name(c.codec.codec), "+zstd, ",
               views_.expected(1) ? "founding members " + join_names(c.members) : "joining a running run");
  }

  JoinPlan join(const fs::path& run_dir, int64_t local_step) override {
    const OneCaller::Call call(caller_, "FolderExchange::join");
    const FolderExchangeConfig& c = context_.config;
    const double start = context_.clock.now_s();
    if (c.wait_for_syncer) wait_for_first_listing(start);
    refuse_live_namesake(start);
    if (shards_from_run_) adopt_run_shards();
    configs_.check_peers(true);  // a mismatch is refused before anything is loaded
    configs_.publish();
    JoinPlan plan;
    const bool has_checkpoint = checkpoints_.newest(false, start).has_value();
    // Round 1 agreed means the founders have started: anyone else follows and is let in later.
    const bool started = newest_round_seen() > 1 || round_has_agreement(1);
    const bool founding_member = contains(c.members, c.worker) && !started;
    if (!has_checkpoint && !started && c.members.front() == c.worker) {
      plan.founder = true;  // publishes the initial weights (the trainer's step-0 checkpoint)
      context_.log().info(str("founding run ", c.run_id, " with ", join_names(c.members)));
      return plan;
    }
    plan.founder = founding_member;
    if (!founding_member) views_.forget_expected();  // follow until an agreement lets this worker in
    if (founding_member && !has_checkpoint && local_step < 0 && starts_from_own_initial_state(start)) {
      plan.own_initial_state = true;
      publish_heartbeat("joining");
      return plan;
    }
    if (!has_checkpoint)
      context_.log().info(str("waiting for ", c.members.front(), " to publish the initial weights of run ", c.run_id));
    std::optional<FolderCheckpoint> newest = checkpoints_.newest(!has_checkpoint, start);
    if (newest && static_cast<int64_t>(newest->step) > local_step) {
      plan.checkpoint = checkpoints_.fetch(*newest, run_dir, start);
      context_.log().info(str(founding_member ? "starting run " : "joining run ", c.run_id,
                              " from the folder checkpoint of round ", newest->step, " (by ", newest->publisher, ")"));
    } else if (newest) {
      context_.log().info(str("joining run ", c.run_id, " from the local checkpoint of round ", local_step,
                              " (the folder's newest is round ", newest->step, ")"));
    }
    publish_heartbeat("joining");
    return plan;
  }

  bool will_contribute(uint64_t round) override {
    const OneCaller::Call call(caller_, "FolderExchange::will_contribute");
    learn_open_round(round);
    // Every shard of the round agreed already: a joiner that caught up to the round before (and
    // may enter late) or a restarted member still in the round's view would compute steps that
    // are thrown away. It replays the agreement instead.
    if (round_agreed_in_every_shard(round)) return false;
    if (const std::vector<std::string>* view = views_.expected(round))
      return contains(*view, context_.config.worker) || enters_late(round);
    return !beats_.anyone_live();  // nobody to follow: this worker may have to resume the run itself
  }

  double round_age_s(uint64_t round) const override {
    if (opened_.first != round || opened_.second <= 0) return 0;
    if (!enters_late(round) && !context_.config.boxes_from_agreement) return 0;
    return std::max(0.0, static_cast<double>(context_.clock.unix_ms() - opened_.second) / 1000.0);
  }

  RoundResult all_reduce(uint64_t round, float* grad, size_t n, const LocalContribution& mine) override {
    const OneCaller::Call call(caller_, "FolderExchange::all_reduce");
    const FolderExchangeConfig& c = context_.config;
    const double start = context_.clock.now_s();
    if (rounds_done_ == 0) first_round_start_s_ = start;
    const uint64_t written_before = context_.stats.round_bytes_written;
    configs_.publish();
    configs_.check_peers(rounds_done_ == 0);
    const std::vector<std::string>* view = views_.expected(round);
    const bool guest = view && !contains(*view, c.worker) && enters_late(round) && mine.tokens > 0;
    if (guest)
      context_.log().info(str("round ", round, ": entered late with ", mine.tokens,
                              " tokens; in the average if the round is not agreed before they arrive"));
    agreement_.start(round, grad, n, mine, view ? *view : std::vector<std::string>{}, guest);
    // Note [Overlapped time-boxed rounds]: everyone's box closes together; an owner leaves
    // nobody out before the close plus the contribution timeout (waiting costs no compute).
    if (c.boxes_from_agreement && c.round_seconds > 0 && opened_.first == round && opened_.second > 0)
      agreement_.leave_out_not_before(start - static_cast<double>(context_.clock.unix_ms() - opened_.second) / 1000.0 +
                                      c.round_seconds + c.contribution_timeout_s);
    refresh_peers();

    RoundResult result;
    bool waited = false;
    double next_housekeeping = 1.0;
    double live_seen_s = context_.clock.now_s();
    while (!agreement_.poll()) {
      waited = true;
      if (agreement_.overtaken()) {
        result.resync = true;
        break;
      }
      const double elapsed = agreement_.seconds_since_contribution();
      if (elapsed >= next_housekeeping) {
        next_housekeeping = elapsed + 1.0;
        context_.check_alive();
        checkpoints_.maintain();
        refresh_peers();
        // A member waiting out a long round is alive: without beats it would look dead.
        if (beats_.seconds_since_publish() >= c.heartbeat_interval_s)
          publish_heartbeat(agreement_.member() ? "live" : beats_.last_state().empty() ? "joining" : beats_.last_state());
        // The others are rounds ahead and this round still cannot be applied (its files are
        // gone): this worker fell behind and reloads the agreed state.
        if (elapsed >= c.failover_timeout_s && newest_round_seen() > round + 1) {
          context_.log().warn(str("round ", round, " is still not applicable after ", elapsed,
                                  " s while the run is at round ", newest_round_seen(), "; reloading the agreed state"));
          result.resync = true;
          break;
        }
        if (!agreement_.member()) {
          if (follower_cannot_catch_up()) {
            result.resync = true;
            break;
          }
          if (elapsed >= c.stale_after_s && may_resume_run()) {
            // Without a gradient (it only followed) its round is empty: everyone skips it, and
            // it contributes from the next round on.
            resume_run_alone();
            next_housekeeping = 1.0;
            continue;
          }
        }
      }
      // A member waits at most a deadline or a failover for each owner, so a long wait is a
      // fault. A follower waits for a round it has no part in, which may be a DiLoCo round of an
      // hour: it gives up only once nobody has been live for as long.
      if (!agreement_.member() && beats_.anyone_live()) live_seen_s = context_.clock.now_s();
      if (elapsed > c.give_up_timeout_s && context_.clock.now_s() - live_seen_s > c.give_up_timeout_s)
        throw std::runtime_error(str("round ", round, ": no usable agreement after ", c.give_up_timeout_s,
                                     " s (folder ", context_.mirror.where(round_dir_name(round)), ")"));
      context_.clock.sleep_s(c.poll_interval_s);
    }
    result.wait_seconds = context_.clock.now_s() - start;
    result.bytes_written = context_.stats.round_bytes_written - written_before;
    if (result.resync) return resync(result);
    return finish_round(round, mine, waited, result);
  }

  void leave() override {
    const OneCaller::Call call(caller_, "FolderExchange::leave");
    if (left_) return;
    left_ = true;
    // A checkpoint being published (the final one, typically) gets its manifest if the syncer
    // uploads its parts soon; otherwise the next worker in line publishes it.
    const double start = context_.clock.now_s();
    try {
      while (checkpoints_.publishing() && context_.clock.now_s() - start < 30) {
        context_.check_alive();
        checkpoints_.maintain();
        context_.clock.sleep_s(0.02);
      }
      if (final_round_) drop_finished_rounds(*final_round_, start);
    } catch (const std::exception& e) {
      context_.log().warn(str("leaving before the folder checkpoint is complete: ", e.what()));
    }
    publish_heartbeat("left");
    write_stats();
  }

  // Note [A finished run's rounds] in folder_exchange.h.
  void drop_finished_rounds(uint64_t final_round, double start) {
    const std::optional<FolderCheckpoint> last = checkpoints_.newest_from(final_round, start, kFinishedRunWaitS);
    if (!last) {
      context_.log().info(str("leaving the rounds after the oldest kept folder checkpoint in the folder: no folder "
                              "checkpoint of the final round ", final_round, " after ", kFinishedRunWaitS, " s"));
      return;
    }
    const uint64_t kept = collect_round_garbage(context_.mirror, final_round, context_.config.gc_window, std::nullopt);
    context_.log().info(str("the run is over and ", last->dir_rel, " holds its final state: this worker's files of rounds "
                            "before ", kept, " are withdrawn"));
  }

  bool wants_state_after(uint64_t round) const override { return replicas_.due(round); }
  void after_update(uint64_t round, const float* params, size_t n) override {
    const OneCaller::Call call(caller_, "FolderExchange::after_update");
    replicas_.publish(round, params, n);
  }

  uint64_t offer_partial(uint64_t round, const float* delta, size_t n, const LocalContribution& mine) override {
    const OneCaller::Call call(caller_, "FolderExchange::offer_partial");
    if (!context_.config.partial_deltas || left_ || mine.tokens == 0 || applied_round_ + 1 != round) return 0;
    const std::vector<std::string>* view = views_.expected(round);
    if (!view || !contains(*view, context_.config.worker)) return 0;  // owners wait only for members
    return agreement_.publish_partial(round, delta, n, mine);
  }

  bool final_check(uint64_t round, const float* params, size_t n) override {
    const OneCaller::Call call(caller_, "FolderExchange::final_check");
    const FolderExchangeConfig& c = context_.config;
    replicas_.publish(round, params, n, ReplicaCheck::Due::always);
    // Who to wait for: the last round's contributors (they finish within about a round of each
    // other), and every other live replica at most a round behind: after a disputed round the
    // verdict must count the same fingerprints everywhere, or two halves of a tie each find
    // themselves the majority. One that died meanwhile never reports, hence the bound.
    std::vector<std::string> expected;
    if (agreement_.round() == round)
      for (const Contributor& contributor : agreement_.contributors()) expected.push_back(contributor.worker);
    beats_.refresh();
    for (const auto& [worker, beat] : beats_.peers())
      if (beats_.fresh(beat) && beat.state != "left" && beat.applied_round + 1 >= round && !contains(expected, worker))
        expected.push_back(worker);
    const double start = context_.clock.now_s();
    while (true) {
      const ReplicaCheck::Verdict verdict = replicas_.verdict(round);
      const bool everyone = !expected.empty() && std::all_of(expected.begin(), expected.end(), [&](const std::string& m) {
        return verdict.seen.count(m) > 0;
      });
      if (everyone || context_.clock.now_s() - start >= c.failover_timeout_s) {
        final_round_ = round;
        settle_final_state(round, verdict);
        write_stats();
        return verdict.minority;
      }
      context_.check_alive();
      context_.clock.sleep_s(0.05);
    }
  }

  // A disputed last round cannot be repaired by replaying it (the minority would replay the
  // same agreements again), so the agreed state itself travels: the smallest-named replica of
  // the winning group publishes its final checkpoint out of turn, and a minority replica waits
  // (bounded) for it before it reloads.
  void settle_final_state(uint64_t round, const ReplicaCheck::Verdict& verdict) {
    const FolderExchangeConfig& c = context_.config;
    const std::optional<uint64_t> agreed = replicas_.agreed(round);
    if (!agreed) return;
    const bool disputed = std::any_of(verdict.seen.begin(), verdict.seen.end(), [&](const auto& w) { return w.second != *agreed; });
    if (!disputed) return;
    const double start = context_.clock.now_s();
    auto waited_too_long = [&] { return context_.clock.now_s() - start >= c.give_up_timeout_s; };
    if (!verdict.minority) {
      const auto first = std::find_if(verdict.seen.begin(), verdict.seen.end(), [&](const auto& w) { return w.second == *agreed; });
      if (first->first != c.worker || !checkpoints_.publish_now(round)) return;
      while (checkpoints_.publishing() && !waited_too_long()) {
        context_.check_alive();
        checkpoints_.maintain();
        context_.clock.sleep_s(0.05);
      }
      return;
    }
    ++context_.stats.resyncs;
    context_.log().error(str("after the last round (", round, ") this replica is in the minority of ", verdict.seen.size(),
                             " fingerprints; waiting for the agreed state, then reloading it"));
    views_.forget_expected();
    while (!waited_too_long()) {
      const std::optional<FolderCheckpoint> newest = checkpoints_.newest(false, start);
      if (newest && newest->step >= round && newest->parameters_checksum == *agreed) return;
      if (context_.clock.now_s() - start >= c.failover_timeout_s + c.checkpoint_failover_s) return;  // reload what there is
      context_.check_alive();
      checkpoints_.maintain();
      context_.clock.sleep_s(0.05);
    }
  }

  void after_checkpoint(uint64_t step, const fs::path& dir, uint64_t tokens, uint64_t parameters_checksum) override {
    const OneCaller::Call call(caller_, "FolderExchange::after_checkpoint");
    checkpoints_.local_checkpoint_written(step, dir, tokens, parameters_checksum);
  }

  std::optional<fs::path> fetch_agreed_state(const fs::path& run_dir) override {
    const OneCaller::Call call(caller_, "FolderExchange::fetch_agreed_state");
    const double start = context_.clock.now_s();
    std::optional<FolderCheckpoint> newest = checkpoints_.newest(true, start);
    GB_CHECK(newest.has_value(), "no folder checkpoint to reload");
    // Replaying from before a round this replica lost twice would lose it again (the agreements
    // it sees are not the majority's): wait, bounded, for the majority's next checkpoint.
    const uint64_t past = replicas_.must_reload_past();
    if (newest->step < past)
      context_.log().warn(str("a replay from the checkpoint of round ", newest->step, " came out in the minority of round ",
                              past, " again; waiting for a checkpoint of round ", past, " or later"));
    while (newest->step < past && context_.clock.now_s() - start < context_.config.give_up_timeout_s) {
      context_.check_alive();
      checkpoints_.maintain();
      if (beats_.seconds_since_publish() >= context_.config.heartbeat_interval_s) publish_heartbeat("joining");
      context_.clock.sleep_s(context_.config.poll_interval_s);
      newest = checkpoints_.newest(true, start);
    }
    fs::path dir = checkpoints_.fetch(*newest, run_dir, start);
    context_.log().warn(str("reloaded the agreed state: folder checkpoint of round ", newest->step, " by ", newest->publisher));
    views_.forget_expected();
    return dir;
  }

 private:
  // Note [Founders' own initial weights]: waits for the first member's run config (or a
  // checkpoint, which then serves as for any joiner) and says whether it offers this worker's
  // own step-0 checksum.
  bool starts_from_own_initial_state(double start) {
    const FolderExchangeConfig& c = context_.config;
    const std::string& first = c.members.front();
    if (c.initial_state_checksum == 0) return false;
    while (context_.clock.now_s() - start < c.give_up_timeout_s) {
      const std::vector<uint64_t> offered = configs_.initial_states_of(first);
      if (std::find(offered.begin(), offered.end(), c.initial_state_checksum) != offered.end()) {
        context_.log().info(str("starting run ", c.run_id, " from this worker's own initial weights: ", first,
                                "'s are the same (checksum ", to_hex64(c.initial_state_checksum), ")"));
        return true;
      }
      if (!offered.empty()) {
        context_.log().warn(str(first, "'s initial weights are not this worker's (checksum ", to_hex64(c.initial_state_checksum),
                                " here; another torch build?): fetching them from its checkpoint"));
        return false;
      }
      if (checkpoints_.newest(false, start)) return false;
      context_.check_alive();
      context_.clock.sleep_s(std::max(c.poll_interval_s, 0.05));
    }
    return false;
  }

  void wait_for_first_listing(double start) {
    while (context_.mirror.settled_passes() < 1) {
      context_.check_alive();
      GB_CHECK(context_.clock.now_s() - start < context_.config.give_up_timeout_s,
               "the syncer has not listed the shared folder after ", context_.config.give_up_timeout_s, " s (see ",
               context_.mirror.where(""), ")");
      context_.clock.sleep_s(0.02);
    }
  }

  // Note [Elastic membership]: a second session under a live worker's name is refused.
  void refuse_live_namesake(double start) {
    const FolderExchangeConfig& c = context_.config;
    beats_.refresh();
    std::optional<PeerBeat> first = beats_.namesake();
    if (!first || first->state == "left" || !beats_.fresh(*first)) return;
    context_.log().warn(str("another session has used the name ", c.worker, " in run ", c.run_id,
                            " recently; waiting up to ", c.stale_after_s, " s to see whether it is still alive"));
    double last_age = first->age_s;
    while (true) {
      context_.check_alive();
      context_.clock.sleep_s(std::min(1.0, c.heartbeat_interval_s > 0 ? c.heartbeat_interval_s / 4 : 1.0));
      beats_.refresh();
      const std::optional<PeerBeat>& beat = beats_.namesake();
      if (!beat || beat->state == "left" || !beats_.fresh(*beat)) return;  // it was an earlier session, now gone
      if (beat->age_s + 1e-6 < last_age || beat->incarnation != first->incarnation) throw_namesake(*beat);
      last_age = beat->age_s;
      GB_CHECK(context_.clock.now_s() - start < c.give_up_timeout_s, "waited ", c.give_up_timeout_s,
               " s for the heartbeat of another session named ", c.worker);
    }
  }

  [[noreturn]] void throw_namesake(const PeerBeat& beat) const {
    const FolderExchangeConfig& c = context_.config;
    throw InputError(str("--worker ", c.worker, ": another session of run ", c.run_id,
                         " is live under this name (its newest heartbeat arrived ", beat.age_s,
                         " s ago, state ", beat.state, "); give every session its own --worker"));
  }

  void refresh_peers() {
    beats_.refresh();
    // Two sessions with one name at once: the one that started later stops.
    if (const std::optional<PeerBeat>& other = beats_.namesake(); other && other->state != "left" && beats_.fresh(*other)) {
      const Incarnation& me = context_.incarnation;
      if (std::make_pair(me.started_unix_ms(), me.id()) > std::make_pair(other->started_unix_ms, other->incarnation))
        throw_namesake(*other);
    }
    // A member that announced its departure before this round will not publish its agreements,
    // nor will one whose heartbeat went stale before it applied this round (a dead session):
    // no failover wait for either. One that applied this round did publish them.
    std::set<std::string> departed;
    for (const auto& [worker, beat] : beats_.peers())
      if ((beat.state == "left" || !beats_.fresh(beat)) && beat.applied_round < agreement_.round() &&
          contains(agreement_.members(), worker))
        departed.insert(worker);
    agreement_.set_departed(std::move(departed));
    if (!context_.config.late_entry) return;
    // Note [Late entry]: followers caught up to this round, as their beats say.
    std::vector<std::string> guests;
    for (const auto& [worker, beat] : beats_.peers())
      if (beat.state == "ready" && beats_.fresh(beat) && beat.applied_round + 1 >= agreement_.round() &&
          !contains(agreement_.members(), worker) && !configs_.refused(worker))
        guests.push_back(worker);
    agreement_.set_guests(std::move(guests));
  }

  // Note [Late entry]: a worker that starts from a checkpoint of round r-1 (a joiner, a
  // restarted member) learns V_r and when round r opened from r-1's shard-0 agreement, which
  // the folder keeps, and says "ready" once the folder shows nothing newer.
  void learn_open_round(uint64_t round) {
    const FolderExchangeConfig& c = context_.config;
    if (!c.late_entry || left_ || round < 2 || views_.expected(round) || applied_round_ >= round) return;
    const std::string dir = round_dir_name(round - 1);
    // The agreement every replica applies: lowest epoch, then name.
    std::optional<std::pair<uint32_t, std::string>> first;
    for (const mirror::Arrival& file : context_.mirror.list(dir)) {
      const std::optional<AgreementName> parsed = parse_agreement_name(c.pattern, file.name);
      if (parsed && parsed->shard == 0 && (!first || std::make_pair(parsed->epoch, file.name) < *first))
        first = std::make_pair(parsed->epoch, file.name);
    }
    if (!first) return;
    const std::optional<wire::WireFile> file = context_.read_checked(dir + "/" + first->second);
    if (!file) return;
    const wire::RoundView& view = c.pattern == ExchangePattern::sharded ? file->header.gradient().view()
                                                                         : file->header.commit().view();
    if (view.members_size() == 0 || view.agreed_unix_ms() <= 0) return;
    views_.learn(round - 1, view);
    opened_ = {round, view.agreed_unix_ms()};
    applied_round_ = round - 1;
    if (newest_round_seen() <= round) publish_heartbeat("ready");
  }

  // Note [Late entry]: a follower that has applied the round before this one and said "ready".
  bool enters_late(uint64_t round) const {
    return context_.config.late_entry && applied_round_ + 1 == round && beats_.last_state() == "ready";
  }

  void adopt_run_shards() {
    const std::optional<uint32_t> shards = configs_.run_shard_count();
    if (!shards || *shards == context_.config.shard_count) return;
    context_.log().info(str("using the run's --shards ", *shards));
    context_.config.shard_count = *shards;
  }

  // The shards of `round` whose agreement is in the folder.
  std::set<uint32_t> agreed_shards(uint64_t round) const {
    std::set<uint32_t> agreed;
    for (const mirror::Arrival& file : context_.mirror.list(round_dir_name(round)))
      if (std::optional<AgreementName> parsed = parse_agreement_name(context_.config.pattern, file.name))
        agreed.insert(parsed->shard);
    return agreed;
  }
  bool round_agreed_in_every_shard(uint64_t round) const { return agreed_shards(round).size() >= context_.config.shard_count; }
  bool round_has_agreement(uint64_t round) const { return !agreed_shards(round).empty(); }

  uint64_t newest_round_seen() const { return agreement_.newest_round_in_folder(); }

  // Nobody is live: the follower with the smallest name among the fresh ones resumes the run,
  // and only while it sees the folder (Note [Seeing the folder]).
  bool may_resume_run() {
    if (!agreement_.folder_seen_since_start() ||
        context_.clock.now_s() - context_.seen_since_s() < context_.config.stale_after_s)
      return false;
    for (const auto& [worker, beat] : beats_.peers()) {
      if (!beats_.fresh(beat) || beat.state == "left") continue;
      if (beat.state == "live" || worker < context_.config.worker) return false;
    }
    return true;
  }

  void resume_run_alone() {
    const FolderExchangeConfig& c = context_.config;
    ++context_.stats.self_elections;
    context_.log().warn(str("round ", agreement_.round(), ": no live member and no agreement after ", c.stale_after_s,
                            " s; ", c.worker, " resumes the run alone (others join as they come)"));
    views_.expect(agreement_.round(), {c.worker});
    agreement_.become_sole_member();
  }

  // The round this follower needs is gone from the folder and a newer checkpoint exists.
  bool follower_cannot_catch_up() {
    const uint64_t round = agreement_.round();
    if (!context_.mirror.list(round_dir_name(round)).empty()) return false;
    if (newest_round_seen() <= round + 1) return false;
    const std::optional<FolderCheckpoint> newest = checkpoints_.newest(false, context_.clock.now_s());
    if (!newest || newest->step < round) return false;
    context_.log().warn(str("round ", round, " is gone from the folder; reloading the checkpoint of round ", newest->step));
    return true;
  }

  const std::vector<std::string>* checkpoint_members(uint64_t step) const {
    if (const std::vector<std::string>* applied = views_.applied(step)) return applied;
    return step == 0 ? views_.expected(1) : nullptr;
  }

  // What the owner of shard 0 settles with the round (Note [Elastic membership], [Live control]).
  void decide_view(wire::RoundView* view, const std::vector<Contributor>& contributors) {
    beats_.refresh();
    for (const std::string& m : views_.next_view(agreement_.round(), agreement_.members(), contributors, beats_,
                                                 [this](const std::string& w) { return configs_.refused(w); }))
      view->add_next_members(m);
    if (const std::optional<AgreedControl> control = control_.propose(agreement_.round())) {
      view->set_control_json(control->json);
      view->set_control_from_round(control->from_round);
      view->set_control_version(control->version);
    }
    view->set_agreed_unix_ms(context_.clock.unix_ms());
  }

  RoundResult resync(RoundResult result) {
    ++context_.stats.resyncs;
    views_.forget_expected();
    write_stats();
    return result;
  }

  RoundResult finish_round(uint64_t round, const LocalContribution& mine, bool waited, RoundResult result) {
    double loss_sum = 0;
    result.skip = agreement_.skip();
    for (const Contributor& contributor : agreement_.contributors()) {
      result.tokens += contributor.tokens;
      loss_sum += contributor.loss * static_cast<double>(contributor.tokens);
      result.contributions.push_back({contributor.worker, contributor.tokens, contributor.partial});
    }
    result.contributors = static_cast<int>(agreement_.contributors().size());
    result.loss = result.tokens > 0 ? loss_sum / static_cast<double>(result.tokens) : mine.loss;
    views_.learn(round, agreement_.view());
    if (agreement_.view().members_size() > 0) {
      opened_ = {round + 1, agreement_.view().agreed_unix_ms()};
      result.control = control_.learn(agreement_.view());
    }
    ExchangeStats& stats = context_.stats;
    ++stats.rounds;
    ++rounds_done_;
    if (!agreement_.member()) ++stats.followed_rounds;
    if (result.skip) ++stats.skipped_rounds;
    stats.wait_seconds += result.wait_seconds;
    if (replicas_.in_minority(round)) {
      replicas_.forget_own();
      result.resync = true;
      ++stats.resyncs;
      views_.forget_expected();
    }
    checkpoints_.maintain();
    if (context_.config.partial_deltas) agreement_.withdraw_partials(round);
    collect_round_garbage(context_.mirror, round, context_.config.gc_window, checkpoints_.replay_floor());
    applied_round_ = round;
    // A round carries one part of the state (LocalContribution::part): every token is in one
    // round of each part, so part 0's rounds count each token once.
    if (mine.part == 0) applied_tokens_ += result.tokens;
    last_loss_ = result.loss;
    publish_progress_heartbeat(waited);
    write_stats(/*always=*/false);
    return result;
  }

  // Members publish "live" every heartbeat interval; a follower says "ready" every round once it
  // is caught up (an owner only lets in a follower whose beat shows a recent round).
  void publish_progress_heartbeat(bool waited) {
    const bool due = beats_.seconds_since_publish() >= context_.config.heartbeat_interval_s;
    if (agreement_.member()) {
      // A member left out of the next view (its contribution came too late) follows it, caught
      // up: "ready", so an owner lets it back in (and, Note [Late entry], it enters that round
      // late rather than idling through it). Still saying "live", it would stop every follower
      // from resuming the run should the next view's members all die.
      const std::vector<std::string>* next = views_.expected(applied_round_ + 1);
      if (next && !contains(*next, context_.config.worker)) {
        publish_heartbeat("ready");
        return;
      }
      if (due || beats_.last_state() != "live") publish_heartbeat("live");
      return;
    }
    const bool caught_up = waited || newest_round_seen() <= applied_round_ + 1;
    if (caught_up) publish_heartbeat("ready");
    else if (due || beats_.last_state() != "joining") publish_heartbeat("joining");
  }

  void publish_heartbeat(const std::string& state) {
    // Cluster tokens per second since this worker's first round (steady, unlike a per-beat rate).
    const double seconds = rounds_done_ > 0 ? context_.clock.now_s() - first_round_start_s_ : 0.0;
    beats_.publish(state, Progress{applied_round_, step_,
                                   seconds > 0 ? static_cast<double>(applied_tokens_) / seconds : 0.0, last_loss_,
                                   applied_tokens_});
  }

  void write_stats(bool always = true) {
    if (context_.config.local_dir.empty()) return;
    const double now = context_.clock.now_s();
    if (!always && stats_written_s_ && now - *stats_written_s_ < context_.config.stats_interval_s) return;
    stats_written_s_ = now;
    nlohmann::json j = context_.stats.to_json();
    j["worker"] = context_.config.worker;
    j["round"] = applied_round_;
    j["all_lives"] = all_lives(earlier_lives_, j);
    replace_file(stats_file(), j.dump(2));
  }
  fs::path stats_file() const { return context_.config.local_dir / "exchange" / "stats.json"; }

  std::unique_ptr<mirror::Mirror> owned_mirror_;  // first: the parts below use it
  bool shards_from_run_ = false;
  ExchangeContext context_;
  LagDeadline deadline_;
  Heartbeats beats_;
  MembershipViews views_;
  RunConfigCheck configs_;
  ReplicaCheck replicas_;
  ControlAgreement control_;
  CheckpointDuty checkpoints_;
  RoundAgreement agreement_;
  uint64_t rounds_done_ = 0;
  uint64_t applied_round_ = 0;
  std::pair<uint64_t, int64_t> opened_{0, 0};  // a round, and when it opened by its shard-0 agreement's clock
  uint64_t step_ = 0;  // as the trainer last said (between_rounds); 0: one step per round
  uint64_t applied_tokens_ = 0;
  double first_round_start_s_ = 0;
  double last_loss_ = 0;
  std::optional<double> stats_written_s_;  // when stats.json was last written, by the clock
  nlohmann::json earlier_lives_ = nlohmann::json::object();  // Note [Counters across lives]
  bool left_ = false;
  std::optional<uint64_t> final_round_;  // the run's last round, once final_check compared it
  // How long a worker leaving a finished run waits for the final folder checkpoint.
  static constexpr double kFinishedRunWaitS = 30;
  OneCaller caller_;  // Note [One caller at a time]
};

}  // namespace

std::unique_ptr<GradientExchange> make_folder_exchange(FolderExchangeConfig config) {
  auto disk = std::make_unique<mirror::DiskMirror>(config.local_dir);
  mirror::Mirror& mirror = *disk;
  return std::make_unique<FolderExchange>(std::move(config), mirror, mirror::system_clock(), std::move(disk));
}

std::unique_ptr<GradientExchange> make_folder_exchange(FolderExchangeConfig config, mirror::Mirror& mirror,
                                                       mirror::Clock& clock) {
  return std::make_unique<FolderExchange>(std::move(config), mirror, clock, nullptr);
}

}  // namespace gradbox::exchange

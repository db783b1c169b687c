#include "transport/network_exchange.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "common/checksum.h"
#include "common/error.h"
#include "common/log.h"
#include "transport/group_epochs.h"

namespace gradbox::transport {
namespace {

// Each failure is a member lost (or a group that would not form): more than this in one round
// is not the peers dying but this worker unable to work with them.
constexpr int kMaxFailuresInARound = 8;

void give_up_after(int failures, uint64_t round, const std::string& last) {
  if (failures >= kMaxFailuresInARound)
    throw std::runtime_error(str("--transport c10d: round ", round, " failed ", failures, " times in a row; the last: ", last));
}

const log::Logger& logger() {
  static const log::Logger instance("c10d");
  return instance;
}

}  // namespace

NetworkExchange::NetworkExchange(NetworkExchangeConfig config, mirror::Clock& clock)
    : config_(std::move(config)), clock_(clock) {
  if (config_.founders.empty()) config_.founders = {config_.worker};
  std::sort(config_.founders.begin(), config_.founders.end());
}

NetworkExchange::~NetworkExchange() {
  {
    std::lock_guard<std::mutex> lock(beat_mutex_);
    stop_beating_ = true;
  }
  beat_stop_.notify_all();
  if (beat_thread_.joinable()) beat_thread_.join();
}

void NetworkExchange::beat_until_stopped() {
  uint64_t count = 0;
  std::unique_lock<std::mutex> lock(beat_mutex_);
  while (!stop_beating_) {
    try {
      beat_store_->set(str(config_.run_id, "/beat/", config_.worker), std::to_string(++count));
    } catch (const std::exception& e) {
      logger().warn(str("heartbeat: ", e.what()));
    }
    beat_stop_.wait_for(lock, std::chrono::duration<double>(config_.beat_interval_s));
  }
}

bool NetworkExchange::alive(const std::string& worker) {
  const std::string value = store_->get(str(config_.run_id, "/beat/", worker)).value_or("");
  const double now = clock_.now_s();
  auto [it, first_sight] = beats_.try_emplace(worker, Beat{value, now});
  if (!first_sight && it->second.value != value) it->second = {value, now};
  return now - it->second.changed_s < config_.stale_after_s;
}

bool NetworkExchange::next_epoch_started() {
  return store_->get(str(config_.run_id, "/e", epoch_ + 1, "/count")).has_value();
}

void NetworkExchange::arrive(const std::string& tag) {
  const std::string base = str(config_.run_id, "/e", epoch_, "/at/", tag, "/");
  store_->set(base + config_.worker, "1");
  for (;;) {
    bool everyone = true;
    for (const std::string& m : members_) {
      if (m == config_.worker || store_->get(base + m)) continue;
      everyone = false;
      if (!alive(m)) throw GroupFailure(str(m, " stopped beating (no heartbeat for ", config_.stale_after_s, " s)"));
    }
    if (everyone) return;
    if (next_epoch_started()) throw GroupFailure("another member found the group failed");
    clock_.sleep_s(0.002);
  }
}

exchange::JoinPlan NetworkExchange::join(const std::filesystem::path&, int64_t) {
  store_ = std::make_unique<C10dFileStore>(config_.store_path);
  beat_store_ = std::make_unique<C10dFileStore>(config_.store_path);
  beat_thread_ = std::thread([this] { beat_until_stopped(); });
  const std::vector<std::string>& founders = config_.founders;
  GB_REQUIRE(std::find(founders.begin(), founders.end(), config_.worker) != founders.end(), "--worker ",
             config_.worker, ": not among --peers ", join_member_names(founders),
             "; the c10d transport does not yet let workers join a running group (the folder transport does)");
  uint64_t first_epoch = 0;
  if (std::optional<GroupEpoch> newest = newest_group_epoch(*store_, config_.run_id)) {
    // A run that stopped cleanly starts again after its last epoch; one whose members did not all
    // leave is either still running or died: not ours to guess.
    std::vector<std::string> still_in;
    for (const std::string& m : newest->members)
      if (!store_->get(str(config_.run_id, "/left/", m, "/e", newest->epoch))) still_in.push_back(m);
    GB_REQUIRE(still_in.empty(), "--transport c10d: run ", config_.run_id, "'s group is at epoch ", newest->epoch,
               " and ", join_member_names(still_in), " did not leave it (", config_.store_path.string(),
               "); the c10d transport does not yet let workers join a running group. If that run is dead, "
               "delete the store file to start it again");
    first_epoch = newest->epoch + 1;
  }
  epoch_ = first_epoch;
  logger().info(str("forming group epoch ", epoch_, " of run ", config_.run_id, " with ", join_member_names(founders),
                    " (", network_backend_name(config_.backend), ", store ", config_.store_path.string(), ")"));
  for (;;) {
    try {
      form_epoch(founders, config_.join_window_s, true);
      break;
    } catch (const EpochNotFormed& e) {
      logger().warn(e.what());
      ++epoch_;
    }
  }
  return {true, std::nullopt};
}

void NetworkExchange::form_epoch(const std::vector<std::string>& expected, double window_s, bool wait_for_silent) {
  const double start = clock_.now_s();
  EpochRequest request{config_.run_id, config_.worker, epoch_, expected, nullptr, window_s, config_.timeout_s};
  // At the start a founder may not have begun beating yet: the founders wait for each other.
  if (!wait_for_silent) request.alive = [this](const std::string& worker) { return alive(worker); };
  const GroupEpoch epoch = form_group_epoch(*store_, clock_, request);
  GroupSpec spec{str(config_.run_id, "/e", epoch.epoch, "/pg/"), epoch.rank, static_cast<int>(epoch.members.size()),
                 config_.backend, config_.interface, config_.timeout_s, config_.bucket_floats};
  group_ = std::make_unique<NetworkGroup>(*store_, spec);
  members_ = epoch.members;
  ++stats_.epochs_formed;
  stats_.seconds_regrouping += clock_.now_s() - start;
  logger().info(str("group epoch ", epoch.epoch, ": ", join_member_names(members_), " (rank ", epoch.rank, " of ",
                    members_.size(), ", formed in ", clock_.now_s() - start, " s)"));
}

void NetworkExchange::drop_group(const std::string& why) {
  logger().warn(str("group epoch ", epoch_, " (", join_member_names(members_), ") failed: ", why,
                    "; forming the next epoch from the survivors"));
  group_.reset();
  ++epoch_;
}

void NetworkExchange::between_rounds(uint64_t) {
  // Between inner steps (minutes may pass before this worker's next round): if the group failed
  // elsewhere, enter the next epoch now so that the others need not wait for this round's end.
  if (!group_ || clock_.now_s() < next_epoch_check_s_) return;
  next_epoch_check_s_ = clock_.now_s() + 0.5;
  if (!next_epoch_started()) return;
  drop_group("another member found the group failed");
  try {
    form_epoch(members_, config_.regroup_window_s, false);
    reconcile_due_ = true;
  } catch (const EpochNotFormed& e) {
    logger().warn(e.what());  // all_reduce tries the next epoch
    ++epoch_;
  } catch (const GroupFailure& e) {
    drop_group(e.what());
  }
}

void NetworkExchange::agree_initial_state(uint64_t round, float* params, size_t n) {
  arrive("start");
  double rounds[2] = {static_cast<double>(round), -static_cast<double>(round)};
  group_->max(rounds, 2);
  GB_REQUIRE(rounds[0] == -rounds[1], "--transport c10d: the members of run ", config_.run_id,
             " start from different rounds (", -rounds[1], " to ", rounds[0],
             "): their local checkpoints differ; start them from the same checkpoint");
  group_->broadcast(params, n, 0);
}

exchange::RoundResult NetworkExchange::all_reduce(uint64_t round, float* grad, size_t n,
                                                  const exchange::LocalContribution& mine) {
  GB_CHECK(store_, "all_reduce before join");
  const double start = clock_.now_s();
  ++stats_.rounds;
  int failures = 0;
  for (;;) {
    try {
      if (!group_) {
        form_epoch(members_, config_.regroup_window_s, false);
        reconcile_due_ = true;
      }
      exchange::RoundResult result;
      // Members one round apart after a failure meet at "reconcile", then at their rounds.
      if (reconcile_due_) arrive("reconcile");
      if (reconcile_due_ && reconcile(round, grad)) {
        result = held_result_;
      } else {
        if (config_.before_stage) config_.before_stage("arrive", round);
        arrive(str("r", round));
        result = run_round(round, grad, n, mine);
      }
      result.wait_seconds = clock_.now_s() - start;
      return result;
    } catch (const GroupFailure& e) {
      drop_group(e.what());
      give_up_after(++failures, round, e.what());
    } catch (const EpochNotFormed& e) {
      logger().warn(e.what());
      ++epoch_;
      give_up_after(++failures, round, e.what());
    }
  }
}

exchange::RoundResult NetworkExchange::run_round(uint64_t round, float* grad, size_t n,
                                                 const exchange::LocalContribution& mine) {
  auto stage = [&](const char* name) {
    if (config_.before_stage) config_.before_stage(name, round);
  };
  stage("header");
  double header[4] = {static_cast<double>(mine.tokens), static_cast<double>(mine.tokens) * mine.loss,
                      mine.overflow ? 1.0 : 0.0, mine.tokens > 0 ? 1.0 : 0.0};
  group_->sum(header, 4);
  exchange::RoundResult result;
  result.tokens = static_cast<uint64_t>(header[0]);
  result.loss = header[0] > 0 ? header[1] / header[0] : std::numeric_limits<double>::quiet_NaN();
  result.contributors = static_cast<int>(header[3]);
  result.skip = header[2] > 0 || result.tokens == 0;
  if (!result.skip) {
    const float weight = exchange::contribution_weight(mine.tokens, result.tokens);
    input_.resize(n);
    stage("data");
    // In place in the caller's buffer, a bucket at a time, each kept first: a round redone after
    // a failure needs the input back.
    group_->sum(grad, n, [&](size_t begin, size_t end) {
      std::copy(grad + begin, grad + end, input_.begin() + static_cast<std::ptrdiff_t>(begin));
      for (size_t i = begin; i < end; ++i) grad[i] *= weight;
      kept_ = end;
    });
  }
  holding_ = true;
  held_round_ = round;
  held_result_ = result;
  stage("ack");
  double ack = 1;
  group_->sum(&ack, 1);
  holding_ = false;
  kept_ = 0;
  return result;
}

bool NetworkExchange::reconcile(uint64_t round, float* grad) {
  double span[2] = {static_cast<double>(round), -static_cast<double>(round)};
  group_->max(span, 2);
  const uint64_t newest = static_cast<uint64_t>(span[0]), oldest = static_cast<uint64_t>(-span[1]);
  const bool holds = holding_ && held_round_ == round;
  double counts[2] = {round == oldest ? 1.0 : 0.0, round == oldest && holds ? 1.0 : 0.0};
  group_->sum(counts, 2);
  reconcile_due_ = false;
  GB_CHECK(newest - oldest <= 1, "c10d reconcile: members are in rounds ", oldest, " to ", newest,
           " (at most one apart is possible)");
  const bool oldest_all_hold = counts[1] == counts[0];
  GB_CHECK(newest == oldest || oldest_all_hold, "c10d reconcile: a member is in round ", newest,
           " while another lacks round ", oldest, "'s data");
  const bool apply = round == oldest && oldest_all_hold;
  holding_ = false;
  if (!apply) {
    std::copy(input_.begin(), input_.begin() + static_cast<std::ptrdiff_t>(kept_), grad);
    kept_ = 0;
    ++stats_.rounds_redone;
    logger().info(str("round ", round, ": redone in group epoch ", epoch_));
    return false;
  }
  ++stats_.rounds_completed_from_held_data;
  logger().info(str("round ", round, ": completed from the data every member held when epoch ", epoch_ - 1,
                    " failed"));
  kept_ = 0;  // the caller's buffer holds the round's average already
  return true;
}

bool NetworkExchange::final_check(uint64_t round, const float* params, size_t n) {
  if (!group_) return false;
  const uint64_t sum = checksum64(params, n * sizeof(float));
  // Two 32-bit halves fit doubles exactly; max and min agree only if every replica's do.
  double halves[4] = {static_cast<double>(sum >> 32), static_cast<double>(sum & 0xffffffffu),
                      -static_cast<double>(sum >> 32), -static_cast<double>(sum & 0xffffffffu)};
  try {
    arrive("final");
    group_->max(halves, 4);
  } catch (const GroupFailure& e) {
    logger().warn(str("final replica check skipped: ", e.what()));
    return false;
  }
  if (halves[0] == -halves[2] && halves[1] == -halves[3]) {
    logger().info(str("round ", round, ": every replica of group epoch ", epoch_, " holds the same parameters"));
  } else {
    logger().error(str("round ", round, ": the replicas of group epoch ", epoch_, " differ (checksum ", sum, " here)"));
  }
  return false;
}

void NetworkExchange::leave() {
  if (!store_) return;
  store_->set(str(config_.run_id, "/left/", config_.worker, "/e", epoch_), "1");
  group_.reset();
  {
    std::lock_guard<std::mutex> lock(beat_mutex_);
    stop_beating_ = true;
  }
  beat_stop_.notify_all();
  if (beat_thread_.joinable()) beat_thread_.join();
}

std::string NetworkExchange::describe() const {
  return str("c10d over ", network_backend_name(config_.backend), ", group epoch ", epoch_, ": ",
             join_member_names(members_), " (store ", config_.store_path.string(), ")");
}

}  // namespace gradbox::transport

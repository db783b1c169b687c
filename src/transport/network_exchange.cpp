#include "transport/network_exchange.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/atomic_file.h"
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

NetworkExchange::~NetworkExchange() { stop_beating(); }

void NetworkExchange::stop_beating() {
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
      beat_store_->set(key("beat/" + config_.worker), std::to_string(++count));
    } catch (const std::exception& e) {
      logger().warn(str("heartbeat: ", e.what()));
    }
    beat_stop_.wait_for(lock, std::chrono::duration<double>(config_.beat_interval_s));
  }
}

bool NetworkExchange::alive(const std::string& worker) {
  // One that said goodbye in this epoch or the last is gone now, not when its beat goes stale.
  if (store_->get(key(str("left/", worker, "/e", epoch_))) ||
      (epoch_ > 0 && store_->get(key(str("left/", worker, "/e", epoch_ - 1)))))
    return false;
  const std::string value = store_->get(key("beat/" + worker)).value_or("");
  const double now = clock_.now_s();
  auto [it, first_sight] = beats_.try_emplace(worker, Beat{value, now});
  if (!first_sight && it->second.value != value) it->second = {value, now};
  return now - it->second.changed_s < config_.stale_after_s;
}

bool NetworkExchange::next_epoch_started() {
  return store_->get(key(str("e", epoch_ + 1, "/count"))).has_value();
}

void NetworkExchange::arrive(const std::string& tag) {
  const std::string base = key(str("e", epoch_, "/at/", tag, "/"));
  store_->set(base + config_.worker, "1");
  for (;;) {
    bool everyone = true;
    for (const std::string& m : members_) {
      if (m == config_.worker || store_->get(base + m)) continue;
      everyone = false;
      if (!alive(m)) throw GroupFailure(str(m, " left or stopped beating (no heartbeat for ", config_.stale_after_s, " s)"));
    }
    if (everyone) return;
    if (next_epoch_started()) throw GroupFailure("another member found the group failed");
    clock_.sleep_s(0.002);
  }
}

void NetworkExchange::start_beating() {
  beat_store_ = std::make_unique<C10dFileStore>(config_.store_path);
  beat_thread_ = std::thread([this] { beat_until_stopped(); });
}

void NetworkExchange::refuse_live_namesake() {
  const std::optional<std::string> first = store_->get(key("beat/" + config_.worker));
  if (!first) return;
  logger().info(str("checking that no other session of run ", config_.run_id, " beats as ", config_.worker, " (",
                    config_.stale_after_s, " s)"));
  const double start = clock_.now_s();
  while (clock_.now_s() - start < config_.stale_after_s) {
    GB_REQUIRE(store_->get(key("beat/" + config_.worker)) == first, "--worker ", config_.worker,
               ": another session of run ", config_.run_id, " is live under this name (its heartbeat in ",
               config_.store_path.string(), " moves); give this one another name");
    clock_.sleep_s(0.05);
  }
}

exchange::JoinPlan NetworkExchange::join(const std::filesystem::path& run_dir, int64_t) {
  store_ = std::make_unique<C10dFileStore>(config_.store_path);
  refuse_live_namesake();
  start_beating();
  const std::vector<std::string>& founders = config_.founders;
  const bool founder = std::find(founders.begin(), founders.end(), config_.worker) != founders.end();
  uint64_t first_epoch = 0;
  std::optional<GroupEpoch> newest = newest_group_epoch(*store_, config_.run_id);
  if (!newest && !founder) {
    // The founders may not have formed their group yet.
    logger().info(str("waiting for run ", config_.run_id, "'s founders (", join_member_names(founders),
                      ") to form their group"));
    const double start = clock_.now_s();
    while (!(newest = newest_group_epoch(*store_, config_.run_id)) && clock_.now_s() - start < config_.join_window_s)
      clock_.sleep_s(0.1);
    GB_REQUIRE(newest, "--worker ", config_.worker, ": not among --peers ", join_member_names(founders),
               ", and no group of run ", config_.run_id, " formed in ", config_.join_window_s, " s (",
               config_.store_path.string(), ")");
  }
  if (newest) {
    // A run that stopped cleanly starts again after its last epoch; one whose members are still
    // in it is joined (if they beat) or dead.
    std::vector<std::string> still_in;
    for (const std::string& m : newest->members)
      if (!store_->get(key(str("left/", m, "/e", newest->epoch)))) still_in.push_back(m);
    if (!still_in.empty()) {
      std::map<std::string, std::optional<std::string>> first;
      for (const std::string& m : still_in)
        if (m != config_.worker) first[m] = store_->get(key("beat/" + m));
      const double start = clock_.now_s();
      bool beating = false;
      while (!beating && clock_.now_s() - start < config_.stale_after_s + 1) {
        for (const auto& [m, value] : first) beating = beating || store_->get(key("beat/" + m)) != value;
        clock_.sleep_s(0.05);
      }
      GB_REQUIRE(beating, "--transport c10d: run ", config_.run_id, "'s group is at epoch ", newest->epoch, " and ",
                 join_member_names(still_in), " did not leave it, but nobody beats (", config_.store_path.string(),
                 "): the run died. Delete the store file to start it again");
      return join_running_group(run_dir, *newest);
    }
    GB_REQUIRE(founder, "--worker ", config_.worker, ": not among --peers ", join_member_names(founders),
               ", and run ", config_.run_id, "'s group has stopped");
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

exchange::JoinPlan NetworkExchange::join_running_group(const std::filesystem::path& run_dir, const GroupEpoch& running) {
  const int64_t request = store_->add(key("joiners"), 1);
  store_->set(key(str("joiner/", request)), config_.worker);
  logger().info(str("asking to join run ", config_.run_id, "'s group (epoch ", running.epoch, ": ",
                    join_member_names(running.members), "); it admits joiners at its checkpoints"));
  std::optional<std::string> admit;
  double next_note = clock_.now_s() + 60;
  while (!(admit = store_->get(key(str("admit/", request))))) {
    if (clock_.now_s() >= next_note) {
      logger().info("still waiting for the group's next checkpoint to be admitted");
      next_note += 60;
    }
    clock_.sleep_s(0.05);
  }
  // "<epoch>|<step>|<checkpoint copy>|<members>"
  std::vector<std::string> fields;
  std::string field;
  std::istringstream in(*admit);
  while (std::getline(in, field, '|')) fields.push_back(field);
  GB_CHECK(fields.size() == 4, "malformed admission ", *admit);
  epoch_ = std::stoull(fields[0]);
  const std::filesystem::path published = fields[2];
  const std::filesystem::path fetched = run_dir / "checkpoints" / ("c10d-step_" + fields[1]);
  copy_dir_atomic(published, fetched);
  std::vector<std::string> members;
  std::istringstream names(fields[3]);
  while (std::getline(names, field, ',')) members.push_back(field);
  form_epoch(members, config_.join_window_s, false);
  joined_running_ = true;
  logger().info(str("joined run ", config_.run_id, " at step ", fields[1], " from ", published.string()));
  return {false, fetched};
}

std::vector<std::string> NetworkExchange::waiting_joiners() {
  std::vector<std::string> waiting;
  const int64_t requests = std::stoll(store_->get(key("joiners")).value_or("0"));
  for (int64_t n = 1; n <= requests; ++n) {
    if (store_->get(key(str("admit/", n)))) continue;
    const std::optional<std::string> name = store_->get(key(str("joiner/", n)));
    if (!name || std::find(members_.begin(), members_.end(), *name) != members_.end() || !alive(*name)) continue;
    waiting.push_back(str(n, ":", *name));
  }
  return waiting;
}

void NetworkExchange::after_checkpoint(uint64_t step, const std::filesystem::path& dir, uint64_t, uint64_t) {
  if (!group_ || config_.checkpoint_interval <= 0 || step % static_cast<uint64_t>(config_.checkpoint_interval) != 0)
    return;
  try {
    arrive(str("ckpt", step));
    const std::string decision_key = key(str("e", epoch_, "/admit-at/", step));
    std::vector<std::string> joiners;
    if (group_->rank() == 0) store_->set_once(decision_key, join_member_names(waiting_joiners()));
    double count = group_->rank() == 0 ? 1 : 0;
    group_->sum(&count, 1);  // everyone has passed rank 0's decision
    std::istringstream in(store_->get(decision_key).value_or(""));
    for (std::string item; std::getline(in, item, ',');) joiners.push_back(item);
    if (joiners.empty()) return;
    std::vector<std::string> next = members_;
    for (const std::string& j : joiners) next.push_back(j.substr(j.find(':') + 1));
    std::sort(next.begin(), next.end());
    const uint64_t next_epoch = epoch_ + 1;
    if (group_->rank() == 0) {
      const std::filesystem::path copies = config_.store_path.parent_path() / (config_.run_id + ".checkpoints");
      const std::filesystem::path published = copies / dir.filename();
      if (!std::filesystem::exists(published)) copy_dir_atomic(dir, published);
      // Earlier admissions' joiners copied theirs before they entered (the group waited for them).
      for (const auto& entry : std::filesystem::directory_iterator(copies))
        if (entry.path() != published) std::filesystem::remove_all(entry.path());
      for (const std::string& j : joiners)
        store_->set(key("admit/" + j.substr(0, j.find(':'))),
                    str(next_epoch, "|", step, "|", published.string(), "|", join_member_names(next)));
      logger().info(str("admitting ", join_member_names(joiners), " at step ", step, " (checkpoint copied to ",
                        published.string(), ")"));
    }
    // A checkpoint is a clean boundary: every member is at this round with nothing in flight.
    group_.reset();
    epoch_ = next_epoch;
    form_epoch(next, config_.join_window_s, false);
  } catch (const GroupFailure& e) {
    drop_group(e.what());
  }
}

void NetworkExchange::form_epoch(const std::vector<std::string>& expected, double window_s, bool wait_for_silent) {
  const double start = clock_.now_s();
  EpochRequest request{config_.run_id, config_.worker, epoch_, expected, nullptr, window_s, config_.timeout_s};
  // At the start a founder may not have begun beating yet: the founders wait for each other.
  if (!wait_for_silent) request.alive = [this](const std::string& worker) { return alive(worker); };
  const GroupEpoch epoch = form_group_epoch(*store_, clock_, request);
  GroupSpec spec{str(config_.run_id, "/e", epoch.epoch, "/pg/"), epoch.rank, static_cast<int>(epoch.members.size()),
                 config_.backend, config_.interface, config_.timeout_s, config_.bucket_floats, config_.wire, config_.cuda_device};
  group_ = std::make_unique<NetworkGroup>(*store_, spec);
  members_ = epoch.members;
  ++stats_.epochs_formed;
  stats_.seconds_regrouping += clock_.now_s() - start;
  logger().info(str("group epoch ", epoch.epoch, ": ", join_member_names(members_), " (rank ", epoch.rank, " of ",
                    members_.size(), ", formed in ", clock_.now_s() - start, " s)"));
  write_status();
}

void NetworkExchange::write_status(bool left) {
  nlohmann::json j;
  j["worker"] = config_.worker;
  j["run"] = config_.run_id;
  j["backend"] = network_backend_name(config_.backend);
  j["epoch"] = epoch_;
  j["members"] = members_;
  j["round"] = last_round_;
  j["left"] = left;
  j["epochs_formed"] = stats_.epochs_formed;
  j["rounds_redone"] = stats_.rounds_redone;
  j["rounds_streamed"] = stats_.rounds_streamed;
  j["rounds_completed_from_held_data"] = stats_.rounds_completed_from_held_data;
  j["seconds_regrouping"] = stats_.seconds_regrouping;
  j["updated_unix_ms"] = clock_.unix_ms();
  try {
    std::filesystem::create_directories(store_dir() / "status");
    write_file_atomic(store_dir() / "status" / (config_.run_id + "." + config_.worker + ".json"), j.dump());
  } catch (const std::exception& e) {
    logger().warn(str("status file: ", e.what()));
  }
  next_status_s_ = clock_.now_s() + 5;
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
  if (joined_running_) return;  // its checkpoint is the members' state already
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
  return all_reduce(round, grad, n, [&](int, float*) { return mine; });
}

exchange::RoundResult NetworkExchange::all_reduce(uint64_t round, float* grad, size_t n, const Prepare& prepare) {
  GB_CHECK(store_, "all_reduce before join");
  ++stats_.rounds;
  start_round(grad, plan_round(n, config_.bucket_floats), 1.0f);
  return finish_round(round, grad, prepare, clock_.now_s());
}

void NetworkExchange::start_round(float* grad, RoundPlan plan, float scale) {
  plan_ = std::move(plan);
  grad_ = grad;
  scale_ = scale;
  input_.resize(plan_.n);
  chunks_left_ = plan_.chunks_in_bucket;
  kept_.assign(plan_.buckets.size(), false);
  next_to_send_ = 0;
  sending_ = false;
  overflow_ = false;
}

exchange::RoundResult NetworkExchange::finish_round(uint64_t round, float* grad, const Prepare& prepare, double start_s) {
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
        const exchange::LocalContribution mine = prepare(group_->rank(), grad);
        if (config_.before_stage) config_.before_stage("arrive", round);
        arrive(str("r", round));
        open_round(round, mine);
        // Each bucket goes out as soon as it is filled, while the next one is.
        for (size_t b = 0; b < plan_.buckets.size(); ++b) {
          if (chunks_left_[b] > 0) chunks_left_[b] = 0, bucket_ready(b);
          send_ready();
        }
        result = close_round(round);
      }
      result.wait_seconds = clock_.now_s() - start_s;
      last_round_ = round;
      if (clock_.now_s() >= next_status_s_) write_status();
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

void NetworkExchange::open_round(uint64_t round, const exchange::LocalContribution& mine) {
  if (config_.before_stage) config_.before_stage("header", round);
  const double f = plan_.fingerprint;
  double header[5] = {static_cast<double>(mine.tokens), static_cast<double>(mine.tokens) * mine.loss,
                      mine.tokens > 0 ? 1.0 : 0.0, f, f * f};
  group_->sum(header, 5);
  GB_REQUIRE(static_cast<double>(group_->size()) * header[4] == header[3] * header[3], "--transport c10d: the members of group epoch ",
             epoch_, " (", join_member_names(members_), ") split round ", round,
             " into different buckets: they differ in the model, --c10d-overlap-backward, --overlap or --round-seconds");
  open_result_ = {};
  open_result_.tokens = static_cast<uint64_t>(header[0]);
  open_result_.loss = header[0] > 0 ? header[1] / header[0] : std::numeric_limits<double>::quiet_NaN();
  open_result_.contributors = static_cast<int>(header[2]);
  open_result_.skip = open_result_.tokens == 0;
  weight_ = open_result_.skip ? 1.0f : exchange::contribution_weight(mine.tokens, open_result_.tokens);
  overflow_ = overflow_ || mine.overflow;
  sending_ = !open_result_.skip;
  if (sending_ && config_.before_stage) config_.before_stage("data", round);
}

void NetworkExchange::bucket_ready(size_t bucket) {
  // Keep the input (a failed round is redone from it), note a non-finite value, and weight it,
  // in one pass. A bucket kept by an earlier attempt of the round holds its input already.
  const exchange::Span span = plan_.buckets[bucket];
  float* grad = grad_;
  float* input = input_.data();
  if (!kept_[bucket]) {
    const float scale = scale_, weight = sending_ ? weight_ : 1.0f;
    uint32_t exponents = 0;  // all ones in some element's exponent: an Inf or a NaN
    for (size_t i = span.begin; i < span.end; ++i) {
      const float x = grad[i] * scale;
      uint32_t bits;
      std::memcpy(&bits, &x, sizeof bits);
      exponents |= ((bits & 0x7f800000u) == 0x7f800000u) ? 1u : 0u;
      input[i] = x;
      if (sending_) grad[i] = x * weight;
    }
    overflow_ = overflow_ || exponents != 0;
    kept_[bucket] = true;
  } else if (sending_) {
    for (size_t i = span.begin; i < span.end; ++i) grad[i] = input[i] * weight_;
  }
}

void NetworkExchange::send_ready() {
  if (!sending_) return;
  while (next_to_send_ < plan_.buckets.size() && chunks_left_[next_to_send_] == 0) {
    const exchange::Span span = plan_.buckets[next_to_send_];
    group_->start_sum(grad_ + span.begin, span.end - span.begin);
    ++next_to_send_;
  }
}

exchange::RoundResult NetworkExchange::close_round(uint64_t round) {
  exchange::RoundResult result = open_result_;
  if (sending_) group_->wait_started();
  holding_ = true;
  held_round_ = round;
  held_result_ = result;
  if (config_.before_stage) config_.before_stage("ack", round);
  double ack[2] = {1, overflow_ ? 1.0 : 0.0};
  group_->sum(ack, 2);
  result.skip = result.skip || ack[1] > 0;
  holding_ = false;
  sending_ = false;
  kept_.assign(kept_.size(), false);
  return result;
}

class NetworkExchange::Streamed final : public exchange::StreamedRound {
 public:
  explicit Streamed(NetworkExchange& exchange) : exchange_(exchange) {}
  void part_ready(size_t part) noexcept override { exchange_.part_ready(part); }
  exchange::RoundResult finish() override { return exchange_.finish_streamed(); }

 private:
  NetworkExchange& exchange_;
};

std::unique_ptr<exchange::StreamedRound> NetworkExchange::begin_streamed_round(
    uint64_t round, float* grad, size_t n, const std::vector<exchange::Span>& parts,
    const exchange::LocalContribution& mine, float scale) {
  GB_CHECK(store_, "begin_streamed_round before join");
  if (!config_.overlap_backward) return nullptr;
  ++stats_.rounds;
  stream_round_ = round;
  stream_start_s_ = clock_.now_s();
  stream_mine_ = mine;
  stream_failure_.reset();
  stream_error_ = nullptr;
  start_round(grad, plan_round(n, parts, config_.bucket_floats), scale);
  if (!group_ || reconcile_due_) {
    stream_failure_ = "";  // the round is finished the way a failed one is, without streaming
  } else {
    try {
      if (config_.before_stage) config_.before_stage("arrive", round);
      arrive(str("r", round));
      open_round(round, mine);
    } catch (const GroupFailure& e) {
      stream_failure_ = e.what();
    }
  }
  return std::make_unique<Streamed>(*this);
}

void NetworkExchange::part_ready(size_t part) noexcept {
  try {
    for (size_t b : plan_.part_buckets.at(part))
      if (chunks_left_[b] > 0 && --chunks_left_[b] == 0) bucket_ready(b);
    if (!stream_failure_ && !stream_error_) send_ready();
  } catch (const GroupFailure& e) {
    stream_failure_ = e.what();
  } catch (...) {
    stream_error_ = std::current_exception();
  }
}

exchange::RoundResult NetworkExchange::finish_streamed() {
  if (stream_error_) std::rethrow_exception(stream_error_);
  // Parts backward never reached are final as they are.
  for (size_t b = 0; b < plan_.buckets.size(); ++b)
    if (chunks_left_[b] > 0) chunks_left_[b] = 0, bucket_ready(b);
  if (!stream_failure_) {
    try {
      send_ready();
      exchange::RoundResult result = close_round(stream_round_);
      ++stats_.rounds_streamed;
      result.wait_seconds = clock_.now_s() - stream_start_s_;
      last_round_ = stream_round_;
      if (clock_.now_s() >= next_status_s_) write_status();
      return result;
    } catch (const GroupFailure& e) {
      stream_failure_ = e.what();
    }
  }
  // Every bucket's input is kept now (times the scale): the round continues from it as any
  // round that failed does.
  if (!stream_failure_->empty()) drop_group(*stream_failure_);
  sending_ = false;
  scale_ = 1.0f;
  const exchange::LocalContribution mine = stream_mine_;
  return finish_round(stream_round_, grad_, [mine](int, float*) { return mine; }, stream_start_s_);
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
    // The kept buckets go back to the input; the rest were never touched.
    for (size_t b = 0; b < plan_.buckets.size(); ++b)
      if (kept_[b]) std::copy(input_.begin() + static_cast<std::ptrdiff_t>(plan_.buckets[b].begin),
                              input_.begin() + static_cast<std::ptrdiff_t>(plan_.buckets[b].end),
                              grad + plan_.buckets[b].begin);
    start_round(grad, std::move(plan_), 1.0f);
    ++stats_.rounds_redone;
    logger().info(str("round ", round, ": redone in group epoch ", epoch_));
    return false;
  }
  ++stats_.rounds_completed_from_held_data;
  logger().info(str("round ", round, ": completed from the data every member held when epoch ", epoch_ - 1,
                    " failed"));
  kept_.assign(kept_.size(), false);  // the caller's buffer holds the round's average already
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
  store_->set(key(str("left/", config_.worker, "/e", epoch_)), "1");
  group_.reset();
  write_status(true);
  stop_beating();
}

int NetworkExchange::rank() const { return group_ ? group_->rank() : -1; }

void NetworkExchange::publish(const std::string& name, const std::string& value) { store_->set(key(name), value); }

std::optional<std::string> NetworkExchange::read(const std::string& name) { return store_->get(key(name)); }

std::string NetworkExchange::describe() const {
  return str("c10d over ", network_backend_name(config_.backend), " (", wire_dtype_name(config_.wire), " on the wire), group epoch ", epoch_, ": ",
             join_member_names(members_), " (store ", config_.store_path.string(), ")");
}

}  // namespace gradbox::transport

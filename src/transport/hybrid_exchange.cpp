#include "transport/hybrid_exchange.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "common/atomic_file.h"
#include "common/error.h"
#include "common/log.h"
#include "mirror/clock.h"

namespace gradbox::transport {
namespace {

namespace fs = std::filesystem;

const log::Logger& logger() {
  static const log::Logger instance("hybrid");
  return instance;
}

// What the leader's folder round said, for the members: "skip|resync|tokens|loss|contributors|
// control version|from round|control json" (the json last: it may hold anything).
std::string encode(const exchange::RoundResult& r) {
  std::ostringstream out;
  out.precision(17);
  out << r.skip << '|' << r.resync << '|' << r.tokens << '|' << r.loss << '|' << r.contributors << '|'
      << (r.control ? r.control->version : 0) << '|' << (r.control ? r.control->from_round : 0) << '|'
      << (r.control ? r.control->json : "");
  return out.str();
}

exchange::RoundResult decode(const std::string& text) {
  std::vector<std::string> f;
  size_t begin = 0;
  for (int i = 0; i < 7; ++i) {
    const size_t bar = text.find('|', begin);
    GB_CHECK(bar != std::string::npos, "malformed group round result ", text);
    f.push_back(text.substr(begin, bar - begin));
    begin = bar + 1;
  }
  exchange::RoundResult r;
  r.skip = f[0] == "1";
  r.resync = f[1] == "1";
  r.tokens = std::stoull(f[2]);
  r.loss = f[3] == "nan" ? std::nan("") : std::stod(f[3]);
  r.contributors = std::stoi(f[4]);
  if (std::stoull(f[5]) > 0) r.control = exchange::AgreedControl{std::stoull(f[5]), std::stoull(f[6]), text.substr(begin)};
  return r;
}

}  // namespace

HybridExchange::HybridExchange(std::unique_ptr<NetworkExchange> group, HybridExchangeConfig config)
    : group_(std::move(group)), config_(std::move(config)) {}

HybridExchange::~HybridExchange() = default;

exchange::JoinPlan HybridExchange::join(const fs::path& run_dir, int64_t local_step) {
  run_dir_ = run_dir;
  const exchange::JoinPlan in_group = group_->join(run_dir, local_step);
  if (in_group.checkpoint) return in_group;  // a joiner of a running group: the group's state
  const std::string plan_key = str("e", group_->epoch(), "/plan");
  if (group_->rank() == 0) {
    folder_ = config_.make_folder_exchange();
    const exchange::JoinPlan plan = folder_->join(run_dir, local_step);
    std::string shared;
    if (plan.checkpoint)  // the members load what the leader loads
      shared = copy_dir_atomic(*plan.checkpoint, group_->store_dir() / "plan" / plan.checkpoint->filename()).string();
    group_->publish(plan_key, str(plan.founder ? 1 : 0, "|", shared));
    logger().info(str("leading group ", config_.group, " in the shared folder"));
    return plan;
  }
  logger().info(str("waiting for group ", config_.group, "'s leader to join the shared folder's run"));
  std::optional<std::string> plan;
  const std::string leader = group_->members().front();
  while (!(plan = group_->read(plan_key))) {
    if (!group_->member_alive(leader))
      throw std::runtime_error(str("group ", config_.group, "'s leader ", leader,
                                   " stopped before it joined the shared folder's run; see its log"));
    mirror::system_clock().sleep_s(0.05);
  }
  exchange::JoinPlan out;
  out.founder = plan->front() == '1';
  const std::string shared = plan->substr(2);
  if (!shared.empty())
    out.checkpoint = copy_dir_atomic(shared, run_dir / "checkpoints" / ("hybrid-" + fs::path(shared).filename().string()));
  return out;
}

bool HybridExchange::will_contribute(uint64_t round) {
  if (folder_) folder_->will_contribute(round);  // the folder learns the round; the group always computes
  return true;
}

double HybridExchange::round_age_s(uint64_t round) const { return folder_ ? folder_->round_age_s(round) : 0; }

void HybridExchange::agree_initial_state(uint64_t round, float* params, size_t n) {
  group_->agree_initial_state(round, params, n);
}

exchange::RoundResult HybridExchange::lead_folder_round(uint64_t round, float* average, size_t n,
                                                        const exchange::RoundResult& group_round) {
  if (!folder_) {
    logger().info(str("round ", round, ": now leading group ", config_.group, " in the shared folder (joining its run)"));
    folder_ = config_.make_folder_exchange();
    folder_->join(run_dir_, static_cast<int64_t>(round) - 1);
    folder_->will_contribute(round);
  }
  exchange::LocalContribution contribution{group_round.tokens, group_round.loss, group_round.skip, 0};
  return folder_->all_reduce(round, average, n, contribution);
}

void HybridExchange::stop_leading() {
  if (!folder_) return;
  logger().info(str("no longer group ", config_.group, "'s leader: leaving the shared folder's run"));
  folder_->leave();
  folder_.reset();
}

exchange::RoundResult HybridExchange::all_reduce(uint64_t round, float* grad, size_t n,
                                                 const exchange::LocalContribution& mine) {
  const exchange::RoundResult in_group = group_->all_reduce(2 * round - 1, grad, n, mine);
  group_average_.assign(grad, grad + n);
  group_->all_reduce(2 * round, grad, n, [&](int rank, float* buffer) -> exchange::LocalContribution {
    if (rank != 0) {
      stop_leading();
      std::fill(buffer, buffer + n, 0.0f);
      return {0, 0.0, false, 0};
    }
    std::copy(group_average_.begin(), group_average_.end(), buffer);
    const exchange::RoundResult folder = lead_folder_round(round, buffer, n, in_group);
    group_->publish(str("result/", round), encode(folder));
    if (folder.skip || folder.resync) std::fill(buffer, buffer + n, 0.0f);
    return {1, folder.loss, false, 0};
  });
  exchange::RoundResult result = decode(group_->read(str("result/", round)).value_or(""));
  result.wait_seconds = in_group.wait_seconds;
  GB_CHECK(!result.resync, "group ", config_.group, ": its leader's replica must reload the run's state; the hybrid "
                           "transport cannot yet reload a whole group (restart the group's workers)");
  return result;
}

void HybridExchange::between_rounds(uint64_t step) {
  group_->between_rounds(step);
  if (folder_) folder_->between_rounds(step);
}

bool HybridExchange::wants_state_after(uint64_t round) const { return folder_ && folder_->wants_state_after(round); }

void HybridExchange::after_update(uint64_t round, const float* params, size_t n) {
  if (folder_) folder_->after_update(round, params, n);
}

bool HybridExchange::final_check(uint64_t round, const float* params, size_t n) {
  group_->final_check(round, params, n);
  if (folder_ && folder_->final_check(round, params, n))
    logger().error(str("group ", config_.group, "'s replica differs from the run's after round ", round,
                       "; restart the group's workers to load the run's state"));
  return false;
}

void HybridExchange::leave() {
  stop_leading();
  group_->leave();
}

void HybridExchange::after_checkpoint(uint64_t step, const fs::path& dir, uint64_t tokens,
                                      uint64_t parameters_checksum) {
  if (folder_) folder_->after_checkpoint(step, dir, tokens, parameters_checksum);
  group_->after_checkpoint(step, dir, tokens, parameters_checksum);
}

std::string HybridExchange::describe() const {
  return str("hybrid: group ", config_.group, " (", group_->describe(), ")",
             folder_ ? str(", its leader in the shared folder: ", folder_->describe()) : std::string(", a member"));
}

}  // namespace gradbox::transport

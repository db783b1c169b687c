#pragma once
// Note [Hybrid transport]
// Workers that can reach each other (one Kaggle session's two GPUs, the machines of one lab)
// form a group: a NetworkExchange over their own c10d store (--c10d-store, a folder they can
// all lock: local disk for one machine, NFS for a lab; the group is found there by its name,
// --c10d-group). Groups meet through the shared folder, where each group is one worker:
// its leader, the group epoch's rank 0, runs a folder exchange under its own name. A round:
//   1. the group averages its members' vectors over c10d, token-weighted (group round 2q-1);
//   2. the leader contributes that average to the folder round q with the group's token count,
//      so the folder's token-weighted average over groups is the average over every worker;
//   3. the folder's agreed average reaches the members as group round 2q, in which the leader
//      contributes it with weight 1 and the others zeros (the network rounds' failure handling,
//      Note [Network transport], covers this step too); its RoundResult (tokens, loss, skip,
//      live control) goes through the group's store.
// When the leader dies, its group re-forms and redoes round 2q: the new rank 0 starts its own
// folder exchange, enters the folder run as a follower (as any joiner does), takes round q's
// agreement from the folder, and is in a folder view a round or two later; the group's
// contribution is missing from the folder's average for those rounds, nothing else. The old
// leader's name goes stale in the folder like any dead worker's.
// Torch-free.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "exchange/gradient_exchange.h"
#include "transport/network_exchange.h"

namespace gradbox::transport {

struct HybridExchangeConfig {
  std::string group;  // the group's name, for people
  // The leader's folder exchange under this worker's own name; made when this worker becomes
  // its group's rank 0 (the factory may start the syncer).
  std::function<std::unique_ptr<exchange::GradientExchange>()> make_folder_exchange;
};

class HybridExchange final : public exchange::GradientExchange {
 public:
  HybridExchange(std::unique_ptr<NetworkExchange> group, HybridExchangeConfig config);
  ~HybridExchange() override;

  exchange::JoinPlan join(const std::filesystem::path& run_dir, int64_t local_step) override;
  bool will_contribute(uint64_t round) override;
  double round_age_s(uint64_t round) const override;
  void agree_initial_state(uint64_t round, float* params, size_t n) override;
  exchange::RoundResult all_reduce(uint64_t round, float* grad, size_t n,
                                   const exchange::LocalContribution& mine) override;
  void between_rounds(uint64_t step) override;
  bool wants_state_after(uint64_t round) const override;
  void after_update(uint64_t round, const float* params, size_t n) override;
  bool final_check(uint64_t round, const float* params, size_t n) override;
  void leave() override;
  void after_checkpoint(uint64_t step, const std::filesystem::path& dir, uint64_t tokens,
                        uint64_t parameters_checksum) override;
  std::string describe() const override;

 private:
  // Round q through the folder, as the group's leader; starts the folder exchange first if this
  // worker has just become the leader.
  exchange::RoundResult lead_folder_round(uint64_t round, float* average, size_t n,
                                          const exchange::RoundResult& group_round);
  void stop_leading();

  std::unique_ptr<NetworkExchange> group_;
  HybridExchangeConfig config_;
  std::filesystem::path run_dir_;
  std::unique_ptr<exchange::GradientExchange> folder_;
  std::vector<float> group_average_;
};

}  // namespace gradbox::transport

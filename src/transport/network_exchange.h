#pragma once
// Note [Network transport]
// When workers share a network (one machine's GPUs, a lab, a cloud pool), the bytes of every
// round go through LibTorch's c10d collectives (Gloo on CPU, NCCL on CUDA) and the shared
// folder only holds the agreement on who is in the group: a c10d FileStore at
// <shared>/c10d/<run>.store, formed in epochs (Note [Group epochs] in group_epochs.h).
//
// A round, on every member of the epoch's group:
//   1. header:  sum of [tokens, tokens * loss, contributing, plan fingerprint f, f^2]
//               (a tiny all-reduce; everyone's plans agree iff size * sum(f^2) == sum(f)^2)
//   2. data:    sum of w_i * g_i, w_i = contribution_weight(t_i, T), in the caller's buffer,
//               in the buckets of the round's plan (Note [Round plan] in round_plan.h), each
//               all-reduced as soon as it and the ones before it are ready; each bucket's input
//               is kept first, for a round that must be redone
//   3. ack:     sum of [1, overflow], tiny; whoever completes it knows every member has the
//               data, and whether some member's input was not finite (every replica then skips
//               the round; the data itself is not finite then too, so a round completed from
//               held data after a failure in the ack is still skipped by everyone).
// Per-step rounds stream (Note [Backward overlap] in worker/backward_stream.h): the header goes
// between the last forward and its backward, and buckets are started by autograd's hooks as
// backward finishes their parameters, so most of the data is on the wire before backward ends.
// A failure while streaming is kept until the round's end, then the round is finished the way
// any failed round is (below), from the kept inputs.
// The weights are the folder transport's (gradient_exchange.h) and only the order of the fp32
// sums differs, so the two transports agree to rounding; every rank receives the same reduced
// bytes, so replicas stay identical.
//
// Members arrive at each round at different times (a slower GPU, a DiLoCo round of many inner
// steps), so the collectives do not wait for them: each round first passes an arrival barrier
// in the store, and only then runs collectives, under a timeout (--c10d-timeout) that needs to
// cover only their bytes. While it waits at the barrier, a member watches the others'
// heartbeats (a thread of each worker bumps <run>/beat/<worker> twice a second).
//
// A peer that dies closes its sockets: a collective in flight fails at once on its neighbours,
// and they drop the group, which fails it on everyone else. A peer that hangs or dies between
// collectives stops beating and is given up after --c10d-stale-after; one that hangs inside a
// collective, after --c10d-timeout. Nobody restarts: the survivors form the next epoch, the
// registrar waiting for every previous member that still beats (Note [Group epochs]; a member
// busy with inner steps sees the new epoch between two of them and enters it), and, as the new
// group's first collective, they reconcile the round in flight. Each reports the round it is in (q) and whether
// it holds that round's data. A member is one round ahead only if it completed the ack of the
// round before, which needs every member's data; so:
//   - everyone in q and everyone holds q's data: apply q (all have the same bytes);
//   - everyone in q, someone without q's data: redo q in the new group from the kept inputs
//     (nobody applied q: nobody passed its ack);
//   - some in q, some in q + 1: those in q hold q's data and apply it; those in q + 1 redo it.
// Rounds further apart cannot happen (asserted).
//
// A joiner (a worker not among the founders, or one restarted after its group went on without
// it) asks in the store (<run>/joiner/<n>) and waits. At each checkpoint of a round that is a
// multiple of --checkpoint-interval, the members meet; rank 0 names the joiners still waiting
// (and beating), copies its checkpoint into the shared folder (<shared>/c10d/<run>.checkpoints)
// and admits them (<run>/admit/<n>: the epoch, the step, the copy); everyone forms the next
// epoch with them. The joiner loads that checkpoint (the members' state after that very round,
// optimizer and DiLoCo outer state included) and enters at the next round: nobody replays
// anything and no round is in flight, so the new epoch needs no reconcile. The dead worker's contribution to q counts
// when q completes from held data, and not when q is redone; either way every replica applies
// the same thing.
// Torch-free header and protocol; the c10d parts are NetworkGroup and C10dFileStore.
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <exception>
#include <map>
#include <optional>
#include <memory>
#include <mutex>
#include <thread>
#include <string>
#include <vector>

#include "exchange/gradient_exchange.h"
#include "mirror/clock.h"
#include "transport/group_epochs.h"
#include "transport/network_group.h"
#include "transport/round_plan.h"

namespace gradbox::transport {

struct NetworkExchangeConfig {
  std::string run_id;
  std::string worker;
  std::vector<std::string> founders;  // the first epoch's expected members (sorted here)
  std::filesystem::path store_path;   // the c10d FileStore every member can lock
  NetworkBackend backend = NetworkBackend::gloo;
  std::string interface;              // Gloo's network interface; empty: the hostname's address
  double timeout_s = 60;              // a collective (and a peer that hangs in it)
  double join_window_s = 300;         // epoch 0: how long the founders wait for each other
  double regroup_window_s = 120;      // after a failure: the longest survivors wait for a live member
  double stale_after_s = 5;           // a member whose heartbeat has not moved for this long is gone
  double beat_interval_s = 0.5;
  size_t bucket_floats = 4u << 20;    // 16 MB of fp32 per all-reduce
  bool overlap_backward = true;       // per-step rounds stream with backward (begin_streamed_round)
  WireDtype wire = WireDtype::fp32;   // the precision of the gradient buckets on the wire
  int cuda_device = 0;                // NCCL: this worker's GPU
  int64_t checkpoint_interval = 0;    // joiners are admitted at checkpoints of these rounds; 0: never
  // Tests only: called at each stage of a round ("arrive", "header", "data", "ack"), before it runs.
  std::function<void(const char* stage, uint64_t round)> before_stage;
};

struct NetworkStats {
  uint64_t epochs_formed = 0;
  uint64_t rounds = 0;
  uint64_t rounds_streamed = 0;  // per-step rounds whose buckets went out during backward
  uint64_t rounds_completed_from_held_data = 0;  // reconciled: applied what the failed group delivered
  uint64_t rounds_redone = 0;                    // reconciled: all-reduced again in the new group
  double seconds_regrouping = 0;
};

class NetworkExchange final : public exchange::GradientExchange {
 public:
  NetworkExchange(NetworkExchangeConfig config, mirror::Clock& clock);
  ~NetworkExchange() override;

  exchange::JoinPlan join(const std::filesystem::path& run_dir, int64_t local_step) override;
  void agree_initial_state(uint64_t round, float* params, size_t n) override;
  exchange::RoundResult all_reduce(uint64_t round, float* grad, size_t n,
                                   const exchange::LocalContribution& mine) override;
  void between_rounds(uint64_t step) override;
  void after_checkpoint(uint64_t step, const std::filesystem::path& dir, uint64_t tokens,
                        uint64_t parameters_checksum) override;
  bool final_check(uint64_t round, const float* params, size_t n) override;
  void leave() override;
  std::string describe() const override;

  // all_reduce whose contribution is made per attempt by `prepare(rank, grad)` (it fills grad and
  // returns the contribution), just before this worker arrives at the round: after a failure the
  // round may be redone by a group in which this worker has another rank (the hybrid transport's
  // leader is rank 0).
  using Prepare = std::function<exchange::LocalContribution(int rank, float* grad)>;
  exchange::RoundResult all_reduce(uint64_t round, float* grad, size_t n, const Prepare& prepare);
  std::unique_ptr<exchange::StreamedRound> begin_streamed_round(uint64_t round, float* grad, size_t n,
                                                                const std::vector<exchange::Span>& parts,
                                                                const exchange::LocalContribution& mine,
                                                                float scale) override;
  // This worker's rank in the current group epoch (-1 between epochs).
  int rank() const;
  const std::vector<std::string>& members() const { return members_; }
  // The member beats (Note [Network transport]); the first look counts as a beat.
  bool member_alive(const std::string& worker) { return alive(worker); }
  uint64_t epoch() const { return epoch_; }
  // The folder that holds the store: where the layers above put files for the group.
  std::filesystem::path store_dir() const { return config_.store_path.parent_path(); }
  const std::string& worker() const { return config_.worker; }
  // Small values in the store, in the run's namespace, for the layers above.
  void publish(const std::string& name, const std::string& value);
  std::optional<std::string> read(const std::string& name);
  const NetworkStats& stats() const { return stats_; }

 private:
  void form_epoch(const std::vector<std::string>& expected, double window_s, bool wait_for_silent);
  // Waits until every member of the epoch has arrived at `tag` (keys in the store); throws
  // GroupFailure when one stops beating or the group has already moved to the next epoch.
  void arrive(const std::string& tag);
  bool alive(const std::string& worker);
  bool next_epoch_started();
  void beat_until_stopped();
  // <store dir>/status/<worker>.json, for `gradbox status` (network_status.h).
  void write_status(bool left = false);
  void start_beating();
  void stop_beating();
  // Refuses to start while another session beats under this worker's name.
  void refuse_live_namesake();
  exchange::JoinPlan join_running_group(const std::filesystem::path& run_dir, const GroupEpoch& running);
  // Rank 0 at an admission checkpoint: the join requests still waiting, as "n:name" items.
  std::vector<std::string> waiting_joiners();
  std::string key(const std::string& rest) const { return config_.run_id + "/" + rest; }
  void drop_group(const std::string& why);
  // The new group's first collective after a failure (see the Note); true when round q is
  // settled from held data (the caller returns it), false when it must be all-reduced again.
  bool reconcile(uint64_t round, float* grad);
  // The retrying loop of every round: plan_, scale_ and the kept inputs are set by the caller.
  exchange::RoundResult finish_round(uint64_t round, float* grad, const Prepare& prepare, double start_s);
  // The three stages of a round (see the Note); ready buckets are sent by send_ready.
  void open_round(uint64_t round, const exchange::LocalContribution& mine);
  void bucket_ready(size_t bucket);
  void send_ready();
  exchange::RoundResult close_round(uint64_t round);
  void start_round(float* grad, RoundPlan plan, float scale);
  class Streamed;
  void part_ready(size_t part) noexcept;
  exchange::RoundResult finish_streamed();

  NetworkExchangeConfig config_;
  mirror::Clock& clock_;
  std::unique_ptr<C10dFileStore> store_;
  std::unique_ptr<NetworkGroup> group_;
  uint64_t epoch_ = 0;
  std::vector<std::string> members_;
  bool reconcile_due_ = false;
  bool joined_running_ = false;  // entered a running group from its checkpoint
  // The round in progress: its plan, the caller's buffer, and per bucket whether it is ready
  // (its input kept in input_, times scale_) and whether it was sent. holding_: the caller's
  // buffer holds the round's average (the data all-reduce completed here, the ack did not).
  RoundPlan plan_;
  float* grad_ = nullptr;
  float scale_ = 1;
  float weight_ = 1;
  exchange::RoundResult open_result_;
  bool overflow_ = false;
  std::vector<float> input_;
  std::vector<size_t> chunks_left_;
  std::vector<bool> kept_;
  size_t next_to_send_ = 0;
  bool sending_ = false;  // the round's header passed and it has data: ready buckets go out
  // A streamed round: the first failure (GroupFailure) or error, kept for its finish.
  std::optional<std::string> stream_failure_;
  std::exception_ptr stream_error_;
  uint64_t stream_round_ = 0;
  double stream_start_s_ = 0;
  exchange::LocalContribution stream_mine_;
  uint64_t held_round_ = 0;
  bool holding_ = false;
  exchange::RoundResult held_result_;
  NetworkStats stats_;
  // Heartbeats: a thread with its own handle on the store.
  struct Beat {
    std::string value;
    double changed_s = 0;  // when this worker saw the value change (its own clock)
  };
  std::map<std::string, Beat> beats_;
  std::unique_ptr<C10dFileStore> beat_store_;
  std::thread beat_thread_;
  std::mutex beat_mutex_;
  std::condition_variable beat_stop_;
  bool stop_beating_ = false;
  double next_epoch_check_s_ = 0;
  double next_status_s_ = 0;
  uint64_t last_round_ = 0;
};

}  // namespace gradbox::transport

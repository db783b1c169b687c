#pragma once
// A worker process as the simulator runs it: the real FolderExchange (join, rounds, repair,
// checkpoints, leave) driven by a toy model in place of the trainer, on a simulated folder and
// a virtual clock (Note [The seam] in mirror/mirror.h). What it models instead of running:
// compute (a sleep of compute_s per step), the gradient (a deterministic function of the
// worker, the round and the parameters) and the optimizer (plain SGD). What it runs for real:
// everything the exchange does, and the trainer's side of the protocol (resume from the newest
// local checkpoint, join, follow, reload the agreed state, publish checkpoints). Torch-free.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "exchange/exchange_config.h"
#include "exchange/gradient_exchange.h"
#include "mirror/clock.h"
#include "mirror/mirror.h"

namespace gradbox::sim {

struct SimWorkerSpec {
  std::string name;
  exchange::FolderExchangeConfig exchange;  // worker, run id, timeouts, ...; local_dir: where stats go (may be empty)
  std::filesystem::path run_dir;            // this worker's local run folder (its checkpoints)
  uint64_t rounds = 50;                     // the run ends after this round
  int64_t checkpoint_interval = 10;         // rounds between local checkpoints
  size_t parameters = 64;
  uint64_t tokens_per_round = 1000;
  double compute_s = 0.2;                   // virtual seconds of compute per contributed round
  double lr = 0.05;
  // DiLoCo rounds (Note [DiLoCo rounds] in worker/outer_optimizer.h) when > 1: each round is
  // this many toy SGD steps of compute_s each, then the delta goes through the exchange and an
  // outer Nesterov step (outer_lr, outer_momentum) is applied; the momentum is replica state.
  int inner_steps = 1;
  double outer_lr = 0.7;
  double outer_momentum = 0.9;
  // > 0: time-boxed DiLoCo rounds (Note [Time-boxed rounds] in worker/outer_optimizer.h): up to
  // inner_steps steps, as many as fit in this many virtual seconds (at least one).
  double round_seconds = 0;
  // Steps that compute while the last round's exchange runs: 1 per step (the trainer's
  // --overlap), τ < inner_steps with DiLoCo (--overlap-steps; with time boxes, the next box's
  // steps: RoundRules::seconds_behind_at_most). Timing only: those steps are charged the
  // compute the exchange's wait did not cover; the toy update is not delayed.
  int overlap_steps = 0;
  // > 0 (with overlapped time-boxed rounds): the Δ so far goes out every this many inner steps
  // while the box is open (Note [Partial deltas] in exchange/folder_exchange.h).
  int partial_every = 0;
  // With overlap_steps > 0: the eager rule for rounds applied late (--late-outer-step eager,
  // Note [Eager outer steps] in worker/eager_outer.h), the trainer's share rule and offset step
  // on the toy model: inner steps start from θ_g + the worker's offset, which is its own (saved
  // with its local checkpoints, forgotten by a join or a reload) and settled to zero by a round
  // applied at once (the run's last); θ_g and the outer momentum are what replicas agree on.
  bool eager = false;
  // Fault injection: this worker's own initial weights are not the others' (another torch
  // build's), so a founding member must fetch the first member's (Note [Founders' own initial
  // weights] in exchange/folder_exchange.h).
  bool other_initial_weights = false;
  // Fault injection: after this round the replica's parameters are nudged once, as a silent
  // divergence (a bad GPU, a flipped bit) would (0: never).
  uint64_t perturb_after_round = 0;
  // Fault injection: a broken or malicious member. Changes what this worker sends for a round
  // (its gradient or Δ) after it computed it, without flagging an overflow.
  std::function<void(uint64_t round, std::vector<float>& sent)> corrupt_contribution;
};

// What the workers did, for invariant checks. Simulated processes run one at a time on the
// simulation's thread (Note [Simulation]), so it needs no lock.
class SimObserver {
 public:
  struct Applied {
    std::string worker;
    uint64_t round;
    uint64_t checksum;  // of the parameters after the round
    bool contributed;
    int inner_steps = 0;      // the steps behind its contribution (0 when it only followed)
    double wait_s = 0;        // the round's RoundResult::wait_seconds
    int contributors = 0;     // whose contributions the round's average holds
    uint64_t tokens = 0;      // the round's average's tokens (RoundResult::tokens)
    double at_s = 0;          // virtual time it was applied
    int64_t grad_accum = 1;   // the agreed grad_accum its steps were computed with
    // With overlap: the steps this worker computed while the round's exchange ran (its own
    // wait, in steps, up to τ): how late the outer step landed under its inner steps.
    double overlapped_steps = 0;
    bool eager_step = false;  // its Δ went out with an eager offset step (the share was known)
  };
  void applied(const Applied& a, std::vector<exchange::AgreedContribution> contributions = {});
  // A worker took one step of compute (an inner step, or a per-step round's gradient) for `round`.
  void stepped(const std::string& worker, uint64_t round, double at_s);
  void started(const std::string& worker, double at_s);  // a session's worker process began
  void resynced(const std::string& worker, uint64_t round);
  void finished(const std::string& worker, uint64_t checksum, double at_s);
  double last_finish_s() const;

  std::vector<Applied> history() const;
  // Who contributed how many tokens to each round, as its first application said.
  const std::map<uint64_t, std::vector<exchange::AgreedContribution>>& contributions() const { return contributions_; }
  struct Step {
    std::string worker;
    uint64_t round;
    double at_s;
  };
  const std::vector<Step>& steps() const { return steps_; }
  const std::map<std::string, double>& starts() const { return starts_; }
  std::map<std::string, uint64_t> finals() const;   // worker -> parameters checksum at the end
  std::map<std::string, std::vector<uint64_t>> resyncs() const;  // worker -> rounds
  uint64_t max_round() const;

 private:
  std::vector<Applied> history_;
  std::map<uint64_t, std::vector<exchange::AgreedContribution>> contributions_;
  std::vector<Step> steps_;
  std::map<std::string, double> starts_;
  std::map<std::string, uint64_t> finals_;
  double last_finish_s_ = 0;
  std::map<std::string, std::vector<uint64_t>> resyncs_;
};

// The body of a simulated worker process; returns when the run is done, throws what the
// exchange throws (a killed process unwinds from the clock's sleep).
void run_sim_worker(const SimWorkerSpec& spec, mirror::Mirror& mirror, mirror::Clock& clock, SimObserver& observer);

// The parameters every replica starts from (the founder's step-0 checkpoint holds them).
std::vector<float> initial_parameters(size_t n);

// Where simulated workers keep their local folders (checkpoints, stats): in memory when the
// machine has a tmpfs, since every local write is fsynced.
std::filesystem::path scratch_root();

}  // namespace gradbox::sim

#pragma once
// What the training loop needs from its peers, and nothing more: "here is my vector over
// T tokens; give me back the agreed, token-weighted average of this round". The one averaging
// interface: per-step training averages gradients through it, DiLoCo rounds average model
// deltas (Note [DiLoCo rounds] in worker/outer_optimizer.h), and both transports implement it:
// the folder exchange (files in a shared folder) and the network transport (c10d's Gloo/NCCL;
// transport/network_exchange.h). Rounds are numbered by the caller, one per call of
// all_reduce. No LibTorch and no protobuf here: the trainer includes this from torch
// translation units.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <limits>
#include <optional>
#include <string>
#include <vector>

namespace gradbox::exchange {

struct LocalContribution {
  uint64_t tokens = 0;    // tokens the gradient was computed on: its weight
  double loss = 0.0;      // mean loss over those tokens (reporting)
  bool overflow = false;  // non-finite gradient: every replica skips the round
  // Which part of the caller's state the round carries (Streaming DiLoCo's fragment): lossy
  // codecs keep their error feedback per part, since parts differ in size and meaning.
  uint32_t part = 0;
};

// The run's live control as one round's agreement settled it (Note [Live control]): every
// replica switches to `json` (a LiveControl; "{}" = the flags) before computing round from_round.
struct AgreedControl {
  uint64_t version = 0;
  uint64_t from_round = 0;
  std::string json = "{}";
};

// One contributor of an agreed round, as its agreement names it.
struct AgreedContribution {
  std::string worker;
  uint64_t tokens = 0;
  bool partial = false;  // a DiLoCo Δ published mid-round stood in for the whole one (Note [Partial deltas])
};

struct RoundResult {
  bool skip = false;        // some agreed contributor overflowed: nobody applies this round
  uint64_t tokens = 0;      // tokens behind the average
  double loss = std::numeric_limits<double>::quiet_NaN();  // token-weighted mean of contributors' losses
  int contributors = 0;
  std::vector<AgreedContribution> contributions;  // who they were (the folder exchange says; others may not)
  double wait_seconds = 0;  // time blocked on peers and the folder
  uint64_t bytes_written = 0;  // this worker's round files for it (contribution, agreements): its upload
  std::optional<AgreedControl> control;  // what this round's agreement says about live control
  // This replica is not the agreed state (it diverged, or fell behind what the folder keeps):
  // it must reload it (fetch_agreed_state) instead of applying this round.
  bool resync = false;
};

// A range [begin, end) of the caller's vector.
struct Span {
  size_t begin = 0, end = 0;
};

// A per-step round whose gradient is handed over a part at a time while backward still
// computes the rest (GradientExchange::begin_streamed_round).
class StreamedRound {
 public:
  virtual ~StreamedRound() = default;
  // Part i of the round's parts is final in grad (called from autograd's hooks, in any order;
  // never throws: a failure is handled in finish).
  virtual void part_ready(size_t i) noexcept = 0;
  // Waits for the round: grad[0, n) then holds the average, as all_reduce leaves it. Parts never
  // reported ready are taken as they are (a parameter backward did not reach: zero).
  virtual RoundResult finish() = 0;
};

// How a worker enters a run (GradientExchange::join).
struct JoinPlan {
  bool founder = false;  // the run is new and this worker is one of its founding members
  std::optional<std::filesystem::path> checkpoint;  // the folder's state, fetched into the run folder
  // A founding member starting from its own initial weights, found to be the run's: it writes
  // no step-0 checkpoint (Note [Founders' own initial weights] in folder_exchange.h).
  bool own_initial_state = false;
};

class GradientExchange {
 public:
  virtual ~GradientExchange() = default;
  // Before the first round: finds the run, refuses a mismatched one, and fetches its newest
  // state into run_dir when it is newer than local_step (the newest local checkpoint's step;
  // -1 when there is none).
  virtual JoinPlan join(const std::filesystem::path& run_dir, int64_t local_step) { return {true, std::nullopt}; }
  // False when this worker only follows the round (it is catching up or waiting to be let in):
  // its gradient is not needed.
  virtual bool will_contribute(uint64_t round) { return true; }
  // For a worker that enters a time-boxed round already open (Note [Late entry] in
  // folder_exchange.h), and for every worker of overlapped time-boxed rounds once it has the
  // round before's agreement: how long ago the round opened, so that its box closes with the
  // others'; 0 otherwise.
  virtual double round_age_s(uint64_t round) const { return 0; }
  // Once, after join, with this replica's starting parameters (its round, and params[0, n)):
  // an exchange that has no folder checkpoint to start everyone from (the network transport)
  // overwrites them with its first member's, so that every replica starts from the same bytes.
  virtual void agree_initial_state(uint64_t round, float* params, size_t n) {}
  // grad[0, n) holds this worker's mean gradient over `mine.tokens` tokens; on return it holds
  // the average every live replica applies for `round` (identical bytes on every replica).
  virtual RoundResult all_reduce(uint64_t round, float* grad, size_t n, const LocalContribution& mine) = 0;
  // all_reduce of a per-step gradient still being computed, for transports that can send it
  // while backward runs (nullptr where they cannot: the caller then calls all_reduce). `parts`
  // tile [0, n) in the order backward is expected to finish them; what lands in grad is this
  // worker's gradient times its loss scale, which `scale` undoes. `mine.overflow` is not known yet: the round finds it in the parts. Called between the last forward pass and
  // its backward pass.
  virtual std::unique_ptr<StreamedRound> begin_streamed_round(uint64_t round, float* grad, size_t n,
                                                              const std::vector<Span>& parts,
                                                              const LocalContribution& mine, float scale) {
    return nullptr;
  }
  // Between rounds (after each DiLoCo inner step, which may be minutes apart from the next
  // round): keeps this worker's heartbeat fresh and a checkpoint publish moving, and tells the
  // peers which step it is at. Never waits.
  virtual void between_rounds(uint64_t step) {}
  // DiLoCo, between the inner steps of `round` (never while a round runs): this worker's Δ so
  // far over mine.tokens tokens, published for an owner to take should this worker die before
  // its whole Δ is in (Note [Partial deltas] in folder_exchange.h). Returns the bytes written;
  // 0 where the exchange has no use for it (not a member of the round, or no folder).
  virtual uint64_t offer_partial(uint64_t round, const float* delta, size_t n, const LocalContribution& mine) { return 0; }
  // Called once the round's update is applied, with the new parameters (replica checks), when
  // wants_state_after(round) says so: the caller copies a GPU replica's state to the host only
  // then (3 GB a round at GPT-2-Large otherwise).
  virtual bool wants_state_after(uint64_t round) const { return false; }
  virtual void after_update(uint64_t round, const float* params, size_t n) {}
  // After the run's last round: compares this replica's parameters with the other members'
  // (waiting a bounded time for theirs). True when this replica is outside the agreed state:
  // it must reload it (fetch_agreed_state) and replay the rounds it lacks. (A last round can
  // diverge like any other, but no later round's fingerprints would show it.)
  virtual bool final_check(uint64_t round, const float* params, size_t n) { return false; }
  // A clean exit (end of run, Ctrl-C, SIGTERM): tell the peers this worker is gone.
  virtual void leave() {}
  // A local checkpoint of `step` was written to `dir`: the exchange may publish it to the folder.
  virtual void after_checkpoint(uint64_t step, const std::filesystem::path& dir, uint64_t tokens,
                                uint64_t parameters_checksum) {}
  // Blocks until the newest complete folder checkpoint is fetched into run_dir; returns its
  // folder (nullopt when the exchange keeps no state, e.g. a network collective).
  virtual std::optional<std::filesystem::path> fetch_agreed_state(const std::filesystem::path& run_dir) {
    return std::nullopt;
  }
  virtual std::string describe() const = 0;
};

// The weight of one contribution in a token-weighted average. One function, so that every
// replica, the emulated cluster and the tests round it the same way.
inline float contribution_weight(uint64_t tokens, uint64_t total_tokens) {
  return static_cast<float>(static_cast<double>(tokens) / static_cast<double>(total_tokens));
}

}  // namespace gradbox::exchange

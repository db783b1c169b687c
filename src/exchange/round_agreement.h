#pragma once
// One round's agreement (Note [Round agreement] in folder_exchange.h) as a step machine: start()
// publishes this worker's contribution, each poll() looks at the folder once and does what is
// due (apply an agreement, publish one as the shard's owner, fail over), and says whether every
// shard is applied. The caller owns the waiting, so the same code runs against the real
// folder and, in virtual time, against the simulator. Torch-free; uses protobuf.
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "codec/codec.h"
#include "exchange/exchange_context.h"
#include "exchange/folder_names.h"
#include "exchange/gradient_exchange.h"
#include "exchange/membership.h"
#include "exchange/token_weighted_sum.h"

namespace gradbox::exchange {

// Shard k of `shards` over a flat buffer of n elements: [n*k/shards, n*(k+1)/shards).
struct ShardRange {
  size_t begin = 0;
  size_t end = 0;
  size_t size() const { return end - begin; }
};
ShardRange shard_range(size_t n, uint32_t shards, uint32_t k);

wire::CodecSpec codec_spec(const codec::CodecOptions& options);
// Decoding options come from the file, bounded by what this run accepts: a file may not pick
// its own codec behind the run's back (WireError naming origin otherwise).
codec::CodecOptions decode_options(const wire::CodecSpec& spec, const codec::CodecOptions& run, const std::string& origin);

// What an agreement says about one contributor.
struct Contributor {
  std::string worker;
  uint64_t tokens = 0;
  double loss = 0;
  bool overflow = false;
  uint64_t checksum = 0;  // of the payload: pins the bytes
  std::string file;       // the contribution's name in the round folder: pins the file
  bool partial = false;   // its partial Δ stood in for the whole one (Note [Partial deltas])

  bool operator==(const Contributor&) const = default;
};
// In worker-name order: the order of every agreement's list and of every sum.
void sort_by_worker(std::vector<Contributor>& contributors);
// Nothing to average: a contributor flagged an overflow, or no contributor brought tokens (every
// replica then skips the round).
bool nothing_to_average(const std::vector<Contributor>& contributors);

class RoundAgreement {
 public:
  // Shard 0's owner fills in what the round settles besides the gradient (the next view and
  // the live control) through this.
  using DecideView = std::function<void(wire::RoundView* view, const std::vector<Contributor>& contributors)>;
  using Refused = std::function<bool(const std::string& worker)>;

  RoundAgreement(ExchangeContext& context, LagDeadline& deadline, DecideView decide_view, Refused refused);

  // A new round. members: the agreed view of this round (empty: this worker only follows). A
  // guest (Note [Late entry]) contributes without being a member: no owner waits for it.
  void start(uint64_t round, float* grad, size_t n, const LocalContribution& mine, std::vector<std::string> members,
             bool guest = false);
  // After start(): an owner agrees the round without someone only from this time on (clock
  // seconds), besides its contribution deadline (Note [Overlapped time-boxed rounds]).
  void leave_out_not_before(double s) { leave_out_not_before_s_ = s; }
  // One look at the folder; true once every shard's agreement is applied into grad.
  bool poll();
  // Note [Partial deltas]: this worker's Δ of `round` so far, between its inner steps (never
  // while a round is being agreed: it shares the buffers). Earlier partials of the round that
  // have not landed yet are taken back (nobody can have pinned them). Returns the bytes written.
  uint64_t publish_partial(uint64_t round, const float* delta, size_t n, const LocalContribution& mine);
  // After `round` is applied: own partials of it and earlier rounds go, but for one the
  // agreement pinned (others may still be reading it; the round's garbage collection takes it).
  void withdraw_partials(uint64_t round);
  // Nobody else is left (whole-run resume): this worker becomes the round's only member.
  void become_sole_member();
  // Members of this round that announced their departure or went stale (dead sessions) before
  // applying it: no failover wait for them.
  void set_departed(std::set<std::string> departed) { departed_ = std::move(departed); }
  // Followers whose contributions an owner takes when they are there (Note [Late entry]).
  void set_guests(std::vector<std::string> guests) { guests_ = std::move(guests); }

  uint64_t round() const { return round_; }
  const std::vector<std::string>& members() const { return members_; }
  bool member() const { return member_; }
  double seconds_since_contribution() const;
  // Two whole listings of the folder completed since the round began (Note [Seeing the folder]).
  bool folder_seen_since_start();
  // The folder shows rounds past the next one while this one has no agreement in sight: this
  // worker fell behind (a blind spell, a pause) and must reload the agreed state.
  bool overtaken() const { return overtaken_; }
  // The run's newest round as the folder shows it: the newest round folder that follows another
  // (Note [Progress is a run of rounds] in folder_exchange.h).
  uint64_t newest_round_in_folder() const;
  // After poll() returned true.
  bool skip() const;
  const std::vector<Contributor>& contributors() const { return shards_[0].contributors; }
  const wire::RoundView& view() const { return shards_[0].view; }
  // Flagged files of this round's folder, own included (for the checks that need the listing).
  std::set<std::string> visible_files(const std::vector<mirror::Arrival>& arrivals) const;

 private:
  struct ShardOutcome {
    bool done = false;
    bool skip = false;
    std::vector<Contributor> contributors;
    wire::RoundView view;
    // All-gather: the contributors whose sum is in grad's slice already (the owner's check, Note
    // [The check and the sum in one pass], or a replica's sum ahead, Note [Summing ahead of the
    // commit]); a commit naming exactly them needs no second sum.
    std::optional<std::vector<Contributor>> summed_in_grad;
    bool summed_ahead = false;  // tried once a round
  };
  using UsePayload = std::function<void(const std::string& payload, const codec::CodecOptions& options)>;
  struct Candidate {  // an agreement file in the folder
    uint32_t epoch = 0;
    std::string name;
  };

  const std::string& round_dir() const { return round_dir_; }
  void check_new_contributions(const std::vector<mirror::Arrival>& arrivals);
  std::pair<double, double> window(uint32_t shard, uint32_t epoch) const;
  static constexpr uint32_t kOwnerTurns = 3;
  uint32_t epochs() const;
  void withdraw_late_agreements();
  const std::string& owner(uint32_t shard, uint32_t epoch) const;
  wire::GradientShard* new_shard(wire::FileHeader& header, uint32_t shard) const;
  void publish_contributions();
  bool reuse_earlier_contributions();
  void observe_lags(const std::set<std::string>& visible);
  double contribution_deadline();
  std::vector<Candidate> candidates(uint32_t shard, const std::set<std::string>& visible) const;
  bool try_apply(uint32_t shard, const std::set<std::string>& visible);
  bool partials_looked_for(uint32_t shard, const std::vector<std::string>& present, double deadline);
  const wire::WireFile& checked_file(uint32_t shard, const Contributor& contributor) const;
  bool apply_commit(uint32_t shard, const wire::WireView& file, const std::string& name, const std::set<std::string>& visible);
  bool apply_reduced(uint32_t shard, const wire::WireView& file, const std::string& name);
  void recycle_buffers();
  bool valid_shape(uint64_t round, uint32_t shard, uint32_t count, uint32_t expected, const std::string& name);
  void maybe_publish(uint32_t shard, const std::set<std::string>& visible);
  void request_contributions(uint32_t shard);
  void publish_agreement(uint32_t shard, uint32_t epoch);
  void with_contribution(uint32_t shard, const Contributor& contributor, const UsePayload& use);
  bool sum_checked_in_one_pass(uint32_t shard, const std::vector<Contributor>& contributors, float* sum, size_t n);
  std::vector<Contributor> pinnable_contributors(uint32_t shard) const;
  void sum_ahead(uint32_t shard);
  std::vector<wire::Refusal> refuse_contributions(uint32_t shard, std::vector<Contributor>& contributors);
  TokenWeightedSum::Accumulate counted(TokenWeightedSum::Accumulate inner);
  void count_refusals(uint32_t shard, const google::protobuf::RepeatedPtrField<wire::Refusal>& refused);
  TokenWeightedSum::Accumulate rejecting(const std::string& rel, TokenWeightedSum::Accumulate inner);

  ExchangeContext& context_;
  LagDeadline& deadline_;
  DecideView decide_view_;
  Refused refused_;
  // Per part (LocalContribution::part), per shard, across rounds.
  std::map<uint32_t, std::vector<codec::ErrorFeedbackEncoder>> encoders_;
  std::vector<codec::ErrorFeedbackEncoder>* part_encoders_ = nullptr;  // this round's part

  uint64_t round_ = 0;
  std::string round_dir_ = round_dir_name(0);  // round_'s folder, named once per round
  float* grad_ = nullptr;
  size_t n_ = 0;
  LocalContribution mine_;
  std::vector<std::string> members_;
  bool member_ = false;
  std::set<std::string> departed_;
  std::vector<std::string> guests_;
  bool guest_ = false;
  double contributed_at_ = 0;
  double round_origin_ = 0;  // when the round began as seen from here: the epoch windows' origin
  uint64_t listings_at_start_ = 0;
  bool counted_blind_ = false;
  bool overtaken_ = false;
  double leave_out_not_before_s_ = 0;
  std::vector<ShardOutcome> shards_;
  std::vector<std::string> own_payloads_;  // buffers kept from round to round
  std::vector<float> reduced_;              // an owner's sum of its shard, kept likewise
  std::vector<float> decoded_;              // an owner's decoded contribution, to check it again after a refusal
  std::vector<uint64_t> own_checksums_;
  std::vector<std::string> own_files_;
  std::map<std::string, wire::WireFile> own_agreements_;  // name -> header and payload as published, until they land
  std::set<std::string> lag_seen_;
  struct Checked {
    Contributor contributor;
    wire::WireFile file;
  };
  std::vector<std::map<std::string, Checked>> checked_;  // per shard: worker -> its contribution that checked out
  std::vector<std::map<std::string, Checked>> partials_;  // per shard: member -> its partial Δ with the most tokens
  struct PartialRequest {
    double at_s = 0;
    uint64_t listings = 0;
  };
  std::vector<std::optional<PartialRequest>> partials_requested_;  // per shard, by an owner about to leave someone out
  std::set<std::string> pinned_requested_;  // pinned partials this replica asked its syncer for
  std::map<uint64_t, std::vector<std::string>> own_partials_;  // round -> own partial files, oldest first
  std::set<std::string> seen_contributions_;             // names already looked at
};

}  // namespace gradbox::exchange

#include "exchange/round_agreement.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/checksum.h"
#include "common/error.h"
#include "exchange/folder_names.h"

namespace gradbox::exchange {
namespace {

bool contains(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

std::vector<Contributor> contributors_of(const google::protobuf::RepeatedPtrField<wire::Contribution>& list) {
  std::vector<Contributor> out;
  for (const wire::Contribution& c : list)
    out.push_back({c.worker(), c.tokens(), c.loss(), c.overflow(), c.payload_checksum(), c.file(), c.partial()});
  sort_by_worker(out);
  return out;
}
}  // namespace

void sort_by_worker(std::vector<Contributor>& contributors) {
  std::stable_sort(contributors.begin(), contributors.end(),
                   [](const Contributor& a, const Contributor& b) { return a.worker < b.worker; });
}

bool nothing_to_average(const std::vector<Contributor>& contributors) {
  uint64_t total = 0;
  for (const Contributor& c : contributors) total += c.tokens;
  return total == 0 || std::any_of(contributors.begin(), contributors.end(), [](const Contributor& c) { return c.overflow; });
}

ShardRange shard_range(size_t n, uint32_t shards, uint32_t k) { return ShardRange{n * k / shards, n * (k + 1) / shards}; }

// Decoding options come from the file, bounded by what this run accepts: a file may not pick
// its own codec behind the run's back.
codec::CodecOptions decode_options(const wire::CodecSpec& spec, const codec::CodecOptions& run, const std::string& origin) {
  if (spec.codec() != codec::codec_name(run.codec) || spec.shuffle() != run.shuffle || spec.int8_block() != run.int8_block)
    throw wire::WireError(str(origin, ": encoded as ", spec.codec(), " (shuffle ", spec.shuffle(), ", block ",
                              spec.int8_block(), "), but this run uses ", codec::codec_name(run.codec)));
  return run;
}


RoundAgreement::RoundAgreement(ExchangeContext& context, LagDeadline& deadline, DecideView decide_view, Refused refused)
    : context_(context), deadline_(deadline), decide_view_(std::move(decide_view)), refused_(std::move(refused)) {}

const std::string& RoundAgreement::owner(uint32_t shard, uint32_t epoch) const {
  return members_[(shard + round_ + epoch) % members_.size()];
}

double RoundAgreement::seconds_since_contribution() const { return context_.clock.now_s() - contributed_at_; }

bool RoundAgreement::skip() const {
  return std::any_of(shards_.begin(), shards_.end(), [](const ShardOutcome& s) { return s.skip; });
}

void RoundAgreement::start(uint64_t round, float* grad, size_t n, const LocalContribution& mine,
                           std::vector<std::string> members, bool guest) {
  const uint32_t shards = context_.config.shard_count;
  part_encoders_ = &encoders_[mine.part];
  if (part_encoders_->size() != shards) part_encoders_->assign(shards, codec::ErrorFeedbackEncoder(context_.config.codec));
  round_ = round;
  round_dir_ = round_dir_name(round);
  // Contributions come down on request only: an all-gather replica needs every one of the rounds
  // it applies, and none of the rounds before it joined (a dead session's last rounds stay in
  // the folder, and a joiner's syncer would otherwise fetch them all before its checkpoint).
  if (context_.config.pattern == ExchangePattern::all_gather) context_.mirror.request(round_dir_ + "/g-");
  grad_ = grad;
  n_ = n;
  mine_ = mine;
  members_ = std::move(members);
  member_ = contains(members_, context_.config.worker);
  guest_ = guest && !member_;
  guests_.clear();
  shards_.assign(shards, ShardOutcome{});
  recycle_buffers();
  own_payloads_.resize(shards);
  for (std::string& payload : own_payloads_) payload.clear();
  own_checksums_.assign(shards, 0);
  own_files_.assign(shards, std::string());
  own_agreements_.clear();
  lag_seen_.clear();
  checked_.assign(shards, {});
  partials_.assign(shards, {});
  partials_requested_.assign(shards, std::nullopt);
  pinned_requested_.clear();
  seen_contributions_.clear();
  departed_.clear();
  counted_blind_ = false;
  overtaken_ = false;
  leave_out_not_before_s_ = -std::numeric_limits<double>::infinity();
  listings_at_start_ = context_.listings();
  if (member_ || guest_) publish_contributions();
  contributed_at_ = context_.clock.now_s();
  round_origin_ = contributed_at_;
}

// The last round's large buffers go back to the context's pool (or, own payloads, stay here).
void RoundAgreement::recycle_buffers() {
  for (auto* list : {&checked_, &partials_}) {
    for (auto& shard : *list)
      for (auto& [worker, checked] : shard) context_.buffers.give(std::move(checked.file.payload));
    list->clear();
  }
  for (auto& [name, own] : own_agreements_) context_.buffers.give(std::move(own.payload));
  own_agreements_.clear();
}

void RoundAgreement::become_sole_member() {
  members_ = {context_.config.worker};
  member_ = true;
  publish_contributions();
  contributed_at_ = context_.clock.now_s();
  round_origin_ = contributed_at_;
}

bool RoundAgreement::poll() {
  context_.listings();  // sampled all along, so that a blind spell is told from not looking
  // One listing of the round folder per poll serves both the checks and the decisions.
  const std::vector<mirror::Arrival> arrivals = context_.mirror.list(round_dir());
  const std::set<std::string> visible = visible_files(arrivals);
  check_new_contributions(arrivals);
  withdraw_late_agreements();
  if (member_) observe_lags(visible);
  bool all_done = true;
  for (uint32_t k = 0; k < shards_.size(); ++k) {
    if (shards_[k].done) continue;
    if (!try_apply(k, visible)) {
      // One agreement is enough: never publish a competing one once any is visible.
      if (member_ && candidates(k, visible).empty()) maybe_publish(k, visible);
      sum_ahead(k);
    }
    all_done = all_done && shards_[k].done;
  }
  return all_done;
}

// Peers' contributions of this round are checked once each as they arrive: the header must
// describe this round and shard of the worker the name claims. The first that checks out per
// worker and shard is the one an owner sums and pins; a stranger's copy under a member's name
// is rejected and changes nothing.
//
// The owners' epoch windows count from when the round began as far as this worker can tell:
// its own contribution, or the earliest arrival here of a peer's that checks out, whichever came
// first. A worker that restarts in the middle of a round (or arrives late) thus finds the early
// windows already closed, instead of opening its own and competing with the owner in charge.
//
// Partial deltas (Note [Partial deltas]) are members' only, fetched when an owner asks for them;
// of several, the one with the most tokens is kept.
void RoundAgreement::check_new_contributions(const std::vector<mirror::Arrival>& arrivals) {
  const double now = context_.clock.now_s();
  const int64_t now_ms = context_.clock.unix_ms();
  for (const mirror::Arrival& file : arrivals) {
    std::optional<ContributionName> parsed = parse_contribution_name(file.name);
    if (!parsed) parsed = parse_partial_name(file.name);
    if (!parsed || parsed->shard >= checked_.size() || parsed->worker == context_.config.worker ||
        (!contains(members_, parsed->worker) && (parsed->partial || !contains(guests_, parsed->worker))) ||
        (!parsed->partial && checked_[parsed->shard].count(parsed->worker)) ||
        !seen_contributions_.insert(file.name).second)
      continue;
    const std::string rel = round_dir() + "/" + file.name;
    std::optional<wire::WireFile> wf = context_.read_checked(rel);
    if (!wf) {
      seen_contributions_.erase(file.name);  // gone meanwhile, or rejected (then remembered there)
      continue;
    }
    const wire::GradientShard& g = wf->header.gradient();
    if (!wf->header.has_gradient() || g.round() != round_ || g.shard_index() != parsed->shard ||
        g.worker() != parsed->worker || g.reduced() || g.partial() != parsed->partial ||
        g.shard_count() != context_.config.shard_count) {
      context_.reject(rel, str(context_.mirror.where(rel), ": header does not describe round ", round_, " shard ",
                               parsed->shard, parsed->partial ? " (a partial delta)" : "", " of ", parsed->worker));
      continue;
    }
    Contributor contributor{parsed->worker, g.tokens(), g.loss(), g.overflow(), wf->header.payload_checksum(), file.name,
                            parsed->partial};
    // Only a sharded owner sums from here (a slice each); all-gather reads each again when it
    // applies the commit, one at a time, instead of holding every peer's gradient.
    if (context_.config.pattern == ExchangePattern::all_gather) context_.buffers.give(std::move(wf->payload));
    if (parsed->partial) {
      auto& kept = partials_[parsed->shard];
      const auto earlier = kept.find(parsed->worker);
      if (earlier != kept.end() && earlier->second.contributor.tokens >= contributor.tokens) {
        context_.buffers.give(std::move(wf->payload));
        continue;
      }
      if (earlier != kept.end()) context_.buffers.give(std::move(earlier->second.file.payload));
      kept.insert_or_assign(parsed->worker, Checked{std::move(contributor), std::move(*wf)});
      continue;  // a partial says nothing about when the round began
    }
    checked_[parsed->shard].emplace(parsed->worker, Checked{std::move(contributor), std::move(*wf)});
    round_origin_ = std::min(round_origin_, now - static_cast<double>(now_ms - file.arrived_unix_ms) / 1000.0);
  }
}

// When epoch e's window of shard k opens and closes, in seconds after the round's origin.
// Owners take turns in view order and, when a whole turn passes without an agreement (the
// others dead, or this worker restarted after their windows), again: epoch e's owner is
// members[(k + round + e) mod n], for kOwnerTurns turns; the last window never closes.
std::pair<double, double> RoundAgreement::window(uint32_t k, uint32_t epoch) const {
  const double failover = context_.config.failover_timeout_s;
  double opens = 0;
  for (uint32_t e = 0; e < epoch; ++e)
    if (!departed_.count(owner(k, e))) opens += failover;
  const bool last = epoch + 1 >= epochs();
  return {opens, last ? std::numeric_limits<double>::infinity() : opens + failover};
}

uint32_t RoundAgreement::epochs() const { return kOwnerTurns * static_cast<uint32_t>(members_.size()); }

// An own agreement that has not landed when its window closes is taken back: the next owner in
// line may be deciding the shard by now, and a late landing would compete with it.
void RoundAgreement::withdraw_late_agreements() {
  const double elapsed = context_.clock.now_s() - round_origin_;
  for (auto it = own_agreements_.begin(); it != own_agreements_.end();) {
    const std::string rel = round_dir() + "/" + it->first;
    const std::optional<AgreementName> parsed = parse_agreement_name(context_.config.pattern, it->first);
    if (!parsed || context_.mirror.landed(rel) || elapsed < window(parsed->shard, parsed->epoch).second) {
      ++it;
      continue;
    }
    context_.log().warn(str("round ", round_, ": own agreement ", it->first, " did not reach the folder within its window; ",
                            "withdrawn"));
    context_.mirror.withdraw(rel);
    ++context_.stats.agreements_withdrawn;
    it = own_agreements_.erase(it);
  }
}

std::set<std::string> RoundAgreement::visible_files(const std::vector<mirror::Arrival>& arrivals) const {
  std::set<std::string> names;
  for (const mirror::Arrival& file : arrivals) names.insert(file.name);
  // Own files, also from an earlier life (the syncer never mirrors them back). An own agreement
  // counts only once it has landed: one the others cannot see yet must not decide anything here,
  // or a worker that cannot reach the folder would go on alone.
  for (const std::string& name : context_.mirror.list_published(round_dir())) {
    if (parse_agreement_name(context_.config.pattern, name) && !context_.mirror.landed(round_dir() + "/" + name)) continue;
    names.insert(name);
  }
  return names;
}

// Lags from this worker's contribution to each peer's (first shard seen), for the deadline.
void RoundAgreement::observe_lags(const std::set<std::string>& visible) {
  for (const std::string& name : visible) {
    std::optional<ContributionName> parsed = parse_contribution_name(name);
    if (!parsed || parsed->worker == context_.config.worker || !contains(members_, parsed->worker)) continue;
    if (lag_seen_.insert(parsed->worker).second) deadline_.observe(seconds_since_contribution());
  }
}

// The deadline in force (LagDeadline); logged when it moves by more than 20%.
double RoundAgreement::contribution_deadline() {
  const double deadline = deadline_.deadline();
  double& shown = context_.stats.contribution_deadline_s;
  if (std::abs(deadline - shown) > 0.2 * std::max(shown, 0.5)) {
    context_.log().info(str("contribution deadline ", deadline, " s (", deadline_.samples(), " lags observed, floor ",
                            context_.config.deadline_floor_s, " s, ceiling ", context_.config.contribution_timeout_s, " s)"));
    shown = deadline;
  }
  return deadline;
}

// Agreements of a shard, lowest epoch first; equal epochs (two eras of a resumed run, two lives
// of an owner) fall back to name order: the same on every replica.
std::vector<RoundAgreement::Candidate> RoundAgreement::candidates(uint32_t shard, const std::set<std::string>& visible) const {
  std::vector<Candidate> found;
  for (const std::string& name : visible) {
    std::optional<AgreementName> parsed = parse_agreement_name(context_.config.pattern, name);
    if (parsed && parsed->shard == shard) found.push_back({parsed->epoch, name});
  }
  std::stable_sort(found.begin(), found.end(), [](const Candidate& a, const Candidate& b) { return a.epoch < b.epoch; });
  return found;
}

bool RoundAgreement::try_apply(uint32_t k, const std::set<std::string>& visible) {
  for (const Candidate& candidate : candidates(k, visible)) {
    if (context_.rejected(round_dir() + "/" + candidate.name)) continue;
    // This worker's own agreement is read where it is kept; a peer's from the mirror, into a
    // pooled buffer that goes back once applied.
    std::optional<wire::WireFile> read;
    wire::WireView file;
    if (auto own = own_agreements_.find(candidate.name); own != own_agreements_.end()) {
      file = wire::WireView{own->second.header, own->second.payload};
    } else {
      read = context_.read_checked(round_dir() + "/" + candidate.name, ExchangeContext::Side::own_first);
      if (!read) continue;
      file = wire::WireView{std::move(read->header), read->payload};
    }
    const bool applied = context_.config.pattern == ExchangePattern::sharded ? apply_reduced(k, file, candidate.name)
                                                                             : apply_commit(k, file, candidate.name, visible);
    if (read) context_.buffers.give(std::move(read->payload));
    if (!applied) {
      if (context_.rejected(round_dir() + "/" + candidate.name)) continue;  // a bad one: the next in line may do
      return false;  // waiting for contributions the agreement names
    }
    if (candidate.epoch > 0) {
      ++context_.stats.late_agreements_seen;
      context_.log().warn(str("round ", round_, " shard ", k, ": applied failover agreement ", candidate.name));
    }
    shards_[k].done = true;
    return true;
  }
  return false;
}

bool RoundAgreement::valid_shape(uint64_t round, uint32_t shard, uint32_t count, uint32_t expected, const std::string& name) {
  if (round == round_ && shard == expected && count == context_.config.shard_count) return true;
  context_.reject(round_dir() + "/" + name, str(context_.mirror.where(round_dir() + "/" + name), ": describes round ", round,
                                                 " shard ", shard, "/", count, ", expected round ", round_, " shard ",
                                                 expected, "/", context_.config.shard_count));
  return false;
}

// A summand that rejects its file when it does not decode, so that the round can move on to
// another agreement.
TokenWeightedSum::Accumulate RoundAgreement::rejecting(const std::string& rel, TokenWeightedSum::Accumulate inner) {
  return [this, rel, inner = std::move(inner)](float weight, float* sum, size_t n) {
    try {
      inner(weight, sum, n);
    } catch (const std::exception& e) {
      context_.reject(rel, e.what());
      throw;
    }
  };
}

TokenWeightedSum::Accumulate RoundAgreement::counted(TokenWeightedSum::Accumulate inner) {
  return [this, inner = std::move(inner)](float weight, float* sum, size_t n) {
    ++context_.stats.contributions_decoded;
    inner(weight, sum, n);
  };
}

void RoundAgreement::count_refusals(uint32_t k, const google::protobuf::RepeatedPtrField<wire::Refusal>& refused) {
  for (const wire::Refusal& r : refused) {
    ++context_.stats.contributions_refused;
    context_.log().warn(str("round ", round_, " shard ", k, ": the agreement leaves out ", r.worker(), ": ", r.reason()));
  }
}

// All-gather: sum exactly the contributions the commit pins, in worker order.
bool RoundAgreement::apply_commit(uint32_t k, const wire::WireView& file, const std::string& name,
                                  const std::set<std::string>& visible) {
  const std::string rel = round_dir() + "/" + name;
  if (!file.header.has_commit()) {
    context_.reject(rel, str(rel, ": not a round commit"));
    return false;
  }
  const wire::RoundCommit& commit = file.header.commit();
  if (!valid_shape(commit.round(), commit.shard_index(), commit.shard_count(), k, name)) return false;
  std::vector<Contributor> contributors = contributors_of(commit.contributors());
  const std::string& self = context_.config.worker;
  for (const Contributor& c : contributors) {
    const std::optional<ContributionName> parsed = c.partial ? parse_partial_name(c.file) : parse_contribution_name(c.file);
    if (!parsed || parsed->worker != c.worker || parsed->shard != k) {
      context_.reject(rel, str(rel, ": names no valid contribution file for ", c.worker));
      return false;
    }
    const bool own = c.worker == self && c.file == own_files_[k];
    if (!own && !visible.count(c.file)) {
      // A partial Δ is fetched only on request (Note [Partial deltas]).
      if (c.partial && pinned_requested_.insert(c.file).second) context_.mirror.request(round_dir() + "/" + c.file);
      return false;  // still on its way
    }
  }
  ShardOutcome& shard = shards_[k];
  shard.view = commit.view();
  shard.contributors = contributors;
  // Skipped by everyone: an overflow, or nothing to average (a follower resuming the run alone
  // agrees an empty round first: Note [Elastic membership]).
  shard.skip = nothing_to_average(contributors);
  // This owner's check summed exactly these already (Note [The check and the sum in one pass]).
  const bool summed = shard.summed_in_grad == contributors;
  shard.summed_in_grad.reset();
  if (shard.skip || summed) {
    if (summed && commit.owner() != self) ++context_.stats.commits_summed_ahead;
    count_refusals(k, commit.refused());
    return true;
  }
  TokenWeightedSum sum;
  for (const Contributor& c : contributors) {
    if (c.worker == self && c.file == own_files_[k] && c.checksum == own_checksums_[k]) {
      sum.add(c.worker, c.tokens, counted(TokenWeightedSum::encoded(own_payloads_[k], context_.config.codec)));
      continue;
    }
    // Read when summed, one at a time: each is a whole model's gradient (shard), not all at once.
    const std::string part = round_dir() + "/" + c.file;
    sum.add(c.worker, c.tokens, counted([this, part, c, name](float weight, float* out, size_t n) {
      std::optional<wire::WireFile> contribution = context_.read_checked(part, ExchangeContext::Side::own_first);
      if (!contribution) throw wire::WireError(str(part, ": not readable (gone, or rejected)"));
      const BufferReturn give_back{context_.buffers, contribution->payload};
      if (checksum64(contribution->payload.data(), contribution->payload.size()) != c.checksum) {
        context_.reject(part, str(part, ": is not the contribution commit ", name, " names (checksum differs)"));
        throw wire::WireError(str(part, ": checksum differs from the commit's"));
      }
      try {
        const codec::CodecOptions opt = decode_options(contribution->header.gradient().codec(), context_.config.codec, part);
        codec::decode_accumulate(reinterpret_cast<const uint8_t*>(contribution->payload.data()), contribution->payload.size(),
                                 opt, weight, out, n);
      } catch (const std::exception& e) {
        context_.reject(part, e.what());
        throw;
      }
    }));
  }
  const ShardRange range = shard_range(n_, context_.config.shard_count, k);
  try {
    sum.sum_into(grad_ + range.begin, range.size());
  } catch (const std::exception&) {
    return false;  // not yet readable, or rejected (logged): try again, or the next agreement
  }
  count_refusals(k, commit.refused());
  return true;
}

// Sharded: the owner already averaged; decode its result.
bool RoundAgreement::apply_reduced(uint32_t k, const wire::WireView& file, const std::string& name) {
  const std::string rel = round_dir() + "/" + name;
  if (!file.header.has_gradient() || !file.header.gradient().reduced()) {
    context_.reject(rel, str(rel, ": not a reduced shard"));
    return false;
  }
  const wire::GradientShard& g = file.header.gradient();
  if (!valid_shape(g.round(), g.shard_index(), g.shard_count(), k, name)) return false;
  const ShardRange range = shard_range(n_, context_.config.shard_count, k);
  ShardOutcome& shard = shards_[k];
  if (!g.overflow()) {
    try {
      codec::CodecOptions opt = decode_options(g.codec(), context_.config.codec, rel);
      codec::decode(reinterpret_cast<const uint8_t*>(file.payload.data()), file.payload.size(), opt, grad_ + range.begin,
                    range.size());
    } catch (const std::exception& e) {
      context_.reject(rel, e.what());
      return false;
    }
  }
  shard.contributors = contributors_of(g.contributors());
  shard.skip = g.overflow();
  shard.view = g.view();
  count_refusals(k, g.refused());
  return true;
}

// Note [Progress is a run of rounds]: the newest round folder whose round before is there too.
uint64_t RoundAgreement::newest_round_in_folder() const {
  std::set<uint64_t> rounds;
  for (const std::string& dir : context_.mirror.list_dirs("rounds"))
    if (const std::optional<uint64_t> r = parse_round_dir(dir)) rounds.insert(*r);
  for (auto it = rounds.rbegin(); it != rounds.rend(); ++it)
    if (*it > 0 && rounds.count(*it - 1)) return *it;
  return rounds.empty() ? 0 : *rounds.begin();
}

bool RoundAgreement::folder_seen_since_start() { return context_.listings() >= listings_at_start_ + 2; }

// Owners publish the agreement of the shards they hold, each within its epoch's window: epoch e
// opens once every earlier owner had failover_timeout (none for one that announced its
// departure or went stale: set_departed) and closes when the next owner's opens, so a late
// owner never competes with its successor.
void RoundAgreement::maybe_publish(uint32_t k, const std::set<std::string>& visible) {
  const FolderExchangeConfig& c = context_.config;
  const double elapsed = context_.clock.now_s() - round_origin_;
  for (uint32_t epoch = 0; epoch < epochs(); ++epoch) {
    if (owner(k, epoch) != c.worker) continue;
    const auto [opens, closes] = window(k, epoch);
    if (elapsed < opens) return;
    if (elapsed >= closes) continue;  // its window passed: wait for the next owner in line (maybe this one again)
    // An earlier life of this worker may have published this epoch's agreement already.
    for (const std::string& name : context_.mirror.list_published(round_dir())) {
      std::optional<AgreementName> parsed = parse_agreement_name(c.pattern, name);
      if (parsed && parsed->shard == k && parsed->epoch == epoch) return;  // waits for it to land
    }
    request_contributions(k);
    // Present means a contribution that checks out: a stranger's copy under a member's name
    // must not make the owner stop waiting for the real one.
    std::vector<std::string> present{c.worker};
    for (const std::string& m : members_)
      if (m != c.worker && !refused_(m) && checked_[k].count(m)) present.push_back(m);
    const bool everyone = present.size() == members_.size();
    const double deadline = contribution_deadline();
    if (!everyone && (elapsed < opens + deadline || context_.clock.now_s() < leave_out_not_before_s_)) return;
    // Leaving someone out, or taking over from an owner that published nothing, rests on an
    // absence: that their file is not there rather than unseen. That needs two whole listings
    // of the folder since the round began, and the folder seen without a gap for a whole
    // deadline (what a blind spell held up gets that long to arrive). A worker cut off from the
    // folder has neither (Note [Seeing the folder]).
    if (!everyone || epoch > 0) {
      if (!folder_seen_since_start() || context_.clock.now_s() - context_.seen_since_s() < deadline) {
        if (!counted_blind_) {
          counted_blind_ = true;
          ++context_.stats.blind_waits;
          context_.log().warn(str("round ", round_, ": the shared folder has not been seen long enough since the round "
                                  "began; not deciding on what it does not show until it has"));
        }
        return;
      }
      // Rounds beyond the next one in the folder: the others agreed this round long ago, and
      // its agreement is gone or out of sight. Deciding it now would fork the run.
      if (newest_round_in_folder() > round_ + 1) {
        if (!overtaken_)
          context_.log().warn(str("round ", round_, ": the run has moved on to round ", newest_round_in_folder(),
                                  " without this worker; reloading the agreed state"));
        overtaken_ = true;
        return;
      }
    }
    if (!everyone && c.partial_deltas && !partials_looked_for(k, present, deadline)) return;
    if (epoch > 0) {
      ++context_.stats.failovers;
      context_.log().warn(str("round ", round_, " shard ", k, ": no agreement from ", owner(k, epoch - 1), " after ",
                              elapsed, " s; ", c.worker, " takes over as epoch ", epoch, " owner"));
    }
    publish_agreement(k, epoch);
    return;
  }
}

// Note [Partial deltas]: before it leaves members out, an owner asks for their partial deltas
// and gives them a deadline (and two whole listings of the folder) to come down.
bool RoundAgreement::partials_looked_for(uint32_t k, const std::vector<std::string>& present, double deadline) {
  std::optional<PartialRequest>& request = partials_requested_[k];
  if (!request) {
    for (const std::string& m : members_)
      if (!contains(present, m)) context_.mirror.request(str(round_dir(), "/", "p-", m, "-s", k, "-"));
    request = PartialRequest{context_.clock.now_s(), context_.listings()};
    return false;
  }
  return context_.clock.now_s() - request->at_s >= deadline && context_.listings() >= request->listings + 2;
}

// The bytes an owner sums for a contributor it pins (sharded): its whole contribution or its partial.
const wire::WireFile& RoundAgreement::checked_file(uint32_t k, const Contributor& contributor) const {
  return (contributor.partial ? partials_ : checked_)[k].at(contributor.worker).file;
}

void RoundAgreement::request_contributions(uint32_t k) {
  if (context_.config.pattern != ExchangePattern::sharded) return;
  // Contributions are fetched on demand and their names end in unpredictable tokens: ask for
  // each member's by name prefix (Note [The syncer contract]).
  for (const std::vector<std::string>* names : {&members_, &guests_})
    for (const std::string& m : *names)
      if (m != context_.config.worker) context_.mirror.request(str(round_dir(), "/", "g-", m, "-s", k, "-"));
}

}  // namespace gradbox::exchange

// What this worker writes for a round (Note [Round agreement], steps 1 and 2): its
// contributions, and as a shard's owner the agreement. Part of RoundAgreement; the reading and
// deciding side is round_agreement.cpp.
#include <algorithm>

#include "common/checksum.h"
#include "common/error.h"
#include "exchange/contribution_check.h"
#include "exchange/folder_names.h"
#include "exchange/round_agreement.h"

namespace gradbox::exchange {
namespace {

void fill_contributors(google::protobuf::RepeatedPtrField<wire::Contribution>* list, const std::vector<Contributor>& from) {
  for (const Contributor& c : from) {
    wire::Contribution* entry = list->Add();
    entry->set_worker(c.worker);
    entry->set_tokens(c.tokens);
    entry->set_loss(c.loss);
    entry->set_overflow(c.overflow);
    entry->set_payload_checksum(c.checksum);
    entry->set_file(c.file);
    entry->set_partial(c.partial);
  }
}

}  // namespace

wire::CodecSpec codec_spec(const codec::CodecOptions& opt) {
  wire::CodecSpec spec;
  spec.set_codec(codec::codec_name(opt.codec));
  spec.set_zstd_level(opt.zstd_level);
  spec.set_shuffle(opt.shuffle);
  spec.set_int8_block(opt.int8_block);
  return spec;
}

// The GradientShard body of shard k of this round, written by this worker (a contribution or,
// reduced, a shard owner's sum).
wire::GradientShard* RoundAgreement::new_shard(wire::FileHeader& header, uint32_t k) const {
  const FolderExchangeConfig& c = context_.config;
  const ShardRange range = shard_range(n_, c.shard_count, k);
  wire::GradientShard* g = header.mutable_gradient();
  g->set_round(round_);
  g->set_worker(c.worker);
  g->set_shard_index(k);
  g->set_shard_count(c.shard_count);
  g->set_begin(range.begin);
  g->set_end(range.end);
  *g->mutable_codec() = codec_spec(c.codec);
  return g;
}

// A contribution this worker already published in an earlier life (before a kill -9) is
// reused: the shared folder keeps its first bytes (write-once), and agreements may pin them.
bool RoundAgreement::reuse_earlier_contributions() {
  const std::string& self = context_.config.worker;
  std::vector<std::string> names(shards_.size());
  for (const std::string& name : context_.mirror.list_published(round_dir())) {
    std::optional<ContributionName> parsed = parse_contribution_name(name);
    if (parsed && parsed->worker == self && parsed->shard < names.size()) names[parsed->shard] = name;
  }
  if (std::any_of(names.begin(), names.end(), [](const std::string& n) { return n.empty(); })) return false;
  std::vector<wire::WireFile> earlier;
  for (const std::string& name : names) {
    const std::optional<std::string> bytes = context_.mirror.read_published(round_dir() + "/" + name);
    try {
      GB_CHECK(bytes.has_value(), "gone");
      earlier.push_back(wire::parse(*bytes, name));
    } catch (const std::exception& e) {
      context_.log().warn(str(round_dir(), "/", name, ": unreadable (", e.what(), "); contributing afresh"));
      return false;
    }
  }
  for (size_t k = 0; k < names.size(); ++k) {
    own_payloads_[k] = std::move(earlier[k].payload);
    own_checksums_[k] = checksum64(own_payloads_[k].data(), own_payloads_[k].size());
    own_files_[k] = names[k];
  }
  const wire::GradientShard& g = earlier[0].header.gradient();
  mine_ = LocalContribution{g.tokens(), g.loss(), g.overflow()};
  context_.log().info(str("round ", round_, ": reusing the contribution this worker published before it restarted"));
  return true;
}

void RoundAgreement::publish_contributions() {
  if (reuse_earlier_contributions()) return;
  const FolderExchangeConfig& c = context_.config;
  for (uint32_t k = 0; k < shards_.size(); ++k) {
    const ShardRange range = shard_range(n_, c.shard_count, k);
    wire::FileHeader header = context_.new_header();
    wire::GradientShard* g = new_shard(header, k);
    g->set_tokens(mine_.tokens);
    g->set_loss(mine_.loss);
    g->set_overflow(mine_.overflow);
    std::string& payload = own_payloads_[k];  // this round's, in last round's buffer
    payload.clear();
    if (!mine_.overflow) {
      // Error feedback only where the codec loses something.
      if (c.codec.codec == codec::Codec::fp32) codec::encode_into(grad_ + range.begin, range.size(), c.codec, payload);
      else (*part_encoders_)[k].encode_into(grad_ + range.begin, range.size(), payload);
    }
    own_checksums_[k] = checksum64(payload.data(), payload.size());
    own_files_[k] = contribution_name(c.worker, k, context_.incarnation.token(str("g/", round_, "/", k)));
    const std::string rel = round_dir() + "/" + own_files_[k];
    context_.publish(rel, context_.frame_pieces(rel, std::move(header), payload));
  }
}

// Hands contribution x of shard k to `use`: this worker's own from memory, a sharded owner's
// from the file it holds since it checked out, an all-gather owner's read again (one whole
// gradient at a time) and held to the checksum it was checked by. WireError when it is gone or
// has changed since.
void RoundAgreement::with_contribution(uint32_t k, const Contributor& x, const UsePayload& use) {
  const FolderExchangeConfig& c = context_.config;
  const std::string rel = round_dir() + "/" + x.file;
  if (x.worker == c.worker && !x.partial) return use(own_payloads_[k], c.codec);
  if (c.pattern == ExchangePattern::sharded) {
    const wire::WireFile& file = checked_file(k, x);
    return use(file.payload, decode_options(file.header.gradient().codec(), c.codec, rel));
  }
  std::optional<wire::WireFile> file = context_.read_checked(rel, ExchangeContext::Side::own_first);
  if (!file) throw wire::WireError(str(rel, ": not readable (gone, or rejected)"));
  const BufferReturn give_back{context_.buffers, file->payload};
  if (checksum64(file->payload.data(), file->payload.size()) != x.checksum)
    throw wire::WireError(str(rel, ": changed since it was checked"));
  use(file->payload, decode_options(file->header.gradient().codec(), c.codec, rel));
}

// Note [The check and the sum in one pass]
// The owner's check (Note [Checked contributions]) decodes every contribution of its shard, and
// so does the sum: decoding twice made the check cost as much as the sum (an all-gather owner
// also read every file twice, and every replica waits for its commit). So the owner sums the
// contributions with TokenWeightedSum (worker order, the weights of all of them) and measures
// each in the same decode (codec::decode_accumulate_measured). Only when the check then
// refuses one, or one does not decode, is that sum dropped and the shard checked and summed again
// without them, as before; a refusal costs a second pass, the usual round one. A sharded owner
// encodes the sum as its reduced shard; an all-gather owner leaves it in grad's slice, and
// applying its own commit (the same contributors, the same bytes) takes it as it is: a replica
// that applies another commit sums that one itself.
bool RoundAgreement::sum_checked_in_one_pass(uint32_t k, const std::vector<Contributor>& contributors, float* sum, size_t n) {
  TokenWeightedSum weighted;
  std::vector<ContributionNorm> norms;
  for (const Contributor& x : contributors)
    weighted.add(x.worker, x.tokens, [this, k, &x, &norms](float weight, float* out, size_t size) {
      with_contribution(k, x, [&](const std::string& payload, const codec::CodecOptions& options) {
        const auto* bytes = reinterpret_cast<const uint8_t*>(payload.data());
        ++context_.stats.contributions_decoded;
        if (x.tokens == 0) return codec::decode_accumulate(bytes, payload.size(), options, weight, out, size);
        norms.push_back(norm_from_squares(codec::decode_accumulate_measured(bytes, payload.size(), options, weight, out, size)));
      });
    });
  try {
    weighted.sum_into(sum, n);
  } catch (const std::exception&) {
    return false;  // refuse_contributions says which, and why
  }
  const std::vector<std::optional<std::string>> why = contribution_refusals(norms, context_.config.max_norm_ratio);
  return std::none_of(why.begin(), why.end(), [](const std::optional<std::string>& w) { return w.has_value(); });
}

// This worker's contribution and every one that checked out from a worker not refused: what an
// owner pins when nobody is missing.
std::vector<Contributor> RoundAgreement::pinnable_contributors(uint32_t k) const {
  const FolderExchangeConfig& c = context_.config;
  std::vector<Contributor> contributors{{c.worker, mine_.tokens, mine_.loss, mine_.overflow, own_checksums_[k], own_files_[k]}};
  for (const auto& [worker, checked] : checked_[k])
    if (!refused_(worker)) contributors.push_back(checked.contributor);
  return contributors;
}

// Note [Summing ahead of the commit]
// An all-gather replica used to wait for the shard owner's commit and only then sum, so a round
// took two sums end to end: the owner's (its check, Note [The check and the sum in one pass])
// and then everyone else's, with the others idle during the first. Once every member's
// contribution has checked out here, a member sums them as the owner will pin them (the same
// contributors, weights, order and bytes), measuring each as the owner does; the commit that
// names exactly those is then applied without another pass, and any other commit (a member
// left out, a guest let in, a refusal) is summed as before. A sum that would be refused, or a
// contribution that does not decode, leaves it to the commit. Tried once a round per shard.
void RoundAgreement::sum_ahead(uint32_t k) {
  const FolderExchangeConfig& c = context_.config;
  ShardOutcome& shard = shards_[k];
  if (c.pattern != ExchangePattern::all_gather || !member_ || shard.done || shard.summed_in_grad || shard.summed_ahead)
    return;
  for (const std::string& m : members_)
    if (m != c.worker && (refused_(m) || !checked_[k].count(m))) return;
  shard.summed_ahead = true;
  std::vector<Contributor> contributors = pinnable_contributors(k);
  if (nothing_to_average(contributors)) return;
  const ShardRange range = shard_range(n_, c.shard_count, k);
  if (!sum_checked_in_one_pass(k, contributors, grad_ + range.begin, range.size())) return;
  sort_by_worker(contributors);
  shard.summed_in_grad = std::move(contributors);
}

// Note [Checked contributions] in exchange/contribution_check.h: each contribution that carries
// tokens is decoded again and measured; those the rule refuses leave `contributors` and come back
// as refusals. Only after the one pass above found something to refuse.
std::vector<wire::Refusal> RoundAgreement::refuse_contributions(uint32_t k, std::vector<Contributor>& contributors) {
  const ShardRange range = shard_range(n_, context_.config.shard_count, k);
  decoded_.resize(range.size());
  std::vector<size_t> measured;
  std::vector<ContributionNorm> norms;
  std::vector<std::string> undecodable;
  for (size_t i = 0; i < contributors.size(); ++i) {
    const Contributor& x = contributors[i];
    if (x.overflow || x.tokens == 0) continue;  // a skipped round, or no weight in the average
    std::string problem;
    try {
      with_contribution(k, x, [&](const std::string& payload, const codec::CodecOptions& options) {
        ++context_.stats.contributions_decoded;
        codec::decode(reinterpret_cast<const uint8_t*>(payload.data()), payload.size(), options, decoded_.data(), decoded_.size());
      });
    } catch (const std::exception& e) {
      problem = str("does not decode: ", e.what());
    }
    measured.push_back(i);
    norms.push_back(problem.empty() ? measure_contribution(decoded_.data(), decoded_.size()) : ContributionNorm{false, 0});
    undecodable.push_back(std::move(problem));
  }
  const std::vector<std::optional<std::string>> why = contribution_refusals(norms, context_.config.max_norm_ratio);
  std::vector<wire::Refusal> refusals;
  std::vector<bool> refused(contributors.size(), false);
  for (size_t j = 0; j < measured.size(); ++j) {
    if (!why[j]) continue;
    const Contributor& x = contributors[measured[j]];
    wire::Refusal& r = refusals.emplace_back();
    r.set_worker(x.worker);
    r.set_file(x.file);
    r.set_reason(undecodable[j].empty() ? *why[j] : undecodable[j]);
    refused[measured[j]] = true;
    context_.log().error(str("round ", round_, " shard ", k, ": leaving out ", x.worker, "'s contribution ", x.file, ": ",
                             r.reason()));
  }
  size_t i = 0;
  std::erase_if(contributors, [&](const Contributor&) { return refused[i++]; });
  return refusals;
}

void RoundAgreement::publish_agreement(uint32_t k, uint32_t epoch) {
  const FolderExchangeConfig& c = context_.config;
  const bool sharded = c.pattern == ExchangePattern::sharded;
  std::vector<Contributor> contributors = pinnable_contributors(k);
  // Guests (Note [Late entry]) may be among them: only members are missed. A missing member's
  // partial Δ stands in for its whole one (Note [Partial deltas]).
  std::string missing, salvaged;
  for (const std::string& m : members_) {
    if (std::any_of(contributors.begin(), contributors.end(), [&](const Contributor& x) { return x.worker == m; })) continue;
    if (const auto partial = partials_[k].find(m); partial != partials_[k].end() && !refused_(m)) {
      contributors.push_back(partial->second.contributor);
      salvaged += str(" ", m, " (", partial->second.contributor.tokens, " tokens)");
      ++context_.stats.partials_salvaged;
      continue;
    }
    missing += " " + m;
    ++context_.stats.contributions_left_out;
  }
  // Note [The check and the sum in one pass]
  const ShardRange range = shard_range(n_, c.shard_count, k);
  float* const sum_out = sharded ? (reduced_.resize(range.size()), reduced_.data()) : grad_ + range.begin;
  sort_by_worker(contributors);
  const bool summed = !nothing_to_average(contributors) &&
                      (shards_[k].summed_in_grad == contributors ||  // summed ahead (Note [Summing ahead of the commit])
                       sum_checked_in_one_pass(k, contributors, sum_out, range.size()));
  const std::vector<wire::Refusal> refusals = summed ? std::vector<wire::Refusal>{} : refuse_contributions(k, contributors);
  shards_[k].summed_in_grad.reset();
  if (summed && !sharded) shards_[k].summed_in_grad = contributors;
  if (!salvaged.empty())
    context_.log().warn(str("round ", round_, " shard ", k, ": partial deltas stand in for the whole ones of", salvaged));
  if (!missing.empty()) context_.log().warn(str("round ", round_, " shard ", k, ": agreed without", missing));
  wire::FileHeader header = context_.new_header();
  wire::RoundView* view = nullptr;
  std::string payload;
  if (!sharded) {
    wire::RoundCommit* commit = header.mutable_commit();
    commit->set_round(round_);
    commit->set_shard_index(k);
    commit->set_shard_count(c.shard_count);
    commit->set_owner(c.worker);
    commit->set_epoch(epoch);
    fill_contributors(commit->mutable_contributors(), contributors);
    for (const wire::Refusal& r : refusals) *commit->add_refused() = r;
    view = commit->mutable_view();
  } else {
    wire::GradientShard* g = new_shard(header, k);
    g->set_reduced(true);
    g->set_epoch(epoch);
    fill_contributors(g->mutable_contributors(), contributors);
    for (const wire::Refusal& r : refusals) *g->add_refused() = r;
    view = g->mutable_view();
    uint64_t total = 0;
    for (const Contributor& x : contributors) total += x.tokens;
    // "overflow" tells every replica to skip the round: also when there is nothing to average.
    const bool overflow = nothing_to_average(contributors);
    g->set_overflow(overflow);
    g->set_tokens(total);
    if (!overflow) {
      std::vector<float>& reduced = reduced_;
      try {
        if (!summed) {
          TokenWeightedSum sum;
          for (const Contributor& x : contributors) {
            if (x.worker == c.worker) {
              sum.add(x.worker, x.tokens, counted(TokenWeightedSum::encoded(own_payloads_[k], c.codec)));
              continue;
            }
            const std::string rel = round_dir() + "/" + x.file;
            const wire::WireFile& file = checked_file(k, x);
            sum.add(x.worker, x.tokens,
                    counted(rejecting(rel, TokenWeightedSum::encoded(file.payload, decode_options(file.header.gradient().codec(), c.codec, rel)))));
          }
          sum.sum_into(reduced.data(), reduced.size());
        }
      } catch (const std::exception& e) {
        // A contribution that does not decode: forget it and decide again without it.
        context_.log().error(str("round ", round_, " shard ", k, ": not publishing an agreement: ", e.what()));
        for (auto* list : {&checked_, &partials_})
          std::erase_if((*list)[k], [&](const auto& entry) {
            return context_.rejected(round_dir() + "/" + entry.second.contributor.file);
          });
        return;
      }
      payload = context_.buffers.take(own_payloads_[k].size());  // the reduced shard encodes to about as much
      codec::encode_into(reduced.data(), reduced.size(), c.codec, payload);
    }
  }
  for (const std::string& m : members_) view->add_members(m);
  if (k == 0) decide_view_(view, contributors);
  const std::string name = agreement_name(c.pattern, k, epoch, c.worker, context_.incarnation.token(str("a/", round_, "/", k, "/", epoch)));
  const std::string rel = round_dir() + "/" + name;
  wire::FramedPieces framed = context_.frame_pieces(rel, std::move(header), payload);
  context_.publish(rel, framed);
  own_agreements_[name] = wire::WireFile{std::move(framed.header), std::move(payload)};
  ++context_.stats.agreements_published;
}

uint64_t RoundAgreement::publish_partial(uint64_t round, const float* delta, size_t n, const LocalContribution& mine) {
  const FolderExchangeConfig& c = context_.config;
  const std::string dir = round_dir_name(round);
  std::vector<std::string>& own = own_partials_[round];
  // One that has not landed was seen by nobody: a newer one makes it pointless to upload.
  std::erase_if(own, [&](const std::string& name) {
    if (context_.mirror.landed(dir + "/" + name)) return false;
    context_.mirror.withdraw(dir + "/" + name);
    return true;
  });
  uint64_t written = 0;
  std::string payload = context_.buffers.take();
  for (uint32_t k = 0; k < c.shard_count; ++k) {
    const ShardRange range = shard_range(n, c.shard_count, k);
    wire::FileHeader header = context_.new_header();
    wire::GradientShard* g = header.mutable_gradient();
    g->set_round(round);
    g->set_worker(c.worker);
    g->set_shard_index(k);
    g->set_shard_count(c.shard_count);
    g->set_begin(range.begin);
    g->set_end(range.end);
    *g->mutable_codec() = codec_spec(c.codec);
    g->set_tokens(mine.tokens);
    g->set_loss(mine.loss);
    g->set_overflow(mine.overflow);
    g->set_partial(true);
    payload.clear();
    // No error feedback: the residual belongs to the whole Δ (a dead worker's is lost anyway).
    if (!mine.overflow) codec::encode_into(delta + range.begin, range.size(), c.codec, payload);
    const std::string name = partial_name(c.worker, k, context_.incarnation.token(str("p/", round, "/", k, "/", mine.tokens)));
    const wire::FramedPieces framed = context_.frame_pieces(dir + "/" + name, std::move(header), payload);
    context_.publish(dir + "/" + name, framed);
    written += framed.size();
    own.push_back(name);
  }
  context_.buffers.give(std::move(payload));
  ++context_.stats.partials_published;
  return written;
}

void RoundAgreement::withdraw_partials(uint64_t round) {
  std::set<std::string> pinned;
  if (round == round_)
    for (const ShardOutcome& shard : shards_)
      for (const Contributor& x : shard.contributors)
        if (x.partial && x.worker == context_.config.worker) pinned.insert(x.file);
  for (auto it = own_partials_.begin(); it != own_partials_.end() && it->first <= round; it = own_partials_.erase(it))
    for (const std::string& name : it->second)
      if (!pinned.count(name)) context_.mirror.withdraw(round_dir_name(it->first) + "/" + name);
}

}  // namespace gradbox::exchange

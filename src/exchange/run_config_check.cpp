#include "exchange/run_config_check.h"

#include "common/error.h"
#include "exchange/folder_names.h"
#include "exchange/round_agreement.h"

namespace gradbox::exchange {
namespace {

// The writer a run config's name gives: "config-<worker>-<token>.gbx".
std::string config_writer(const std::string& name) { return name.substr(7, name.rfind('-') - 7); }

// A run config is its writer's only under that writer's name (the signature, in a signed run,
// ties the header's worker to its signer): "" when it is, else why not.
std::string misnamed(const wire::RunConfig& rc, const std::string& name) {
  if (rc.worker() == config_writer(name)) return {};
  return str("a run config of worker '", rc.worker(), "' under ", config_writer(name), "'s name");
}

}  // namespace

wire::RunConfig RunConfigCheck::mine() const {
  const FolderExchangeConfig& c = context_.config;
  wire::RunConfig rc;
  rc.set_model_config_json(c.model_config_json);
  rc.set_train_config_json(c.train_config_json);
  rc.set_pattern(pattern_name(c.pattern));
  rc.set_shard_count(c.shard_count);
  rc.set_sync(c.sync);
  rc.set_initial_state_checksum(c.initial_state_checksum);
  rc.set_worker(c.worker);
  rc.set_stale_after_s(c.stale_after_s);
  *rc.mutable_codec() = codec_spec(c.codec);
  return rc;
}

std::optional<uint32_t> RunConfigCheck::run_shard_count() {
  for (const mirror::Arrival& file : context_.mirror.list(kRunConfigDir)) {
    if (!is_run_config_name(file.name)) continue;
    std::optional<wire::RunConfig> rc = read(file.name);
    if (!rc) continue;
    const uint32_t shards = rc->shard_count();
    if (shards >= 1 && shards <= 4096) return shards;
  }
  return std::nullopt;
}

std::vector<uint64_t> RunConfigCheck::initial_states_of(const std::string& worker) {
  std::vector<uint64_t> offered;
  for (const mirror::Arrival& file : context_.mirror.list(kRunConfigDir)) {
    if (!is_run_config_name(file.name) || config_writer(file.name) != worker) continue;
    auto read = initial_states_read_.find(file.name);
    if (read == initial_states_read_.end()) {
      std::optional<wire::RunConfig> rc = this->read(file.name);
      if (!rc) continue;  // not whole yet, or refused: looked at again
      read = initial_states_read_.emplace(file.name, rc->initial_state_checksum()).first;
    }
    offered.push_back(read->second);
  }
  return offered;
}

std::optional<wire::RunConfig> RunConfigCheck::read(const std::string& name) {
  const std::string rel = str(kRunConfigDir, "/", name);
  std::optional<wire::WireFile> wf = context_.read_checked(rel);
  if (!wf || !wf->header.has_run_config()) return std::nullopt;
  if (const std::string why = misnamed(wf->header.run_config(), name); !why.empty()) {
    context_.reject(rel, str(context_.mirror.where(rel), ": ", why));
    return std::nullopt;
  }
  return wf->header.run_config();
}

void RunConfigCheck::publish() {
  if (published_) return;
  wire::FileHeader header = context_.new_header();
  *header.mutable_run_config() = mine();
  const std::string rel = run_config_name(context_.config.worker, context_.incarnation.token("run-config"));
  context_.publish(rel, context_.frame(rel, header));
  published_ = true;
}

void RunConfigCheck::check_peers(bool first_round) {
  const wire::RunConfig expected = mine();
  for (const mirror::Arrival& file : context_.mirror.list(kRunConfigDir)) {
    if (!is_run_config_name(file.name)) continue;
    const std::string rel = str(kRunConfigDir, "/", file.name);
    if (!checked_.insert(rel).second) continue;
    const std::optional<std::string> bytes = context_.mirror.read(rel);
    if (!bytes) {
      checked_.erase(rel);  // gone meanwhile; look again later
      continue;
    }
    const std::string peer = config_writer(file.name);
    std::string problem;
    try {
      wire::WireFile wf = wire::parse(*bytes, context_.mirror.where(rel), context_.key(rel));
      wire::check_identity(wf.header, context_.config.run_id, context_.config.model_fingerprint, context_.mirror.where(rel));
      const wire::RunConfig& theirs = wf.header.run_config();
      if (const std::string why = misnamed(theirs, file.name); !why.empty()) {
        // Not the named peer's settings: nothing to hold against it (a forgery, counted as one).
        context_.reject(rel, str(context_.mirror.where(rel), ": ", why));
        continue;
      }
      if (peer != context_.config.worker) peer_verified_ = true;
      if (theirs.pattern() != expected.pattern())
        problem = str("--exchange ", theirs.pattern(), " (this worker: ", expected.pattern(), ")");
      else if (theirs.shard_count() != expected.shard_count())
        problem = str("--shards ", theirs.shard_count(), " (this worker: ", expected.shard_count(), ")");
      else if (theirs.sync() != expected.sync())
        problem = str("--sync ", theirs.sync().empty() ? "gradient" : theirs.sync(), " (this worker: ", expected.sync(), ")");
      else if (theirs.codec().SerializeAsString() != expected.codec().SerializeAsString())
        problem = str("--codec ", theirs.codec().codec(), " level ", theirs.codec().zstd_level(), " (this worker: ",
                      expected.codec().codec(), " level ", expected.codec().zstd_level(), ")");
      if (!problem.empty()) problem = str(context_.mirror.where(rel), ": a peer of this run uses ", problem);
    } catch (const wire::SignatureError& e) {
      // A stranger's or another member's forgery says nothing about the named peer: refused
      // like any forged file, held against nobody. Only where no peer's config has verified
      // yet, at the start, is it more likely this worker's secret that is wrong.
      if (first_round && !peer_verified_)
        throw InputError(str(e.what(), "; no peer's run config has verified yet: is --run-secret-file this run's?"));
      if (!context_.rejected(rel)) ++context_.stats.unsigned_or_forged_files;
      context_.reject(rel, e.what());
      continue;
    } catch (const std::exception& e) {
      problem = e.what();  // another run or model; names the file
    }
    if (problem.empty()) continue;
    ++context_.stats.config_mismatches;
    refused_.insert(peer);
    if (first_round) throw InputError(problem + "; start every worker with the same model and exchange settings");
    context_.log().error(problem + "; its files are left out");
  }
}

}  // namespace gradbox::exchange

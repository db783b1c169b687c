#include "exchange/folder_checkpoint.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <optional>
#include <set>

#include "common/atomic_file.h"
#include "common/checksum.h"
#include "common/error.h"
#include "common/log.h"
#include "mirror/sync_contract.h"
#include "wire/envelope.h"

namespace gradbox::exchange {
namespace {

// Only for the worker's own local files: the checkpoint folder being sliced and the target of a
// fetch. The shared folder is reached through the Mirror alone (Note [The seam]).
namespace fs = std::filesystem;

// The files of a local checkpoint folder (worker/checkpoint.h, which needs LibTorch), in the
// order they are published. The local manifest.json travels too, so the reassembled folder is
// a checkpoint that verify_checkpoint() accepts.
constexpr const char* kCheckpointFiles[] = {"model.safetensors", "optimizer.safetensors", "state.json", "manifest.json"};
constexpr const char* kCheckpointsDir = "checkpoints";
// The syncer fetches these on demand only (Note [The syncer contract]).
constexpr std::string_view kPartPrefix = mirror::kCheckpointPartPrefix;

const log::Logger& logger() {
  static const log::Logger instance("checkpoint");
  return instance;
}

// The same broken manifest is seen on every round; say so once.
void warn_once(const std::string& message) {
  static std::mutex mutex;
  static std::set<std::string> said;
  std::lock_guard lock(mutex);
  if (said.insert(message).second) logger().warn(message);
}

std::string join(const std::string& dir_rel, std::string_view name) { return str(dir_rel, "/", name); }

std::string part_name(uint32_t index) {
  char number[16];
  std::snprintf(number, sizeof number, "%04u.gbx", index);
  return str(kPartPrefix, number);
}

// A name from a manifest that is safe to join to a folder: one component, not hidden.
bool is_plain_name(const std::string& name) {
  return !name.empty() && name.find('/') == std::string::npos && name.find('\\') == std::string::npos &&
         name[0] != '.';
}

struct DirName {
  uint64_t step = 0;
  uint32_t epoch = 0;
  std::string publisher;
};

std::optional<DirName> parse_dir_name(const std::string& name) {
  unsigned long long step = 0;
  unsigned epoch = 0;
  int consumed = 0;
  if (std::sscanf(name.c_str(), "s%llu-e%u-%n", &step, &epoch, &consumed) != 2 || consumed == 0) return std::nullopt;
  DirName parsed{step, epoch, name.substr(static_cast<size_t>(consumed))};
  if (!is_plain_name(parsed.publisher) || parsed.publisher.find(mirror::kTempMarker) != std::string::npos)
    return std::nullopt;
  return parsed;
}

wire::FileHeader new_header(const FileIdentity& identity, mirror::Clock& clock) {
  wire::FileHeader header;
  header.set_run_id(identity.run_id);
  header.set_model_fingerprint(identity.model_fingerprint);
  header.set_created_unix_ms(clock.unix_ms());
  return header;
}

// Where one checkpoint's files are read from: a peer's as the mirror holds them (whole and
// verified), or this worker's own as it published them.
struct Source {
  mirror::Mirror& mirror;
  bool own;

  std::optional<std::string> read(const std::string& rel) const {
    return own ? mirror.read_published(rel) : mirror.read(rel);
  }
  // The bytes of rel; throws InputError naming it when it is not there (pruned meanwhile).
  std::string read_or_throw(const std::string& rel) const {
    std::optional<std::string> bytes = read(rel);
    if (!bytes) throw InputError(str(mirror.where(rel), ": no longer there (pruned meanwhile?)"));
    return std::move(*bytes);
  }
};

// Parses a manifest and checks that it belongs to this run and to the folder it lies in, and
// that its names are safe to use. Throws (wire::WireError or InputError) naming `origin`.
wire::FileHeader parse_manifest(std::string_view bytes, const std::string& origin, const std::string& dir_rel,
                                const FileIdentity& identity) {
  const std::string rel = join(dir_rel, kCheckpointManifestName);
  wire::WireFile file = wire::parse(bytes, origin, wire::FileKey{identity.mac.get(), rel});
  wire::check_identity(file.header, identity.run_id, identity.model_fingerprint, origin);
  GB_REQUIRE(file.header.has_checkpoint_manifest(), origin, ": not a checkpoint manifest");
  const wire::CheckpointManifest& m = file.header.checkpoint_manifest();
  const std::string expected_dir = folder_checkpoint_dir(m.step(), m.epoch(), m.publisher());
  GB_REQUIRE(expected_dir == dir_rel, origin, ": describes ", expected_dir, " but lies in ", dir_rel);
  std::set<std::string> names;
  for (const wire::CheckpointFile& f : m.files())
    GB_REQUIRE(is_plain_name(f.name()) && names.insert(f.name()).second, origin, ": bad file name '", f.name(), "'");
  for (const wire::CheckpointPartRef& p : m.parts())
    GB_REQUIRE(is_plain_name(p.name()) && p.name().starts_with(kPartPrefix) && names.insert(p.name()).second, origin,
               ": bad part name '", p.name(), "'");
  return std::move(file.header);
}

// Part `index` of the manifest, verified and pinned by the manifest's payload checksum.
wire::WireFile read_part(const Source& source, const std::string& rel, const wire::CheckpointManifest& manifest,
                         int index, const FileIdentity& identity) {
  const std::string origin = source.mirror.where(rel);
  std::string bytes = source.read_or_throw(rel);
  wire::WireFile part;
  try {
    part = wire::parse(std::move(bytes), origin, wire::FileKey{identity.mac.get(), rel});
    wire::check_identity(part.header, identity.run_id, identity.model_fingerprint, origin);
  } catch (const wire::WireError& e) {
    throw InputError(e.what());  // the caller treats every mismatch alike: try an older checkpoint
  }
  const wire::CheckpointPartRef& ref = manifest.parts(index);
  GB_REQUIRE(part.header.payload_checksum() == ref.payload_checksum() && part.payload.size() == ref.payload_length(),
             origin, ": not the part the manifest lists (", part.payload.size(), " bytes, checksum ",
             to_hex64(part.header.payload_checksum()), "; expected ", ref.payload_length(), " bytes, checksum ",
             to_hex64(ref.payload_checksum()), ")");
  GB_REQUIRE(part.header.has_checkpoint_part(), origin, ": not a checkpoint part");
  const wire::CheckpointPart& body = part.header.checkpoint_part();
  GB_REQUIRE(body.step() == manifest.step() && body.publisher() == manifest.publisher() &&
                 body.index() == static_cast<uint32_t>(index),
             origin, ": is part ", body.index(), " of round ", body.step(), " by ", body.publisher(), ", expected part ",
             index, " of round ", manifest.step(), " by ", manifest.publisher());
  return part;
}

// Writes every file of the manifest into the local folder `dir` from the parts in dir_rel: the
// parts of each file follow each other in the manifest, in offset order.
void reassemble(const Source& source, const std::string& dir_rel, const wire::CheckpointManifest& manifest,
                const FileIdentity& identity, const fs::path& dir) {
  const std::string where = source.mirror.where(dir_rel);
  int next_part = 0;
  std::optional<wire::WireFile> part;  // read, but maybe the first part of the next file
  for (const wire::CheckpointFile& f : manifest.files()) {
    AtomicFileWriter writer(dir / f.name());
    while (next_part < manifest.parts_size()) {
      const std::string part_rel = join(dir_rel, manifest.parts(next_part).name());
      if (!part) part = read_part(source, part_rel, manifest, next_part, identity);
      const wire::CheckpointPart& body = part->header.checkpoint_part();
      if (body.file() != f.name()) break;
      GB_REQUIRE(body.offset() == writer.bytes_written(), source.mirror.where(part_rel), ": starts at byte ",
                 body.offset(), " of ", f.name(), ", expected ", writer.bytes_written());
      GB_REQUIRE(writer.bytes_written() + part->payload.size() <= f.bytes(), source.mirror.where(part_rel),
                 ": runs past the ", f.bytes(), " bytes of ", f.name());
      writer.write(part->payload);
      part.reset();
      ++next_part;
    }
    GB_REQUIRE(writer.bytes_written() == f.bytes(), where, ": the parts of ", f.name(), " hold ", writer.bytes_written(),
               " bytes, the manifest says ", f.bytes());
    writer.commit();
    const uint64_t checksum = file_checksum64(dir / f.name());
    GB_REQUIRE(checksum == f.checksum(), where, ": reassembled ", f.name(), " has checksum ", to_hex64(checksum),
               ", the manifest says ", to_hex64(f.checksum()));
  }
  if (next_part < manifest.parts_size())
    throw InputError(str(source.mirror.where(join(dir_rel, manifest.parts(next_part).name())),
                         ": belongs to no file of the manifest in order"));
}

// True when `bytes` (a part already published) are this exact part (an earlier, interrupted
// publish of the same bytes), so it is kept rather than published again under a name the folder
// may already have.
bool same_part(const std::string& bytes, const std::string& origin, const wire::FileHeader& header,
               uint64_t payload_checksum) {
  try {
    const wire::WireFile existing = wire::parse(bytes, origin);
    return existing.header.payload_checksum() == payload_checksum && existing.header.has_checkpoint_part() &&
           existing.header.checkpoint_part().SerializeAsString() == header.checkpoint_part().SerializeAsString() &&
           existing.header.run_id() == header.run_id() &&
           existing.header.model_fingerprint() == header.model_fingerprint();
  } catch (const std::exception&) {
    return false;
  }
}

// One of our own published checkpoints: the parts are withdrawn first; the manifest only once
// none of them is in the shared folder any more (landed() turns false once the syncer has
// deleted the shared copy), so that a crash in between leaves the manifest for a later prune to
// find the rest by. Once nothing is left, withdrawing the folder also tidies it away.
void withdraw_published(mirror::Mirror& mirror, const std::string& dir_rel) {
  const std::string manifest_rel = join(dir_rel, kCheckpointManifestName);
  std::set<std::string> parts;  // every part that may still be in the shared folder
  for (const std::string& name : mirror.list_published(dir_rel)) {
    if (name == kCheckpointManifestName) continue;
    mirror.withdraw(join(dir_rel, name));
    parts.insert(name);
  }
  // Parts withdrawn by an earlier prune are no longer published: the manifest names them.
  if (const std::optional<std::string> bytes = mirror.read_published(manifest_rel)) {
    try {
      const wire::WireFile manifest = wire::parse(*bytes, manifest_rel);
      for (const wire::CheckpointPartRef& p : manifest.header.checkpoint_manifest().parts())
        if (is_plain_name(p.name())) parts.insert(p.name());
    } catch (const wire::WireError&) {
      // damaged: only the parts still published were known, and they are withdrawn
    }
  }
  const bool parts_in_folder =
      std::any_of(parts.begin(), parts.end(), [&](const std::string& name) { return mirror.landed(join(dir_rel, name)); });
  if (!parts_in_folder) mirror.withdraw(dir_rel);
}

}  // namespace

std::string folder_checkpoint_dir(uint64_t step, uint32_t epoch, const std::string& publisher) {
  char name[48];
  std::snprintf(name, sizeof name, "s%08llu-e%u-", static_cast<unsigned long long>(step), epoch);
  return str(kCheckpointsDir, "/", name, publisher);
}

struct CheckpointPublisher::Pending {
  std::string dir_rel;
  wire::CheckpointManifest manifest;
  int sent = 0;  // parts [0, sent) are known to have landed
};

CheckpointPublisher::CheckpointPublisher(mirror::Mirror& mirror, mirror::Clock& clock, FileIdentity identity,
                                         uint64_t part_bytes)
    : mirror_(&mirror), clock_(&clock), identity_(std::move(identity)), part_bytes_(part_bytes) {
  GB_CHECK(part_bytes_ > 0, "part_bytes must be positive");
}

CheckpointPublisher::~CheckpointPublisher() = default;
CheckpointPublisher::CheckpointPublisher(CheckpointPublisher&&) noexcept = default;
CheckpointPublisher& CheckpointPublisher::operator=(CheckpointPublisher&&) noexcept = default;

void CheckpointPublisher::start(const fs::path& local_checkpoint, uint64_t step, uint32_t epoch,
                                const std::string& publisher, uint64_t tokens, uint64_t parameters_checksum) {
  GB_CHECK(!pending_, "the checkpoint of round ", pending_->manifest.step(), " is still being published");
  GB_CHECK(is_plain_name(publisher), "publisher '", publisher, "' is not a plain name");
  auto pending = std::make_unique<Pending>();
  pending->dir_rel = folder_checkpoint_dir(step, epoch, publisher);
  if (mirror_->published(join(pending->dir_rel, kCheckpointManifestName))) {
    logger().info(str(pending->dir_rel, " is already published"));
    return;
  }
  wire::CheckpointManifest& manifest = pending->manifest;
  manifest.set_step(step);
  manifest.set_publisher(publisher);
  manifest.set_epoch(epoch);
  manifest.set_tokens(tokens);
  manifest.set_parameters_checksum(parameters_checksum);
  std::string slice;
  for (const char* file_name : kCheckpointFiles) {
    const fs::path path = local_checkpoint / file_name;
    GB_REQUIRE(fs::is_regular_file(path), path.string(), ": missing, not a whole checkpoint folder");
    // A local checkpoint folder is immutable once renamed into place; should it change under us
    // anyway, readers see the file checksum disagree with the parts and skip this checkpoint.
    const uint64_t size = fs::file_size(path);
    wire::CheckpointFile* file = manifest.add_files();
    file->set_name(file_name);
    file->set_bytes(size);
    file->set_checksum(file_checksum64(path));
    std::ifstream in(path, std::ios::binary);
    GB_REQUIRE(in, path.string(), ": cannot open");
    for (uint64_t offset = 0; offset < size; offset += slice.size()) {
      slice.resize(static_cast<size_t>(std::min(part_bytes_, size - offset)));
      in.read(slice.data(), static_cast<std::streamsize>(slice.size()));
      GB_REQUIRE(static_cast<size_t>(in.gcount()) == slice.size(), path.string(), ": shorter than ", size,
                 " bytes (changed while publishing?)");
      const uint32_t index = static_cast<uint32_t>(manifest.parts_size());
      wire::FileHeader header = new_header(identity_, *clock_);
      wire::CheckpointPart* body = header.mutable_checkpoint_part();
      body->set_step(step);
      body->set_publisher(publisher);
      body->set_index(index);
      body->set_file(file_name);
      body->set_offset(offset);
      const uint64_t payload_checksum = checksum64(slice.data(), slice.size());
      wire::CheckpointPartRef* ref = manifest.add_parts();
      ref->set_name(part_name(index));
      ref->set_payload_length(slice.size());
      ref->set_payload_checksum(payload_checksum);
      const std::string part_rel = join(pending->dir_rel, ref->name());
      const std::optional<std::string> existing = mirror_->read_published(part_rel);
      if (existing && same_part(*existing, part_rel, header, payload_checksum)) continue;
      if (mirror_->landed(part_rel)) {
        // An earlier publish of other bytes under this name is already in the folder, which
        // never overwrites. Withdraw it (the syncer deletes the shared copies) and skip this one.
        mirror_->withdraw(pending->dir_rel);
        logger().warn(str(pending->dir_rel, ": an earlier publish of different bytes is in the shared folder; ",
                          "withdrawing it and skipping this checkpoint"));
        return;
      }
      // Other bytes of an interrupted earlier publish that never landed: replaced.
      if (mirror_->published(part_rel)) mirror_->withdraw(part_rel);
      const wire::FramedPieces framed = wire::frame_pieces(std::move(header), slice, wire::FileKey{identity_.mac.get(), part_rel});
      const std::array<std::string_view, 3> pieces = framed.pieces();
      mirror_->publish_pieces(part_rel, pieces);
    }
  }
  logger().info(str("publishing ", pending->dir_rel, ": ", manifest.parts_size(), " parts"));
  pending_ = std::move(pending);
}

bool CheckpointPublisher::poll() {
  if (!pending_) return false;
  const wire::CheckpointManifest& manifest = pending_->manifest;
  while (pending_->sent < manifest.parts_size()) {
    const std::string& name = manifest.parts(pending_->sent).name();
    const std::string part_rel = join(pending_->dir_rel, name);
    if (!mirror_->published(part_rel)) {
      logger().warn(str(pending_->dir_rel, ": ", name, " was withdrawn before it landed (pruned?); ",
                        "abandoning this checkpoint"));
      pending_.reset();
      return false;
    }
    if (!mirror_->landed(part_rel)) return false;
    ++pending_->sent;
  }
  wire::FileHeader header = new_header(identity_, *clock_);
  *header.mutable_checkpoint_manifest() = manifest;
  header.mutable_checkpoint_manifest()->set_created_unix_ms(header.created_unix_ms());
  const std::string manifest_rel = join(pending_->dir_rel, kCheckpointManifestName);
  mirror_->publish(manifest_rel, wire::frame(std::move(header), "", wire::FileKey{identity_.mac.get(), manifest_rel}));
  uint64_t bytes = 0;
  for (const wire::CheckpointFile& f : manifest.files()) bytes += f.bytes();
  logger().info(str("published ", pending_->dir_rel, " (", manifest.parts_size(), " parts, ", bytes, " bytes)"));
  pending_.reset();
  return true;
}

bool CheckpointPublisher::busy() const { return pending_ != nullptr; }

std::optional<uint64_t> CheckpointPublisher::pending_step() const {
  if (!pending_) return std::nullopt;
  return pending_->manifest.step();
}

FolderCheckpoint read_checkpoint_manifest(std::string_view bytes, const std::string& origin, const std::string& dir_rel,
                                          const FileIdentity& identity) {
  const wire::FileHeader header = parse_manifest(bytes, origin, dir_rel, identity);
  const wire::CheckpointManifest& m = header.checkpoint_manifest();
  FolderCheckpoint c;
  c.step = m.step();
  c.epoch = m.epoch();
  c.publisher = m.publisher();
  c.tokens = m.tokens();
  c.parameters_checksum = m.parameters_checksum();
  c.dir_rel = dir_rel;
  for (const wire::CheckpointFile& f : m.files()) c.bytes += f.bytes();
  c.parts = static_cast<size_t>(m.parts_size());
  return c;
}

std::vector<FolderCheckpoint> list_folder_checkpoints(mirror::Mirror& mirror, const FileIdentity& identity,
                                                      ManifestCache* cache) {
  std::vector<FolderCheckpoint> found;
  ManifestCache listed;  // what this listing saw: the cache keeps only that
  for (const std::string& name : mirror.list_dirs(kCheckpointsDir)) {
    if (!parse_dir_name(name)) continue;
    const std::string dir_rel = join(kCheckpointsDir, name);
    const std::string manifest_rel = join(dir_rel, kCheckpointManifestName);
    // Our own is published whole (atomically), and wins; a peer's counts once the syncer has
    // verified it whole.
    bool own = true;
    std::optional<std::string> bytes = mirror.read_published(manifest_rel);
    if (!bytes) {
      own = false;
      bytes = mirror.read(manifest_rel);
    }
    if (!bytes) continue;
    if (cache) {
      auto known = cache->by_rel.find(manifest_rel);
      if (known != cache->by_rel.end() && known->second.bytes == *bytes) {
        FolderCheckpoint c = known->second.checkpoint;
        c.own = own;
        found.push_back(c);
        listed.by_rel.insert(cache->by_rel.extract(known));
        continue;
      }
    }
    FolderCheckpoint c;
    try {
      c = read_checkpoint_manifest(*bytes, mirror.where(manifest_rel), dir_rel, identity);
    } catch (const std::exception& e) {
      warn_once(str("checkpoint skipped: ", e.what()));
      continue;
    }
    c.own = own;
    if (cache) listed.by_rel[manifest_rel] = {std::move(*bytes), c};
    found.push_back(std::move(c));
  }
  if (cache) *cache = std::move(listed);
  std::sort(found.begin(), found.end(), [](const FolderCheckpoint& a, const FolderCheckpoint& b) {
    if (a.step != b.step) return a.step > b.step;
    if (a.epoch != b.epoch) return a.epoch < b.epoch;
    return a.publisher < b.publisher;
  });
  return found;
}

bool fetch_folder_checkpoint(mirror::Mirror& mirror, const FolderCheckpoint& checkpoint, const FileIdentity& identity,
                             const fs::path& target_dir) {
  const Source source{mirror, checkpoint.own};
  const std::string manifest_rel = join(checkpoint.dir_rel, kCheckpointManifestName);
  wire::FileHeader header;
  try {
    header = parse_manifest(source.read_or_throw(manifest_rel), mirror.where(manifest_rel), checkpoint.dir_rel, identity);
  } catch (const wire::WireError& e) {
    throw InputError(e.what());
  }
  const wire::CheckpointManifest& manifest = header.checkpoint_manifest();
  if (!checkpoint.own) {
    // Ask the syncer for every missing part at once, so they download in parallel.
    std::set<std::string> here;
    for (const mirror::Arrival& arrival : mirror.list(checkpoint.dir_rel)) here.insert(arrival.name);
    bool all_here = true;
    for (const wire::CheckpointPartRef& part : manifest.parts()) {
      if (here.contains(part.name())) continue;
      all_here = false;
      mirror.request(join(checkpoint.dir_rel, part.name()));
    }
    if (!all_here) return false;
  }
  std::error_code ec;
  GB_REQUIRE(!fs::exists(target_dir, ec), target_dir.string(), ": already exists; not overwriting it with ",
             checkpoint.dir_rel);
  // Like a local checkpoint: built in a temp sibling, renamed into place whole.
  const fs::path temp = str(target_dir.string(), ".tmp.", ::getpid());
  fs::remove_all(temp, ec);
  fs::create_directories(temp);
  try {
    reassemble(source, checkpoint.dir_rel, manifest, identity, temp);
    fs::rename(temp, target_dir);
  } catch (...) {
    fs::remove_all(temp, ec);
    throw;
  }
  fsync_dir(target_dir.parent_path());
  logger().info(str("fetched ", checkpoint.dir_rel, " (", manifest.parts_size(), " parts) into ", target_dir.string()));
  return true;
}

void prune_folder_checkpoints(mirror::Mirror& mirror, const std::vector<FolderCheckpoint>& visible, size_t keep) {
  GB_CHECK(keep >= 1, "keep must be at least 1");
  if (visible.empty()) return;
  std::set<std::string> kept, listed;
  for (size_t i = 0; i < visible.size(); ++i) {
    listed.insert(visible[i].dir_rel);
    if (i < keep) kept.insert(visible[i].dir_rel);
  }
  const uint64_t oldest_kept_step = visible[std::min(keep, visible.size()) - 1].step;
  // Superseded: listed beyond the newest `keep`, or older than all of them without a readable
  // manifest (an abandoned publish, a foreign run). Newer folders without one may be arriving.
  auto superseded = [&](const std::string& name) {
    const std::optional<DirName> parsed = parse_dir_name(name);
    if (!parsed) return false;
    const std::string dir_rel = join(kCheckpointsDir, name);
    if (kept.contains(dir_rel)) return false;
    return listed.contains(dir_rel) || parsed->step < oldest_kept_step;
  };
  for (const std::string& name : mirror.list_dirs(kCheckpointsDir)) {
    if (!superseded(name)) continue;
    const std::string dir_rel = join(kCheckpointsDir, name);
    withdraw_published(mirror, dir_rel);  // ours, if it is ours
    mirror.forget(dir_rel);               // our mirror of a peer's files, flags and requests
    logger().debug(str("pruned ", dir_rel));
  }
}

}  // namespace gradbox::exchange

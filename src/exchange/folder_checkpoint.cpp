#include "exchange/folder_checkpoint.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <optional>
#include <set>

#include "common/atomic_file.h"
#include "common/checksum.h"
#include "common/error.h"
#include "common/log.h"
#include "wire/envelope.h"

namespace gradbox::exchange {
namespace {

namespace fs = std::filesystem;

// The files of a local checkpoint folder (worker/checkpoint.h, which needs LibTorch), in the
// order they are published. The local manifest.json travels too, so the reassembled folder is
// a checkpoint that verify_checkpoint() accepts.
constexpr const char* kCheckpointFiles[] = {"model.safetensors", "optimizer.safetensors", "state.json", "manifest.json"};
constexpr const char* kCheckpointsDir = "checkpoints";
constexpr const char* kManifestName = "manifest.gbx";
constexpr const char* kPartPrefix = "part-";  // the syncer fetches these on demand only

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

int64_t unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

fs::path with_suffix(fs::path path, const char* suffix) {
  path += suffix;
  return path;
}

bool path_exists(const fs::path& path) {
  std::error_code ec;
  return fs::exists(path, ec);
}

std::string part_name(uint32_t index) {
  char name[32];
  std::snprintf(name, sizeof name, "%s%04u.gbx", kPartPrefix, index);
  return name;
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
  if (!is_plain_name(parsed.publisher) || parsed.publisher.find(".tmp") != std::string::npos) return std::nullopt;
  return parsed;
}

wire::FileHeader new_header(const FileIdentity& identity) {
  wire::FileHeader header;
  header.set_run_id(identity.run_id);
  header.set_model_fingerprint(identity.model_fingerprint);
  header.set_created_unix_ms(unix_ms());
  return header;
}

// Reads a manifest and checks that it belongs to this run and to the folder it lies in, and
// that its names are safe to use. Throws (wire::WireError or InputError) naming the file.
wire::FileHeader read_manifest(const fs::path& path, const std::string& dir_rel, const FileIdentity& identity) {
  wire::WireFile file = wire::read_wire_file(path);
  wire::check_identity(file.header, identity.run_id, identity.model_fingerprint, path.string());
  GB_REQUIRE(file.header.has_checkpoint_manifest(), path.string(), ": not a checkpoint manifest");
  const wire::CheckpointManifest& m = file.header.checkpoint_manifest();
  const std::string expected_dir = folder_checkpoint_dir(m.step(), m.epoch(), m.publisher());
  GB_REQUIRE(expected_dir == dir_rel, path.string(), ": describes ", expected_dir, " but lies in ", dir_rel);
  std::set<std::string> names;
  for (const wire::CheckpointFile& f : m.files())
    GB_REQUIRE(is_plain_name(f.name()) && names.insert(f.name()).second, path.string(), ": bad file name '", f.name(), "'");
  for (const wire::CheckpointPartRef& p : m.parts())
    GB_REQUIRE(is_plain_name(p.name()) && p.name().starts_with(kPartPrefix) && names.insert(p.name()).second,
               path.string(), ": bad part name '", p.name(), "'");
  return std::move(file.header);
}

// Part `index` of the manifest, verified and pinned by the manifest's payload checksum.
wire::WireFile read_part(const fs::path& path, const wire::CheckpointManifest& manifest, int index,
                         const FileIdentity& identity) {
  wire::WireFile part;
  try {
    part = wire::read_wire_file(path);
    wire::check_identity(part.header, identity.run_id, identity.model_fingerprint, path.string());
  } catch (const wire::WireError& e) {
    throw InputError(e.what());  // the caller treats every mismatch alike: try an older checkpoint
  }
  const wire::CheckpointPartRef& ref = manifest.parts(index);
  GB_REQUIRE(part.header.payload_checksum() == ref.payload_checksum() && part.payload.size() == ref.payload_length(),
             path.string(), ": not the part the manifest lists (", part.payload.size(), " bytes, checksum ",
             to_hex64(part.header.payload_checksum()), "; expected ", ref.payload_length(), " bytes, checksum ",
             to_hex64(ref.payload_checksum()), ")");
  GB_REQUIRE(part.header.has_checkpoint_part(), path.string(), ": not a checkpoint part");
  const wire::CheckpointPart& body = part.header.checkpoint_part();
  GB_REQUIRE(body.step() == manifest.step() && body.publisher() == manifest.publisher() &&
                 body.index() == static_cast<uint32_t>(index),
             path.string(), ": is part ", body.index(), " of step ", body.step(), " by ", body.publisher(),
             ", expected part ", index, " of step ", manifest.step(), " by ", manifest.publisher());
  return part;
}

// Writes every file of the manifest into `dir` from the parts in `parts_dir`: the parts of each
// file follow each other in the manifest, in offset order.
void reassemble(const fs::path& parts_dir, const wire::CheckpointManifest& manifest, const FileIdentity& identity,
                const fs::path& dir) {
  int next_part = 0;
  std::optional<wire::WireFile> part;  // read, but maybe the first part of the next file
  for (const wire::CheckpointFile& f : manifest.files()) {
    AtomicFileWriter writer(dir / f.name());
    while (next_part < manifest.parts_size()) {
      const fs::path part_path = parts_dir / manifest.parts(next_part).name();
      if (!part) part = read_part(part_path, manifest, next_part, identity);
      const wire::CheckpointPart& body = part->header.checkpoint_part();
      if (body.file() != f.name()) break;
      GB_REQUIRE(body.offset() == writer.bytes_written(), part_path.string(), ": starts at byte ", body.offset(), " of ",
                 f.name(), ", expected ", writer.bytes_written());
      GB_REQUIRE(writer.bytes_written() + part->payload.size() <= f.bytes(), part_path.string(), ": runs past the ",
                 f.bytes(), " bytes of ", f.name());
      writer.write(part->payload);
      part.reset();
      ++next_part;
    }
    GB_REQUIRE(writer.bytes_written() == f.bytes(), parts_dir.string(), ": the parts of ", f.name(), " hold ",
               writer.bytes_written(), " bytes, the manifest says ", f.bytes());
    writer.commit();
    const uint64_t checksum = file_checksum64(dir / f.name());
    GB_REQUIRE(checksum == f.checksum(), parts_dir.string(), ": reassembled ", f.name(), " has checksum ",
               to_hex64(checksum), ", the manifest says ", to_hex64(f.checksum()));
  }
  if (next_part < manifest.parts_size())
    throw InputError(str((parts_dir / manifest.parts(next_part).name()).string(), ": belongs to no file of the manifest in order"));
}

// True when `path` already holds this exact part (an earlier, interrupted publish of the same
// bytes), so it is kept rather than rewritten under a name the folder already has.
bool same_part(const fs::path& path, const wire::FileHeader& header, uint64_t payload_checksum) {
  try {
    const wire::WireFile existing = wire::read_wire_file(path);
    return existing.header.payload_checksum() == payload_checksum && existing.header.has_checkpoint_part() &&
           existing.header.checkpoint_part().SerializeAsString() == header.checkpoint_part().SerializeAsString() &&
           existing.header.run_id() == header.run_id() &&
           existing.header.model_fingerprint() == header.model_fingerprint();
  } catch (const std::exception&) {
    return false;
  }
}

// Removes the files of a folder in our outbox, keeping the syncer's .sent markers (they tell it
// which shared copies to delete).
void remove_unsent_files(const fs::path& dir) {
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (it->path().extension() != ".sent") fs::remove_all(it->path(), ec);
}

// One of our own published checkpoints: the parts go first; the manifest only once the syncer
// has deleted every part from the folder (no part .sent left), so that a crash in between
// leaves the manifest for a later prune to find the rest by.
void drop_published(const fs::path& dir) {
  std::error_code ec;
  bool parts_in_folder = false;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name == kManifestName) continue;
    if (name.ends_with(".sent")) {
      if (name != std::string(kManifestName) + ".sent") parts_in_folder = true;
      continue;
    }
    fs::remove_all(it->path(), ec);
  }
  if (!parts_in_folder) fs::remove(dir / kManifestName, ec);
  if (fs::is_empty(dir, ec) && !ec) fs::remove(dir, ec);
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
  int sent = 0;  // parts [0, sent) are known to be uploaded
};

CheckpointPublisher::CheckpointPublisher(fs::path local_dir, FileIdentity identity, uint64_t part_bytes)
    : local_dir_(std::move(local_dir)), identity_(std::move(identity)), part_bytes_(part_bytes) {
  GB_CHECK(part_bytes_ > 0, "part_bytes must be positive");
}

CheckpointPublisher::~CheckpointPublisher() = default;
CheckpointPublisher::CheckpointPublisher(CheckpointPublisher&&) noexcept = default;
CheckpointPublisher& CheckpointPublisher::operator=(CheckpointPublisher&&) noexcept = default;

void CheckpointPublisher::start(const fs::path& local_checkpoint, uint64_t step, uint32_t epoch,
                                const std::string& publisher, uint64_t tokens, uint64_t parameters_checksum) {
  GB_CHECK(!pending_, "the checkpoint of step ", pending_->manifest.step(), " is still being published");
  GB_CHECK(is_plain_name(publisher), "publisher '", publisher, "' is not a plain name");
  auto pending = std::make_unique<Pending>();
  pending->dir_rel = folder_checkpoint_dir(step, epoch, publisher);
  const fs::path out_dir = local_dir_ / "outbox" / pending->dir_rel;
  if (path_exists(out_dir / kManifestName)) {
    logger().info(str(pending->dir_rel, " is already published"));
    return;
  }
  fs::create_directories(out_dir);
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
      wire::FileHeader header = new_header(identity_);
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
      const fs::path part_path = out_dir / ref->name();
      if (same_part(part_path, header, payload_checksum)) continue;
      if (path_exists(with_suffix(part_path, ".sent"))) {
        // An earlier publish of other bytes under this name is already in the folder, which
        // never overwrites. Drop it (the syncer deletes the shared copies) and skip this one.
        remove_unsent_files(out_dir);
        logger().warn(str(pending->dir_rel, ": an earlier publish of different bytes is in the shared folder; ",
                          "removing it and skipping this checkpoint"));
        return;
      }
      write_file_atomic(part_path, wire::frame(std::move(header), slice));
    }
  }
  logger().info(str("publishing ", pending->dir_rel, ": ", manifest.parts_size(), " parts"));
  pending_ = std::move(pending);
}

bool CheckpointPublisher::poll() {
  if (!pending_) return false;
  const fs::path out_dir = local_dir_ / "outbox" / pending_->dir_rel;
  const wire::CheckpointManifest& manifest = pending_->manifest;
  while (pending_->sent < manifest.parts_size()) {
    const fs::path part = out_dir / manifest.parts(pending_->sent).name();
    if (!path_exists(part)) {
      logger().warn(str(pending_->dir_rel, ": ", part.filename().string(), " left the outbox before upload (pruned?); ",
                        "abandoning this checkpoint"));
      pending_.reset();
      return false;
    }
    if (!path_exists(with_suffix(part, ".sent"))) return false;
    ++pending_->sent;
  }
  wire::FileHeader header = new_header(identity_);
  *header.mutable_checkpoint_manifest() = manifest;
  header.mutable_checkpoint_manifest()->set_created_unix_ms(header.created_unix_ms());
  write_file_atomic(out_dir / kManifestName, wire::frame(std::move(header), ""));
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

std::vector<FolderCheckpoint> list_folder_checkpoints(const fs::path& local_dir, const FileIdentity& identity) {
  std::vector<FolderCheckpoint> found;
  std::set<std::string> seen;
  for (const bool own : {true, false}) {
    const fs::path root = local_dir / (own ? "outbox" : "inbox") / kCheckpointsDir;
    std::error_code ec;
    for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string name = it->path().filename().string();
      if (!parse_dir_name(name)) continue;
      const fs::path manifest_path = it->path() / kManifestName;
      // The syncer flags a peer's file once it is whole; our own is written atomically.
      if (!path_exists(own ? manifest_path : with_suffix(manifest_path, ".flag"))) continue;
      const std::string dir_rel = str(kCheckpointsDir, "/", name);
      if (!seen.insert(dir_rel).second) continue;
      wire::FileHeader header;
      try {
        header = read_manifest(manifest_path, dir_rel, identity);
      } catch (const std::exception& e) {
        warn_once(str("checkpoint skipped: ", e.what()));
        continue;
      }
      const wire::CheckpointManifest& m = header.checkpoint_manifest();
      FolderCheckpoint c;
      c.step = m.step();
      c.epoch = m.epoch();
      c.publisher = m.publisher();
      c.tokens = m.tokens();
      c.parameters_checksum = m.parameters_checksum();
      c.dir_rel = dir_rel;
      for (const wire::CheckpointFile& f : m.files()) c.bytes += f.bytes();
      c.own = own;
      found.push_back(std::move(c));
    }
  }
  std::sort(found.begin(), found.end(), [](const FolderCheckpoint& a, const FolderCheckpoint& b) {
    if (a.step != b.step) return a.step > b.step;
    if (a.epoch != b.epoch) return a.epoch < b.epoch;
    return a.publisher < b.publisher;
  });
  return found;
}

bool fetch_folder_checkpoint(const fs::path& local_dir, const FolderCheckpoint& checkpoint,
                             const FileIdentity& identity, const fs::path& target_dir) {
  const fs::path parts_dir = local_dir / (checkpoint.own ? "outbox" : "inbox") / checkpoint.dir_rel;
  wire::FileHeader header;
  try {
    header = read_manifest(parts_dir / kManifestName, checkpoint.dir_rel, identity);
  } catch (const wire::WireError& e) {
    throw InputError(e.what());
  }
  const wire::CheckpointManifest& manifest = header.checkpoint_manifest();
  if (!checkpoint.own) {
    // Ask the syncer for every missing part at once, so they download in parallel.
    bool all_here = true;
    for (const wire::CheckpointPartRef& part : manifest.parts()) {
      if (path_exists(with_suffix(parts_dir / part.name(), ".flag"))) continue;
      all_here = false;
      const fs::path request = local_dir / "requests" / checkpoint.dir_rel / part.name();
      if (path_exists(request)) continue;
      fs::create_directories(request.parent_path());
      write_file_atomic(request, "");
    }
    if (!all_here) return false;
  }
  GB_REQUIRE(!path_exists(target_dir), target_dir.string(), ": already exists; not overwriting it with ", checkpoint.dir_rel);
  // Like a local checkpoint: built in a temp sibling, renamed into place whole.
  const fs::path temp = str(target_dir.string(), ".tmp.", ::getpid());
  std::error_code ec;
  fs::remove_all(temp, ec);
  fs::create_directories(temp);
  try {
    reassemble(parts_dir, manifest, identity, temp);
    fs::rename(temp, target_dir);
  } catch (...) {
    fs::remove_all(temp, ec);
    throw;
  }
  fsync_dir(target_dir.parent_path());
  logger().info(str("fetched ", checkpoint.dir_rel, " (", manifest.parts_size(), " parts) into ", target_dir.string()));
  return true;
}

void prune_folder_checkpoints(const fs::path& local_dir, const FileIdentity& identity, size_t keep) {
  GB_CHECK(keep >= 1, "keep must be at least 1");
  const std::vector<FolderCheckpoint> visible = list_folder_checkpoints(local_dir, identity);
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
    const std::string dir_rel = str(kCheckpointsDir, "/", name);
    if (kept.contains(dir_rel)) return false;
    return listed.contains(dir_rel) || parsed->step < oldest_kept_step;
  };
  for (const char* side : {"outbox", "inbox", "requests"}) {
    const fs::path root = local_dir / side / kCheckpointsDir;
    std::vector<fs::path> dirs;
    std::error_code ec;
    for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec))
      if (it->is_directory(ec) && superseded(it->path().filename().string())) dirs.push_back(it->path());
    for (const fs::path& dir : dirs) {
      if (std::string(side) == "outbox") {
        drop_published(dir);
      } else {
        fs::remove_all(dir, ec);  // our mirror of a peer's files, flags and requests
        if (!ec) logger().debug(str("pruned ", dir.string()));
      }
    }
  }
}

}  // namespace gradbox::exchange

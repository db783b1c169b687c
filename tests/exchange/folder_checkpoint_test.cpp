// Folder checkpoints between two workers' local folders, each seen through a mirror::DiskMirror,
// with a stand-in for their syncers (Note [The syncer contract]): a file of an outbox is "in the
// shared folder" once it has its .sent marker, and a peer's inbox gets it (flagged) on a sync,
// parts only when requested (the real syncer is tested in tests/syncer).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <random>

#include <nlohmann/json.hpp>

#include "common/atomic_file.h"
#include "common/checksum.h"
#include "common/error.h"
#include "exchange/folder_checkpoint.h"
#include "exchange/run_status.h"
#include "mirror/clock.h"
#include "mirror/disk_mirror.h"
#include "mirror/sync_contract.h"
#include "wire/envelope.h"

namespace gradbox::exchange {
namespace {

namespace fs = std::filesystem;
using mirror::DiskMirror;
using mirror::kFlagSuffix;
using mirror::kInboxDir;
using mirror::kOutboxDir;
using mirror::kRequestsDir;
using mirror::kSentSuffix;

const FileIdentity kRun{"run-1", 0x1234, nullptr};
constexpr uint64_t kPartBytes = 2000;  // several parts per file
const char* const kFiles[] = {"model.safetensors", "optimizer.safetensors", "state.json", "manifest.json"};

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::path(::testing::TempDir()) / str("gradbox_ckpt_", name, "_", ::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

fs::path with_suffix(fs::path path, std::string_view suffix) {
  path += suffix;
  return path;
}

// The stand-ins need no durability: plain writes keep the tests fast (no fsync).
void put(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
  ASSERT_TRUE(out.good()) << path;
}

std::string random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string bytes(n, '\0');
  for (char& c : bytes) c = static_cast<char>(rng());
  return bytes;
}

// A local checkpoint folder shaped like worker/checkpoint.h's (the bytes do not matter here;
// another `seed` gives other bytes of the same sizes).
fs::path make_local_checkpoint(const fs::path& root, uint64_t step, uint32_t seed = 0) {
  const fs::path dir = root / (seed == 0 ? str("local_step_", step) : str("local_step_", step, "_seed_", seed));
  fs::create_directories(dir);
  put(dir / "model.safetensors", random_bytes(4500, static_cast<uint32_t>(step) + (seed << 16)));
  put(dir / "optimizer.safetensors", random_bytes(3000, static_cast<uint32_t>(step) + (seed << 16) + 1));
  put(dir / "state.json", nlohmann::json{{"step", step}, {"tokens", step * 1000}}.dump());
  nlohmann::json manifest;
  for (const char* f : {"model.safetensors", "optimizer.safetensors", "state.json"})
    manifest["files"][f] = {{"bytes", fs::file_size(dir / f)}, {"checksum", to_hex64(file_checksum64(dir / f))}};
  put(dir / "manifest.json", manifest.dump());
  return dir;
}

std::vector<std::string> outbox_files(const fs::path& local) {
  std::vector<std::string> rels;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(local / kOutboxDir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!it->is_regular_file() || name.ends_with(kSentSuffix) || name.find(mirror::kTempMarker) != std::string::npos)
      continue;
    rels.push_back(fs::relative(it->path(), local / kOutboxDir).string());
  }
  return rels;
}

// The syncer's upload side: every outbox file (but those `hold` keeps back) gets its .sent.
void upload(const fs::path& local, const std::function<bool(const std::string&)>& hold = {}) {
  for (const std::string& rel : outbox_files(local))
    if (!hold || !hold(rel)) put(with_suffix(local / kOutboxDir / rel, kSentSuffix), "");
}

// The syncer's deletions: a .sent whose file left the outbox goes (with the shared copy).
void apply_deletions(const fs::path& local) {
  std::vector<fs::path> gone;
  for (const auto& it : fs::recursive_directory_iterator(local / kOutboxDir)) {
    const fs::path p = it.path();
    if (p.extension() == kSentSuffix && !fs::exists(p.parent_path() / p.stem())) gone.push_back(p);
  }
  for (const fs::path& p : gone) fs::remove(p);
}

// The syncer's download side, from `from`'s shared files into `to`'s inbox: parts on request only.
void download(const fs::path& from, const fs::path& to) {
  for (const std::string& rel : outbox_files(from)) {
    if (!fs::exists(with_suffix(from / kOutboxDir / rel, kSentSuffix))) continue;  // not in the folder yet
    if (fs::path(rel).filename().string().starts_with(mirror::kCheckpointPartPrefix) &&
        !fs::exists(to / kRequestsDir / rel))
      continue;
    const fs::path target = to / kInboxDir / rel;
    if (fs::exists(with_suffix(target, kFlagSuffix))) continue;
    fs::create_directories(target.parent_path());
    put(target, read_file(from / kOutboxDir / rel));
    put(with_suffix(target, kFlagSuffix), "");
  }
}

void sync(const fs::path& from, const fs::path& to) {
  upload(from);
  apply_deletions(from);
  download(from, to);
}

// Publishes a whole checkpoint of `step` from `local` (the syncer uploading everything).
void publish(const fs::path& local, uint64_t step, const std::string& publisher, const FileIdentity& identity = kRun) {
  DiskMirror mirror(local);
  CheckpointPublisher publisher_(mirror, mirror::system_clock(), identity, kPartBytes);
  publisher_.start(make_local_checkpoint(local.parent_path(), step), step, 0, publisher, step * 1000, step + 7);
  upload(local);
  ASSERT_TRUE(publisher_.poll());
}

// A clock that tells two lives' files apart: whatever a life writes carries its time.
class FixedClock final : public mirror::Clock {
 public:
  explicit FixedClock(int64_t unix_ms) : unix_ms_(unix_ms) {}
  double now_s() override { return 0; }
  int64_t unix_ms() override { return unix_ms_; }
  void sleep_s(double) override {}

 private:
  int64_t unix_ms_;
};

// The outbox files (not markers) under dir_rel, with their bytes.
std::map<std::string, std::string> outbox_contents(const fs::path& local, const std::string& dir_rel) {
  std::map<std::string, std::string> contents;
  for (const std::string& rel : outbox_files(local))
    if (rel.starts_with(dir_rel + "/")) contents[rel] = read_file(local / kOutboxDir / rel);
  return contents;
}

void expect_same_files(const fs::path& a, const fs::path& b) {
  for (const char* f : kFiles) EXPECT_EQ(read_file(a / f), read_file(b / f)) << f;
}

// What a resuming worker does: the newest checkpoint that reassembles, skipping newer ones whose
// parts are still missing or broken.
std::optional<uint64_t> fetch_newest_complete(mirror::Mirror& mirror, const fs::path& target_root) {
  for (const FolderCheckpoint& c : list_folder_checkpoints(mirror, kRun)) {
    try {
      if (fetch_folder_checkpoint(mirror, c, kRun, target_root / str("step_", c.step))) return c.step;
    } catch (const InputError&) {
      // logged by the caller in real life; try the older one
    }
  }
  return std::nullopt;
}

// A writer (a) and a reader (b) under a fresh root: checkpoints of steps 100 and 200 published
// by a and mirrored to b once (manifests; parts come on request).
struct TwoPublishedCheckpoints {
  explicit TwoPublishedCheckpoints(const std::string& name)
      : root(fresh_dir(name)), a(root / "a"), b(root / "b"), ma(a), mb(b) {
    publish(a, 100, "a");
    publish(a, 200, "a");
    sync(a, b);
  }
  ~TwoPublishedCheckpoints() { fs::remove_all(root); }
  fs::path root, a, b;
  DiskMirror ma, mb;
};

TEST(FolderCheckpoint, ManifestIsWrittenOnlyOnceEveryPartIsUploaded) {
  const fs::path root = fresh_dir("manifest_last");
  const fs::path a = root / "a";
  DiskMirror ma(a);
  CheckpointPublisher publisher(ma, mirror::system_clock(), kRun, kPartBytes);
  EXPECT_FALSE(publisher.busy());
  EXPECT_FALSE(publisher.poll());
  publisher.start(make_local_checkpoint(root, 100), 100, 0, "a", 100000, 42);
  EXPECT_TRUE(publisher.busy());
  EXPECT_EQ(publisher.pending_step(), std::optional<uint64_t>(100));
  EXPECT_THROW(publisher.start(make_local_checkpoint(root, 100), 100, 0, "a", 0, 0), std::logic_error);

  const fs::path dir = a / kOutboxDir / folder_checkpoint_dir(100, 0, "a");
  EXPECT_EQ(folder_checkpoint_dir(100, 0, "a"), "checkpoints/s00000100-e0-a");
  const size_t parts = outbox_files(a).size();
  EXPECT_EQ(parts, 7u);  // 4500 + 3000 bytes in slices of 2000, plus the two JSON files
  EXPECT_TRUE(fs::exists(dir / "part-0000.gbx"));
  // Every part but the last one uploaded: still no manifest.
  char last[32];
  std::snprintf(last, sizeof last, "part-%04zu.gbx", parts - 1);
  ASSERT_TRUE(fs::exists(dir / last));
  upload(a, [&](const std::string& rel) { return rel.ends_with(last); });
  EXPECT_FALSE(publisher.poll());
  EXPECT_FALSE(publisher.poll());
  EXPECT_FALSE(fs::exists(dir / "manifest.gbx"));
  EXPECT_TRUE(list_folder_checkpoints(ma, kRun).empty());
  EXPECT_TRUE(publisher.busy());
  upload(a);
  EXPECT_TRUE(publisher.poll());
  EXPECT_FALSE(publisher.busy());
  EXPECT_FALSE(publisher.poll());  // once
  ASSERT_TRUE(fs::exists(dir / "manifest.gbx"));
  publisher.start(make_local_checkpoint(root, 100), 100, 0, "a", 100000, 42);
  EXPECT_FALSE(publisher.busy());  // already published: nothing to do

  const wire::WireFile manifest = wire::read_wire_file(dir / "manifest.gbx");
  ASSERT_TRUE(manifest.header.has_checkpoint_manifest());
  EXPECT_EQ(manifest.header.checkpoint_manifest().parts_size(), static_cast<int>(parts));
  EXPECT_EQ(manifest.header.checkpoint_manifest().files_size(), 4);
  const std::vector<FolderCheckpoint> listed = list_folder_checkpoints(ma, kRun);
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].step, 100u);
  EXPECT_EQ(listed[0].publisher, "a");
  EXPECT_EQ(listed[0].tokens, 100000u);
  EXPECT_EQ(listed[0].parameters_checksum, 42u);
  EXPECT_TRUE(listed[0].own);
  uint64_t bytes = 0;
  for (const char* f : kFiles) bytes += fs::file_size(root / "local_step_100" / f);
  EXPECT_EQ(listed[0].bytes, bytes);
  fs::remove_all(root);
}

TEST(FolderCheckpoint, PublishIsAbandonedWhenAPartLeavesTheOutbox) {
  const fs::path root = fresh_dir("abandon");
  const fs::path a = root / "a";
  DiskMirror ma(a);
  CheckpointPublisher publisher(ma, mirror::system_clock(), kRun, kPartBytes);
  publisher.start(make_local_checkpoint(root, 100), 100, 0, "a", 0, 0);
  upload(a);
  ma.withdraw(folder_checkpoint_dir(100, 0, "a") + "/part-0004.gbx");  // pruned meanwhile
  EXPECT_FALSE(publisher.poll());
  EXPECT_FALSE(publisher.busy());
  EXPECT_FALSE(fs::exists(a / kOutboxDir / folder_checkpoint_dir(100, 0, "a") / "manifest.gbx"));
  fs::remove_all(root);
}

TEST(FolderCheckpoint, ReaderRequestsPartsAndReassemblesByteIdentical) {
  const fs::path root = fresh_dir("reassemble");
  const fs::path a = root / "a", b = root / "b";
  DiskMirror ma(a), mb(b);
  publish(a, 100, "a");
  sync(a, b);
  const std::vector<FolderCheckpoint> listed = list_folder_checkpoints(mb, kRun);
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_FALSE(listed[0].own);
  // Parts are on demand: the first fetch only asks for them.
  EXPECT_FALSE(fetch_folder_checkpoint(mb, listed[0], kRun, b / "run" / "step_100"));
  EXPECT_TRUE(fs::exists(b / kRequestsDir / listed[0].dir_rel / "part-0000.gbx"));
  EXPECT_FALSE(fs::exists(b / "run" / "step_100"));
  sync(a, b);
  ASSERT_TRUE(fetch_folder_checkpoint(mb, listed[0], kRun, b / "run" / "step_100"));
  expect_same_files(root / "local_step_100", b / "run" / "step_100");
  for (const auto& f : fs::directory_iterator(b / "run")) EXPECT_EQ(f.path().filename(), "step_100");  // no temp left
  EXPECT_THROW(fetch_folder_checkpoint(mb, listed[0], kRun, b / "run" / "step_100"), InputError);  // never overwrites
  // The publisher reassembles its own from its outbox.
  const std::vector<FolderCheckpoint> own = list_folder_checkpoints(ma, kRun);
  ASSERT_EQ(own.size(), 1u);
  ASSERT_TRUE(fetch_folder_checkpoint(ma, own[0], kRun, a / "run" / "step_100"));
  expect_same_files(root / "local_step_100", a / "run" / "step_100");
  fs::remove_all(root);
}

TEST(FolderCheckpoint, NewestCompleteSkipsANewerOneWithAMissingPart) {
  const fs::path root = fresh_dir("newest_complete");
  const fs::path a = root / "a", b = root / "b";
  DiskMirror ma(a), mb(b);
  publish(a, 100, "a");
  publish(a, 200, "a");
  // Part 2 of step 200 never reaches the folder (its shared copy lost).
  fs::remove(a / kOutboxDir / folder_checkpoint_dir(200, 0, "a") / "part-0002.gbx");
  for (int i = 0; i < 3; ++i) sync(a, b);
  EXPECT_EQ(list_folder_checkpoints(mb, kRun).size(), 2u);
  EXPECT_EQ(fetch_newest_complete(mb, b / "run"), std::nullopt);  // requests both
  sync(a, b);
  EXPECT_EQ(fetch_newest_complete(mb, b / "run"), std::optional<uint64_t>(100));
  expect_same_files(root / "local_step_100", b / "run" / "step_100");
  EXPECT_FALSE(fs::exists(b / "run" / "step_200"));
  fs::remove_all(root);
}

// A joiner lists with a cache while its checkpoint downloads: the same answer as without one,
// and a manifest whose bytes changed under it (a hostile copy) is verified again, not reused.
TEST(FolderCheckpoint, ACachedListingMatchesAFreshOneAndRechecksAChangedManifest) {
  TwoPublishedCheckpoints run("manifest_cache");
  const fs::path& b = run.b;
  DiskMirror& mb = run.mb;
  ManifestCache cache;
  auto steps = [](const std::vector<FolderCheckpoint>& listed) {
    std::vector<std::pair<uint64_t, uint64_t>> out;
    for (const FolderCheckpoint& c : listed) out.push_back({c.step, c.parameters_checksum});
    return out;
  };
  const std::vector<FolderCheckpoint> fresh = list_folder_checkpoints(mb, kRun);
  ASSERT_EQ(fresh.size(), 2u);
  EXPECT_EQ(steps(list_folder_checkpoints(mb, kRun, &cache)), steps(fresh));
  EXPECT_EQ(cache.by_rel.size(), 2u);
  EXPECT_EQ(steps(list_folder_checkpoints(mb, kRun, &cache)), steps(fresh));  // from the cache
  const fs::path manifest = b / kInboxDir / folder_checkpoint_dir(200, 0, "a") / "manifest.gbx";
  std::string bytes = read_file(manifest);
  bytes[bytes.size() - 3] ^= 0x01;
  put(manifest, bytes);
  const std::vector<FolderCheckpoint> after = list_folder_checkpoints(mb, kRun, &cache);
  ASSERT_EQ(after.size(), 1u);
  EXPECT_EQ(after[0].step, 100u);
  EXPECT_EQ(cache.by_rel.size(), 1u);  // only what the listing saw
}

TEST(FolderCheckpoint, AFlippedByteInAPartThrowsNamingThePart) {
  TwoPublishedCheckpoints run("flipped");
  const fs::path &a = run.a, &b = run.b;
  DiskMirror& mb = run.mb;
  for (const FolderCheckpoint& c : list_folder_checkpoints(mb, kRun)) fetch_folder_checkpoint(mb, c, kRun, b / "unused");
  sync(a, b);
  const fs::path part = b / kInboxDir / folder_checkpoint_dir(200, 0, "a") / "part-0003.gbx";
  std::string bytes = read_file(part);
  bytes[bytes.size() - 10] ^= 0x01;  // in the payload
  put(part, bytes);
  const FolderCheckpoint newest = list_folder_checkpoints(mb, kRun).at(0);
  ASSERT_EQ(newest.step, 200u);
  try {
    fetch_folder_checkpoint(mb, newest, kRun, b / "run" / "step_200");
    FAIL() << "a corrupt part was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("part-0003.gbx"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(b / "run" / "step_200"));
  EXPECT_TRUE(!fs::exists(b / "run") || fs::is_empty(b / "run")) << "temp folder left behind";
  // The caller falls back to the older one.
  EXPECT_EQ(fetch_newest_complete(mb, b / "run"), std::optional<uint64_t>(100));
}

TEST(FolderCheckpoint, AWholePartOtherThanTheListedOneIsRefused) {
  const fs::path root = fresh_dir("swapped");
  const fs::path a = root / "a", b = root / "b";
  DiskMirror ma(a), mb(b);
  publish(a, 100, "a");
  sync(a, b);
  const FolderCheckpoint c = list_folder_checkpoints(mb, kRun).at(0);
  EXPECT_FALSE(fetch_folder_checkpoint(mb, c, kRun, b / "run" / "step_100"));
  sync(a, b);
  // A complete, valid part file, but not the one the manifest pins.
  const fs::path dir = b / kInboxDir / c.dir_rel;
  put(dir / "part-0001.gbx", read_file(dir / "part-0002.gbx"));
  try {
    fetch_folder_checkpoint(mb, c, kRun, b / "run" / "step_100");
    FAIL() << "a swapped part was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("part-0001.gbx: not the part the manifest lists"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(b / "run" / "step_100"));
  fs::remove_all(root);
}

TEST(FolderCheckpoint, ManifestsOfAnotherRunAreSkipped) {
  const fs::path root = fresh_dir("foreign");
  const fs::path a = root / "a", b = root / "b";
  DiskMirror ma(a), mb(b);
  publish(a, 100, "a");
  publish(a, 300, "x", FileIdentity{"run-2", kRun.model_fingerprint, nullptr});
  publish(a, 400, "y", FileIdentity{kRun.run_id, 0x9999, nullptr});
  sync(a, b);
  for (DiskMirror* m : {&ma, &mb}) {
    const std::vector<FolderCheckpoint> listed = list_folder_checkpoints(*m, kRun);
    ASSERT_EQ(listed.size(), 1u) << m->local();
    EXPECT_EQ(listed[0].step, 100u);
  }
  EXPECT_EQ(list_folder_checkpoints(mb, FileIdentity{"run-2", kRun.model_fingerprint, nullptr}).at(0).step, 300u);
  fs::remove_all(root);
}

// In a signed run (Note [Signed files]) a checkpoint's manifest and parts carry the run key's
// tags: a reader with the key lists and fetches them; one with another run's key skips the
// manifest, and a part swapped for a stranger's copy fails the fetch.
TEST(FolderCheckpoint, ASignedRunsCheckpointsNeedItsKey) {
  const fs::path root = fresh_dir("signed");
  const fs::path a = root / "a", b = root / "b";
  DiskMirror ma(a), mb(b);
  const auto mac = [](const char* secret) {
    return std::make_shared<const wire::FileMac>(wire::RunSecret::from_text(secret, "test"));
  };
  const FileIdentity signed_run{kRun.run_id, kRun.model_fingerprint, mac("the run's own secret")};
  const FileIdentity other_key{kRun.run_id, kRun.model_fingerprint, mac("some other run's secret")};
  publish(a, 100, "a", signed_run);
  sync(a, b);
  EXPECT_TRUE(list_folder_checkpoints(mb, other_key).empty());
  EXPECT_EQ(list_folder_checkpoints(mb, kRun).size(), 1u);  // an unsigned reader cannot check, and reads
  const std::vector<FolderCheckpoint> listed = list_folder_checkpoints(mb, signed_run);
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_FALSE(fetch_folder_checkpoint(mb, listed[0], signed_run, b / "run" / "step_100"));  // asks for the parts
  sync(a, b);
  // b's copy of part 0 replaced by the same part framed without the key, as a stranger could.
  const fs::path part = b / kInboxDir / listed[0].dir_rel / "part-0000.gbx";
  ASSERT_TRUE(fs::exists(part));
  const std::string genuine = read_file(part);
  const wire::WireFile file = wire::parse(genuine, "part");
  put(part, wire::frame(file.header, file.payload));
  EXPECT_THROW(fetch_folder_checkpoint(mb, listed[0], signed_run, b / "run" / "step_100"), InputError);
  put(part, genuine);
  ASSERT_TRUE(fetch_folder_checkpoint(mb, listed[0], signed_run, b / "run" / "step_100"));
  expect_same_files(root / "local_step_100", b / "run" / "step_100");
  fs::remove_all(root);
}

TEST(FolderCheckpoint, PruneKeepsTheNewestAndDropsPartsBeforeTheManifest) {
  const fs::path root = fresh_dir("prune");
  const fs::path a = root / "a", b = root / "b";
  DiskMirror ma(a), mb(b);
  for (uint64_t step : {100, 200, 300}) publish(a, step, "a");
  sync(a, b);
  for (const FolderCheckpoint& c : list_folder_checkpoints(mb, kRun)) fetch_folder_checkpoint(mb, c, kRun, b / "unused");
  sync(a, b);
  const fs::path own100 = a / kOutboxDir / folder_checkpoint_dir(100, 0, "a");
  const fs::path mirror100 = b / kInboxDir / folder_checkpoint_dir(100, 0, "a");
  ASSERT_TRUE(fs::exists(mirror100 / "part-0000.gbx.flag"));

  prune_folder_checkpoints(ma, list_folder_checkpoints(ma, kRun), 2);
  // Parts first; the manifest stays while their shared copies exist (.sent markers).
  EXPECT_FALSE(fs::exists(own100 / "part-0000.gbx"));
  EXPECT_TRUE(fs::exists(own100 / "part-0000.gbx.sent"));
  EXPECT_TRUE(fs::exists(own100 / "manifest.gbx"));
  apply_deletions(a);  // the syncer deletes the parts from the folder
  prune_folder_checkpoints(ma, list_folder_checkpoints(ma, kRun), 2);
  EXPECT_FALSE(fs::exists(own100 / "manifest.gbx"));
  apply_deletions(a);
  prune_folder_checkpoints(ma, list_folder_checkpoints(ma, kRun), 2);
  EXPECT_FALSE(fs::exists(own100));
  for (uint64_t step : {200, 300})
    EXPECT_TRUE(fs::exists(a / kOutboxDir / folder_checkpoint_dir(step, 0, "a") / "part-0000.gbx")) << step;

  prune_folder_checkpoints(mb, list_folder_checkpoints(mb, kRun), 2);
  EXPECT_FALSE(fs::exists(mirror100));
  EXPECT_FALSE(fs::exists(b / kRequestsDir / folder_checkpoint_dir(100, 0, "a")));
  EXPECT_TRUE(fs::exists(b / kInboxDir / folder_checkpoint_dir(200, 0, "a") / "part-0000.gbx.flag"));
  ASSERT_EQ(list_folder_checkpoints(mb, kRun).size(), 2u);

  // Peers' checkpoints count too: b's step 400 supersedes a's step 200.
  publish(b, 400, "b");
  sync(b, a);
  prune_folder_checkpoints(ma, list_folder_checkpoints(ma, kRun), 2);
  EXPECT_FALSE(fs::exists(a / kOutboxDir / folder_checkpoint_dir(200, 0, "a") / "part-0000.gbx"));
  EXPECT_TRUE(fs::exists(a / kOutboxDir / folder_checkpoint_dir(300, 0, "a") / "part-0000.gbx"));
  fs::remove_all(root);
}

TEST(FolderCheckpoint, PublishResumesAfterAnInterruptedLifeKeepingTheSameBytes) {
  const fs::path root = fresh_dir("resume");
  const fs::path a = root / "a", b = root / "b";
  DiskMirror mb(b);
  const fs::path local = make_local_checkpoint(root, 100);
  const std::string dir_rel = folder_checkpoint_dir(100, 0, "a");
  std::map<std::string, std::string> first_life;
  {
    DiskMirror mirror(a);
    FixedClock clock(1000);
    CheckpointPublisher publisher(mirror, clock, kRun, kPartBytes);
    publisher.start(local, 100, 0, "a", 100000, 42);
    // Killed with parts 0-2 in the shared folder and the others still waiting for the syncer.
    upload(a, [](const std::string& rel) { return fs::path(rel).filename().string() >= "part-0003.gbx"; });
    EXPECT_FALSE(publisher.poll());
    first_life = outbox_contents(a, dir_rel);
  }
  ASSERT_EQ(first_life.size(), 7u);
  ASSERT_TRUE(fs::exists(a / kOutboxDir / dir_rel / "part-0002.gbx.sent"));
  ASSERT_FALSE(fs::exists(a / kOutboxDir / dir_rel / "part-0003.gbx.sent"));

  DiskMirror ma(a);
  FixedClock clock(2000);
  CheckpointPublisher publisher(ma, clock, kRun, kPartBytes);
  publisher.start(local, 100, 0, "a", 100000, 42);
  EXPECT_TRUE(publisher.busy());
  // Every part kept as the first life wrote it (its time, not this one's), landed or not.
  EXPECT_EQ(outbox_contents(a, dir_rel), first_life);
  EXPECT_TRUE(fs::exists(a / kOutboxDir / dir_rel / "part-0002.gbx.sent"));
  EXPECT_FALSE(publisher.poll());
  EXPECT_FALSE(fs::exists(a / kOutboxDir / dir_rel / "manifest.gbx"));
  upload(a);
  ASSERT_TRUE(publisher.poll());
  const wire::WireFile manifest = wire::read_wire_file(a / kOutboxDir / dir_rel / "manifest.gbx");
  EXPECT_EQ(manifest.header.created_unix_ms(), 2000);
  EXPECT_EQ(manifest.header.checkpoint_manifest().created_unix_ms(), 2000);
  EXPECT_EQ(manifest.header.checkpoint_manifest().parts_size(), 7);

  sync(a, mb.local());
  const FolderCheckpoint c = list_folder_checkpoints(mb, kRun).at(0);
  EXPECT_FALSE(fetch_folder_checkpoint(mb, c, kRun, b / "run" / "step_100"));
  sync(a, mb.local());
  ASSERT_TRUE(fetch_folder_checkpoint(mb, c, kRun, b / "run" / "step_100"));
  expect_same_files(local, b / "run" / "step_100");
  fs::remove_all(root);
}

TEST(FolderCheckpoint, ARestartWithOtherBytesReplacesUnsentPartsAndWithdrawsLandedOnes) {
  const fs::path root = fresh_dir("other_bytes");
  const fs::path a = root / "a", b = root / "b";
  DiskMirror ma(a), mb(b);
  const fs::path before = make_local_checkpoint(root, 100, 0), after = make_local_checkpoint(root, 100, 1);
  ASSERT_NE(read_file(before / "model.safetensors"), read_file(after / "model.safetensors"));

  // Nothing of the earlier life reached the folder: its parts are replaced by the new bytes.
  const std::string unsent = folder_checkpoint_dir(100, 0, "a");
  {
    CheckpointPublisher publisher(ma, mirror::system_clock(), kRun, kPartBytes);
    publisher.start(before, 100, 0, "a", 0, 0);
  }
  CheckpointPublisher publisher(ma, mirror::system_clock(), kRun, kPartBytes);
  publisher.start(after, 100, 0, "a", 0, 0);
  EXPECT_TRUE(publisher.busy());
  upload(a);
  ASSERT_TRUE(publisher.poll());
  sync(a, b);
  const FolderCheckpoint c = list_folder_checkpoints(mb, kRun).at(0);
  EXPECT_FALSE(fetch_folder_checkpoint(mb, c, kRun, b / "run" / "step_100"));
  sync(a, b);
  ASSERT_TRUE(fetch_folder_checkpoint(mb, c, kRun, b / "run" / "step_100"));
  expect_same_files(after, b / "run" / "step_100");

  // The earlier life's parts are in the folder, which never overwrites: withdrawn, and this
  // publish skipped; once the syncer has deleted them, a later one goes through.
  const std::string landed = folder_checkpoint_dir(200, 0, "a");
  {
    CheckpointPublisher earlier(ma, mirror::system_clock(), kRun, kPartBytes);
    earlier.start(make_local_checkpoint(root, 200, 0), 200, 0, "a", 0, 0);
    upload(a);
  }
  const fs::path other = make_local_checkpoint(root, 200, 1);
  publisher.start(other, 200, 0, "a", 0, 0);
  EXPECT_FALSE(publisher.busy());
  EXPECT_TRUE(outbox_contents(a, landed).empty());
  EXPECT_TRUE(fs::exists(a / kOutboxDir / landed / "part-0000.gbx.sent"));  // the syncer deletes the shared copy
  apply_deletions(a);
  publisher.start(other, 200, 0, "a", 0, 0);
  EXPECT_TRUE(publisher.busy());
  upload(a);
  ASSERT_TRUE(publisher.poll());
  EXPECT_EQ(list_folder_checkpoints(ma, kRun).at(0).step, 200u);
  ASSERT_TRUE(fetch_folder_checkpoint(ma, list_folder_checkpoints(ma, kRun).at(0), kRun, a / "run" / "step_200"));
  expect_same_files(other, a / "run" / "step_200");
  fs::remove_all(root);
}

TEST(FolderCheckpoint, StatusShowsTheNewestVerifiedManifest) {
  const fs::path root = fresh_dir("status");
  const fs::path a = root / "a";
  DiskMirror ma(a);
  fs::create_directories(root / "empty");
  EXPECT_NE(format_run_status(read_run_status(root / "empty", 60)).find("checkpoint: none"), std::string::npos);
  publish(a, 100, "a");
  publish(a, 200, "a");
  // A newer manifest still uploading does not count.
  const fs::path arriving = a / kOutboxDir / folder_checkpoint_dir(900, 0, "z") / "manifest.gbx";
  fs::create_directories(arriving.parent_path());
  const std::string whole = read_file(a / kOutboxDir / folder_checkpoint_dir(200, 0, "a") / "manifest.gbx");
  put(arriving, whole.substr(0, whole.size() / 2));
  const RunStatus status = read_run_status(a / kOutboxDir, 60);
  ASSERT_TRUE(status.checkpoint.has_value());
  EXPECT_EQ(status.checkpoint->step, 200u);
  EXPECT_EQ(status.checkpoint->publisher, "a");
  EXPECT_EQ(status.checkpoint->bytes, list_folder_checkpoints(ma, kRun).at(0).bytes);
  EXPECT_LT(status.checkpoint->age_s, 60);
  const std::string text = format_run_status(status);
  EXPECT_NE(text.find("checkpoint: after round 200, by a (0.0 MB, "), std::string::npos) << text;
  fs::remove_all(root);
}

}  // namespace
}  // namespace gradbox::exchange

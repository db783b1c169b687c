// The engine against a mounted (plain directory) shared folder, one pass at a time.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <fstream>
#include <set>
#include <nlohmann/json.hpp>

#include "common/atomic_file.h"
#include "common/checksum.h"
#include "common/error.h"
#include "syncer/mounted_backend.h"
#include "syncer/syncer.h"
#include "test_util.h"
#include "wire/envelope.h"

namespace gradbox::syncer {
namespace {

using namespace testing;

struct Fixture {
  fs::path root, shared, local;
  std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now();
  std::unique_ptr<Syncer> syncer;
  explicit Fixture(const std::string& name, int max_attempts = 3, double quarantine_after_s = 60) {
    root = fresh_dir(name);
    shared = root / "shared";
    local = root / "local";
    fs::create_directories(shared);
    SyncerOptions o{local, "me", max_attempts, quarantine_after_s};
    o.now = [this] { return now; };
    start(o);
  }
  // A new engine (a restart) with other options.
  void start(const SyncerOptions& o) { syncer = std::make_unique<Syncer>(std::make_unique<MountedBackend>(shared), o); }
  SyncerOptions options() {
    SyncerOptions o{local, "me", 3, 60};
    o.now = [this] { return now; };
    return o;
  }
  nlohmann::json stats() { return nlohmann::json::parse(read_file(local / kSyncerStatsFile)); }
};

TEST(Syncer, CompleteFileIsVerifiedRenamedAndFlagged) {
  Fixture f("complete");
  std::string bytes = framed_file(1);
  write_bytes(f.shared / "r1" / "a.bin", bytes);
  f.syncer->run_pass();
  EXPECT_EQ(read_file(f.local / kInboxDir / "r1" / "a.bin"), bytes);
  EXPECT_TRUE(fs::exists(f.local / kInboxDir / "r1" / flag_of("a.bin")));
  EXPECT_EQ(files_under(f.local / kInboxDir), (std::vector<std::string>{"r1/a.bin", flag_of("r1/a.bin")}));
  EXPECT_EQ(f.stats()["flagged"], 1);
  // Never downloaded again in this lifetime, even after the worker collects it.
  fs::remove(f.local / kInboxDir / "r1" / "a.bin");
  fs::remove(f.local / kInboxDir / "r1" / flag_of("a.bin"));
  f.syncer->run_pass();
  EXPECT_FALSE(fs::exists(f.local / kInboxDir / "r1" / "a.bin"));
  EXPECT_EQ(f.stats()["flagged"], 1);
}

TEST(Syncer, OnDemandFilesWaitForARequest) {
  Fixture f("on_demand");
  SyncerOptions o = f.options();
  // As `gradbox train` starts gradbox-sync when sharded.
  o.on_demand_prefixes = {std::string(kContributionPrefix), std::string(kCheckpointPartPrefix)};
  f.start(o);
  const std::string contribution = str(kContributionPrefix, "a-s0.gbx");
  const std::string part0 = str(kCheckpointPartPrefix, "0.gbx"), part1 = str(kCheckpointPartPrefix, "1.gbx");
  write_bytes(f.shared / "r1" / contribution, framed_file(5));
  write_bytes(f.shared / "r1" / "c-s0.gbx", framed_file(6));
  write_bytes(f.shared / "ckpt" / part0, framed_file(7));
  write_bytes(f.shared / "ckpt" / part1, framed_file(8));
  write_bytes(f.shared / "ckpt" / "manifest.gbx", framed_file(9));
  f.syncer->run_pass();
  EXPECT_EQ(files_under(f.local / kInboxDir), (std::vector<std::string>{"ckpt/manifest.gbx", flag_of("ckpt/manifest.gbx"),
                                                                      "r1/c-s0.gbx", flag_of("r1/c-s0.gbx")}));
  write_bytes(f.local / kRequestsDir / "r1" / contribution, "");
  write_bytes(f.local / kRequestsDir / "ckpt" / part1, "");
  f.syncer->run_pass();
  EXPECT_TRUE(fs::exists(f.local / kInboxDir / "r1" / flag_of(contribution)));
  EXPECT_TRUE(fs::exists(f.local / kInboxDir / "ckpt" / flag_of(part1)));
  EXPECT_FALSE(fs::exists(f.local / kInboxDir / "ckpt" / part0));  // not asked for
  EXPECT_EQ(f.stats()["flagged"], 4);
}

// Names end in unpredictable tokens (Note [Unpredictable names]): a request may name the prefix
// of the files it wants in a folder, and only those in that folder come.
TEST(Syncer, ARequestForANamePrefixFetchesTheFilesItStarts) {
  Fixture f("on_demand_prefix");
  SyncerOptions o = f.options();
  o.on_demand_prefixes = {std::string(kContributionPrefix)};
  f.start(o);
  const std::string mine = str(kContributionPrefix, "a-s0-0123456789abcdef.gbx");
  const std::string other_shard = str(kContributionPrefix, "a-s1-0123456789abcdef.gbx");
  write_bytes(f.shared / "r1" / mine, framed_file(5));
  write_bytes(f.shared / "r1" / other_shard, framed_file(6));
  write_bytes(f.shared / "r2" / mine, framed_file(7));
  write_bytes(f.local / kRequestsDir / "r1" / str(kContributionPrefix, "a-s0-"), "");
  f.syncer->run_pass();
  EXPECT_TRUE(fs::exists(f.local / kInboxDir / "r1" / flag_of(mine)));
  EXPECT_FALSE(fs::exists(f.local / kInboxDir / "r1" / other_shard));  // another shard: not asked for
  EXPECT_FALSE(fs::exists(f.local / kInboxDir / "r2" / mine));         // another folder: not asked for
}

TEST(Syncer, ControlFileIsMirroredWhenItAppearsOrChanges) {
  Fixture f("control");  // control_refresh_s 5, on the fixture's clock
  const fs::path mirrored = f.local / kInboxDir / kControlFile;
  write_bytes(f.shared / kControlFile, R"({"lr_multiplier": 0.5})");
  f.syncer->run_pass();
  EXPECT_EQ(read_file(mirrored), R"({"lr_multiplier": 0.5})");
  EXPECT_EQ(files_under(f.local / kInboxDir), std::vector<std::string>{std::string(kControlFile)});  // no .flag, no temp
  EXPECT_EQ(f.stats()["control_updates"], 1);
  // A new size is fetched at the next pass.
  write_bytes(f.shared / kControlFile, R"({"lr_multiplier": 0.25})");
  f.syncer->run_pass();
  EXPECT_EQ(read_file(mirrored), R"({"lr_multiplier": 0.25})");
  // The same size: only once control_refresh_s has passed.
  write_bytes(f.shared / kControlFile, R"({"lr_multiplier": 0.75})");
  f.syncer->run_pass();
  EXPECT_EQ(read_file(mirrored), R"({"lr_multiplier": 0.25})");
  f.now += std::chrono::seconds(6);
  f.syncer->run_pass();
  EXPECT_EQ(read_file(mirrored), R"({"lr_multiplier": 0.75})");
  EXPECT_EQ(f.stats()["control_updates"], 3);
  // Refreshed with the same bytes: no update.
  f.now += std::chrono::seconds(6);
  f.syncer->run_pass();
  EXPECT_EQ(f.stats()["control_updates"], 3);
  // Gone from the shared folder: the last copy stays.
  fs::remove(f.shared / kControlFile);
  f.syncer->run_pass();
  EXPECT_EQ(read_file(mirrored), R"({"lr_multiplier": 0.75})");
  EXPECT_EQ(f.stats()["control_rejected"], 0);
}

TEST(Syncer, EditInPlaceOfTheSameSizeIsMirroredWithRefreshZero) {
  Fixture f("control_refresh");
  SyncerOptions o = f.options();
  o.control_refresh_s = 0;  // every pass fetches it
  f.start(o);
  write_bytes(f.shared / kControlFile, R"({"micro_batch": 8})");
  f.syncer->run_pass();
  write_bytes(f.shared / kControlFile, R"({"micro_batch": 4})");
  f.syncer->run_pass();
  EXPECT_EQ(read_file(f.local / kInboxDir / kControlFile), R"({"micro_batch": 4})");
  EXPECT_EQ(f.stats()["control_updates"], 2);
}

TEST(Syncer, BrokenControlFileKeepsTheOldCopyAndIsCountedOnce) {
  Fixture f("control_broken");
  SyncerOptions o = f.options();
  o.control_refresh_s = 0;
  f.start(o);
  const fs::path mirrored = f.local / kInboxDir / kControlFile;
  write_bytes(f.shared / kControlFile, R"({"dropout": 0.1})");
  f.syncer->run_pass();
  write_bytes(f.shared / kControlFile, R"({"dropout": 0.2)");  // a half-saved edit
  for (int i = 0; i < 3; ++i) f.syncer->run_pass();
  EXPECT_EQ(read_file(mirrored), R"({"dropout": 0.1})");
  EXPECT_EQ(f.stats()["control_rejected"], 1);  // one warning per distinct content
  write_bytes(f.shared / kControlFile, "[0.2]");  // JSON, but not an object
  f.syncer->run_pass();
  EXPECT_EQ(read_file(mirrored), R"({"dropout": 0.1})");
  EXPECT_EQ(f.stats()["control_rejected"], 2);
  EXPECT_EQ(files_under(f.local / kInboxDir), std::vector<std::string>{std::string(kControlFile)});
  write_bytes(f.shared / kControlFile, R"({"dropout": 0.2})");  // fixed
  f.syncer->run_pass();
  EXPECT_EQ(read_file(mirrored), R"({"dropout": 0.2})");
  EXPECT_EQ(f.stats()["control_updates"], 2);
}

TEST(Syncer, ControlFileIsNeverFlaggedQuarantinedUploadedOrDeleted) {
  Fixture f("control_never", /*max_attempts=*/2, /*quarantine_after_s=*/5);
  write_bytes(f.shared / kControlFile, "not json");  // not a framed file either
  for (int i = 0; i < 4; ++i) {
    f.syncer->run_pass();
    f.now += std::chrono::seconds(6);
  }
  EXPECT_EQ(files_under(f.local / kQuarantineDir), std::vector<std::string>{});
  EXPECT_EQ(files_under(f.local / kInboxDir), std::vector<std::string>{});
  EXPECT_EQ(f.stats()["quarantined"], 0);
  EXPECT_EQ(f.stats()["control_rejected"], 1);
  // A control.json in the outbox (the worker never writes one) is not published, and a stray
  // .sent marker does not delete the operator's file.
  fs::remove(f.shared / kControlFile);
  write_bytes(f.local / kOutboxDir / kControlFile, R"({"micro_batch": 64})");
  f.syncer->run_pass();
  EXPECT_FALSE(fs::exists(f.shared / kControlFile));
  fs::remove(f.local / kOutboxDir / kControlFile);
  write_bytes(f.shared / kControlFile, R"({"micro_batch": 2})");
  write_bytes(f.local / kOutboxDir / sent_of(std::string(kControlFile)), "");
  f.syncer->run_pass();
  EXPECT_EQ(read_file(f.shared / kControlFile), R"({"micro_batch": 2})");
  EXPECT_EQ(read_file(f.local / kInboxDir / kControlFile), R"({"micro_batch": 2})");
  auto s = f.stats();
  EXPECT_EQ(s["uploaded"], 0);
  EXPECT_EQ(s["deleted"], 0);
  EXPECT_EQ(s["flagged"], 0);
}

TEST(Syncer, PassesCountListingsOfTheSharedFolder) {
  Fixture f("passes");
  f.syncer->final_pass();  // lists nothing
  EXPECT_EQ(f.stats()["passes"], 0);
  f.syncer->run_pass();
  EXPECT_EQ(f.stats()["passes"], 1);  // written by the pass that listed
  f.syncer->run_pass();
  EXPECT_EQ(f.stats()["passes"], 2);
  fs::rename(f.shared, f.root / "away");  // the listing fails: not a pass
  f.syncer->run_pass();
  EXPECT_EQ(f.stats()["passes"], 2);
  EXPECT_EQ(f.stats()["transfer_errors"], 1);
  fs::rename(f.root / "away", f.shared);
  f.syncer->run_pass();
  EXPECT_EQ(f.stats()["passes"], 3);
}

// A pass is settled once every download it planned (and every earlier pass's) was tried: a
// joining worker waits for that before it decides whether the run exists.
TEST(Syncer, APassSettlesWhenItsDownloadsAndEarlierOnesAreDone) {
  Fixture f("settled");
  write_bytes(f.shared / "a.bin", framed_file(1, 100));
  std::vector<Task> first = f.syncer->plan_downloads();
  ASSERT_EQ(first.size(), 1u);
  write_bytes(f.shared / "b.bin", framed_file(2, 100));
  std::vector<Task> second = f.syncer->plan_downloads();  // a.bin is in flight: only b.bin
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(f.syncer->stats().passes, 2u);
  EXPECT_EQ(f.syncer->stats().settled_passes, 0u);
  f.syncer->execute(second[0]);
  EXPECT_EQ(f.syncer->stats().settled_passes, 0u);  // pass 1 still has a.bin outstanding
  f.syncer->execute(first[0]);
  EXPECT_EQ(f.syncer->stats().settled_passes, 2u);
  EXPECT_TRUE(f.syncer->plan_downloads().empty());
  EXPECT_EQ(f.syncer->stats().settled_passes, 3u);  // nothing to download: settled at once
}

TEST(Syncer, HalfWrittenFileIsNeverFlaggedUntilFinished) {
  Fixture f("half");
  std::string bytes = framed_file(2, 1000);
  write_bytes(f.shared / "a.bin", bytes.substr(0, 500));
  for (int i = 0; i < 3; ++i) f.syncer->run_pass();
  EXPECT_EQ(files_under(f.local / kInboxDir), std::vector<std::string>{});
  EXPECT_EQ(f.stats()["incomplete_seen"], 3);
  EXPECT_EQ(f.stats()["flagged"], 0);
  write_bytes(f.shared / "a.bin", bytes);
  f.syncer->run_pass();
  EXPECT_EQ(read_file(f.local / kInboxDir / "a.bin"), bytes);
  EXPECT_TRUE(fs::exists(f.local / kInboxDir / flag_of("a.bin")));
  EXPECT_EQ(f.stats()["retries"], 3);
}

TEST(Syncer, AFileStillArrivingIsJudgedByItsHeaderNotCopied) {
  Fixture f("header-first");
  const std::string bytes = framed_file(4, 100000);
  const size_t head = wire::head_size(bytes);
  ASSERT_GT(head, wire::kPreambleSize);
  // Cut inside the preamble, inside the header, then inside the payload: never copied whole.
  // What is read: the preamble (or what there is of it), then preamble and header once the
  // file is long enough to hold them.
  const size_t cuts[] = {10, head - 1, 60000};
  uint64_t read = 0;
  for (size_t cut : cuts) {
    write_bytes(f.shared / "a.bin", bytes.substr(0, cut));
    f.syncer->run_pass();
    read += std::min(cut, wire::kPreambleSize) + (cut >= head ? head : 0);
    EXPECT_EQ(f.stats()["bytes_downloaded"], read) << "cut at " << cut;
  }
  EXPECT_EQ(f.stats()["incomplete_seen"], 3);
  EXPECT_EQ(files_under(f.local / kInboxDir), std::vector<std::string>{});
  write_bytes(f.shared / "a.bin", bytes);
  f.syncer->run_pass();
  EXPECT_EQ(read_file(f.local / kInboxDir / "a.bin"), bytes);
  EXPECT_EQ(f.stats()["bytes_downloaded"], read + wire::kPreambleSize + head + bytes.size());
  EXPECT_EQ(f.stats()["flagged"], 1);
}

TEST(Syncer, AFileLongerThanItsHeaderSaysIsStillCopiedAndJudgedCorrupt) {
  Fixture f("header-first-long", 1);
  const std::string bytes = framed_file(5, 1000);
  write_bytes(f.shared / "a.bin", bytes + "x");
  f.syncer->run_pass();
  EXPECT_EQ(read_file(f.local / kQuarantineDir / "a.bin"), bytes + "x");
  EXPECT_EQ(f.stats()["corrupt_seen"], 1);
}

TEST(Syncer, PlaceholderIsCountedNotDownloaded) {
  Fixture f("placeholder", 3, 10);
  write_bytes(f.shared / "p.bin", "");
  f.syncer->run_pass();
  f.syncer->run_pass();
  EXPECT_EQ(f.stats()["placeholders_seen"], 1);
  EXPECT_EQ(f.stats()["bytes_downloaded"], 0);
  EXPECT_EQ(files_under(f.local / kInboxDir), std::vector<std::string>{});
  // Stuck past --quarantine-after-s: quarantined, never flagged.
  f.now += std::chrono::seconds(11);
  f.syncer->run_pass();
  EXPECT_TRUE(fs::exists(f.local / kQuarantineDir / "p.bin"));
  EXPECT_EQ(f.stats()["quarantined"], 1);
}

TEST(Syncer, IncompletePastDeadlineIsQuarantined) {
  Fixture f("stuck", 3, 5);
  std::string bytes = framed_file(3, 1000);
  write_bytes(f.shared / "a.bin", bytes.substr(0, 100));
  f.syncer->run_pass();
  f.now += std::chrono::seconds(6);
  f.syncer->run_pass();
  EXPECT_EQ(read_file(f.local / kQuarantineDir / "a.bin"), bytes.substr(0, 100));
  write_bytes(f.shared / "a.bin", bytes);
  f.syncer->run_pass();
  EXPECT_FALSE(fs::exists(f.local / kInboxDir / flag_of("a.bin")));
}

TEST(Syncer, CorruptIsRetriedThenQuarantined) {
  Fixture f("corrupt", 3);
  std::string bytes = framed_file(4);
  bytes[bytes.size() - 7] ^= 0x10;  // a payload byte
  write_bytes(f.shared / "c.bin", bytes);
  for (int i = 0; i < 5; ++i) f.syncer->run_pass();
  auto s = f.stats();
  EXPECT_EQ(s["corrupt_seen"], 3);
  EXPECT_EQ(s["retries"], 2);
  EXPECT_EQ(s["quarantined"], 1);
  ASSERT_EQ(s["quarantined_files"].size(), 1u);
  EXPECT_EQ(s["quarantined_files"][0]["path"], "c.bin");
  EXPECT_NE(s["quarantined_files"][0]["reason"].get<std::string>().find("payload checksum"), std::string::npos);
  EXPECT_EQ(read_file(f.local / kQuarantineDir / "c.bin"), bytes);
  EXPECT_EQ(files_under(f.local / kInboxDir), std::vector<std::string>{});
}

TEST(Syncer, CorruptThatHealsIsFlagged) {
  Fixture f("heal", 3);
  std::string good = framed_file(5), bad = good;
  bad[bad.size() - 3] ^= 0x01;
  write_bytes(f.shared / "c.bin", bad);
  f.syncer->run_pass();
  f.syncer->run_pass();
  write_bytes(f.shared / "c.bin", good);  // stale content after an overwrite heals
  f.syncer->run_pass();
  EXPECT_EQ(read_file(f.local / kInboxDir / "c.bin"), good);
  EXPECT_TRUE(fs::exists(f.local / kInboxDir / flag_of("c.bin")));
  EXPECT_EQ(f.stats()["quarantined"], 0);
}

TEST(Syncer, UnsupportedVersionsAreQuarantinedAfterRetries) {
  Fixture f("unsupported", 3);
  std::string frame_v2 = framed_file(6);
  frame_v2[8] = 2;  // frame version 2
  write_bytes(f.shared / "v2.bin", frame_v2);
  wire::FileHeader header;
  header.set_run_id("t");
  header.mutable_heartbeat()->set_worker("x");
  std::string wire99 = wire::frame(header, "payload");
  // Re-frame by hand with version 99 in the header (frame() always writes kWireVersion).
  {
    wire::FileHeader h;
    ASSERT_TRUE(h.ParseFromString(wire99.substr(wire::kPreambleSize, *reinterpret_cast<const uint32_t*>(&wire99[12]))));
    h.set_version(99);
    std::string hb;
    h.SerializeToString(&hb);
    uint32_t len = static_cast<uint32_t>(hb.size());
    uint64_t sum = checksum64(hb.data(), hb.size());
    wire99 = wire99.substr(0, 12) + std::string(reinterpret_cast<const char*>(&len), 4) +
             std::string(reinterpret_cast<const char*>(&sum), 8) + hb + "payload";
  }
  ASSERT_EQ(wire::verify_bytes(wire99).state, wire::FileState::unsupported);
  write_bytes(f.shared / "w99.bin", wire99);
  // Retried like corrupt files (a damaged version byte heals on the next copy), then quarantined.
  f.syncer->run_pass();
  f.syncer->run_pass();
  EXPECT_EQ(f.stats()["quarantined"], 0);
  EXPECT_EQ(f.stats()["unsupported_seen"], 4);
  f.syncer->run_pass();
  auto s = f.stats();
  EXPECT_EQ(s["quarantined"], 2);
  EXPECT_EQ(s["corrupt_seen"], 0);
  EXPECT_TRUE(fs::exists(f.local / kQuarantineDir / "v2.bin"));
  EXPECT_TRUE(fs::exists(f.local / kQuarantineDir / "w99.bin"));
  f.syncer->run_pass();
  EXPECT_EQ(f.stats()["bytes_downloaded"], s["bytes_downloaded"]);  // never retried
}

TEST(Syncer, OutboxUploadOnceNoOverwriteDeleteAndOwnFilesStayLocal) {
  Fixture f("outbox");
  std::string mine = framed_file(7), other = framed_file(8, 100);
  write_bytes(f.local / kOutboxDir / "round_1" / "g.me", mine);
  const std::string worker_temp = str("x", kTempMarker, ".123");
  write_bytes(f.local / kOutboxDir / "round_1" / worker_temp, "junk");  // worker's temp: ignored
  write_bytes(f.local / kOutboxDir / "taken.bin", mine);
  write_bytes(f.shared / "taken.bin", other);  // someone else's bytes under our name
  f.syncer->run_pass();
  EXPECT_EQ(read_file(f.shared / "round_1" / "g.me"), mine);
  EXPECT_TRUE(fs::exists(f.local / kOutboxDir / "round_1" / sent_of("g.me")));
  EXPECT_FALSE(fs::exists(f.shared / "round_1" / worker_temp));
  EXPECT_EQ(read_file(f.shared / "taken.bin"), other);  // never overwritten
  EXPECT_FALSE(fs::exists(f.local / kOutboxDir / sent_of("taken.bin")));
  EXPECT_EQ(files_under(f.local / kInboxDir), std::vector<std::string>{});  // own files not downloaded
  auto s = f.stats();
  EXPECT_EQ(s["uploaded"], 1);
  EXPECT_EQ(s["upload_conflicts"], 1);
  // A second pass uploads nothing again.
  f.syncer->run_pass();
  EXPECT_EQ(f.stats()["uploaded"], 1);
  // The worker collects its file: the shared copy, the marker and the empty folder go.
  fs::remove(f.local / kOutboxDir / "round_1" / "g.me");
  f.syncer->run_pass();
  EXPECT_FALSE(fs::exists(f.shared / "round_1"));
  EXPECT_FALSE(fs::exists(f.local / kOutboxDir / "round_1" / sent_of("g.me")));
  EXPECT_EQ(f.stats()["deleted"], 1);
}

// Note [Upload order]: a folder checkpoint's parts were posted before a round's files (the
// outbox's order) and held them for as long as the whole checkpoint took to upload. The
// daemon's plan puts every other file first and keeps one part in flight at a time.
TEST(Syncer, CheckpointPartsGoAfterRoundFilesAndOneAtATime) {
  Fixture f("upload_order");
  const std::string part = framed_file(1);
  for (int i = 0; i < 3; ++i)
    write_bytes(f.local / kOutboxDir / "checkpoints" / "s00000004-e0-me" / str("part-000", i, ".gbx"), part);
  write_bytes(f.local / kOutboxDir / "rounds" / "r00000007" / "g-s0-me.gbx", framed_file(2));
  write_bytes(f.local / kOutboxDir / "members" / "me" / "hb-1.gbx", framed_file(3));
  std::vector<Task> first = f.syncer->plan_uploads();
  std::vector<std::string> rels;
  for (const Task& t : first) rels.push_back(t.rel);
  ASSERT_EQ(rels.size(), 3u);
  EXPECT_EQ(std::set<std::string>(rels.begin(), rels.begin() + 2),
            (std::set<std::string>{"members/me/hb-1.gbx", "rounds/r00000007/g-s0-me.gbx"}));
  EXPECT_EQ(rels[2], "checkpoints/s00000004-e0-me/part-0000.gbx");  // last, and only one
  // A round file published while a part is in flight is planned at once; no second part is.
  write_bytes(f.local / kOutboxDir / "rounds" / "r00000008" / "g-s0-me.gbx", framed_file(4));
  std::vector<Task> second = f.syncer->plan_uploads();
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(second[0].rel, "rounds/r00000008/g-s0-me.gbx");
  for (const Task& t : first) f.syncer->execute(t);
  for (const Task& t : second) f.syncer->execute(t);
  // The part landed: the next one goes.
  std::vector<Task> third = f.syncer->plan_uploads();
  ASSERT_EQ(third.size(), 1u);
  EXPECT_EQ(third[0].rel, "checkpoints/s00000004-e0-me/part-0001.gbx");
  f.syncer->execute(third[0]);
  // A synchronous pass (gradbox-sync --once, the final pass) still sends every part.
  f.syncer->run_pass();
  EXPECT_EQ(read_file(f.shared / "checkpoints" / "s00000004-e0-me" / "part-0002.gbx"), part);
  EXPECT_EQ(f.stats()["uploaded"], 6);
}

TEST(Syncer, SameSizeSharedFileCountsAsUploadedAndPartialOwnUploadIsCompleted) {
  Fixture f("restart");
  std::string a = framed_file(9), b = framed_file(10, 2000);
  write_bytes(f.local / kOutboxDir / "a", a);
  write_bytes(f.shared / "a", a);  // uploaded before a restart, marker lost
  write_bytes(f.local / kOutboxDir / "b", b);
  write_bytes(f.shared / "b", b.substr(0, 700));  // killed mid-upload
  f.syncer->run_pass();
  EXPECT_TRUE(fs::exists(f.local / kOutboxDir / sent_of("a")));
  EXPECT_TRUE(fs::exists(f.local / kOutboxDir / sent_of("b")));
  EXPECT_EQ(read_file(f.shared / "b"), b);
  EXPECT_EQ(f.stats()["uploaded"], 1);
}

TEST(Syncer, FlagFromEarlierRunIsRespectedAndHiddenAndTempNamesSkipped) {
  Fixture f("skip");
  write_bytes(f.shared / "a", framed_file(11));
  write_bytes(f.shared / ".hidden", framed_file(12));
  write_bytes(f.shared / str("b", kTempMarker, ".5"), framed_file(13));
  write_bytes(f.local / kInboxDir / flag_of("a"), "");
  f.syncer->run_pass();
  EXPECT_EQ(files_under(f.local / kInboxDir), std::vector<std::string>{flag_of("a")});
}

}  // namespace
}  // namespace gradbox::syncer

namespace gradbox::syncer {
namespace {

using namespace testing;

// Faults a hostile or careless writer of the shared folder caused (issue "A shared folder is
// hostile territory"), each reproduced: a link to a file of the syncer's machine was copied into
// its quarantine; a header declaring an absurd size was re-checked without end; directories
// where files belong said nothing; a control file of any size was mirrored.

TEST(SyncerFaults, ALinkIsNeverFollowedAndIsLoggedOnce) {
  Fixture f("links");
  const fs::path outside = f.root / "outside-secret.txt";
  write_bytes(outside, "a file of the syncer's own machine");
  const std::string genuine = framed_file(2);
  write_bytes(f.root / "outside.gbx", genuine);  // even a valid gradbox file is not read through a link
  fs::create_directories(f.shared / "rounds" / "r00000001");
  fs::create_symlink(outside, f.shared / "rounds" / "r00000001" / "g-a-s0-x.gbx");
  fs::create_symlink(f.root / "outside.gbx", f.shared / "rounds" / "r00000001" / "g-b-s0-x.gbx");
  fs::create_directory_symlink(f.root, f.shared / "rounds" / "r00000002");  // a linked folder: not entered
  fs::create_symlink(outside, f.shared / kControlFile);
  for (int i = 0; i < 3; ++i) f.syncer->run_pass();
  const nlohmann::json s = f.stats();
  EXPECT_EQ(s["flagged"], 0);
  EXPECT_EQ(s["bytes_downloaded"], 0);
  EXPECT_EQ(s["quarantined"], 4);  // three links where files belong and the linked folder
  for (const auto& q : s["quarantined_files"])
    EXPECT_NE(q["reason"].get<std::string>().find("symbolic link"), std::string::npos) << q.dump();
  EXPECT_FALSE(fs::exists(f.local / kInboxDir / kControlFile));
  // Nothing of the linked files' bytes was copied anywhere under the local folder.
  for (const auto& file : fs::recursive_directory_iterator(f.local))
    if (file.is_regular_file()) {
      EXPECT_EQ(read_file(file.path()).find("syncer's own machine"), std::string::npos) << file.path();
    }
  EXPECT_EQ(read_file(f.local / kQuarantineDir / "rounds" / "r00000001" / "g-b-s0-x.gbx"), "");
}

TEST(SyncerFaults, DirectoriesAndSpecialFilesWhereFilesBelongAreLoggedOnce) {
  Fixture f("not_files");
  fs::create_directories(f.shared / "rounds" / "r00000001" / "g-a-s0-x.gbx");      // empty
  fs::create_directories(f.shared / "rounds" / "r00000001" / "c-s0-e0-a-x.gbx" / "inside");
  write_bytes(f.shared / "rounds" / "r00000001" / "c-s0-e0-a-x.gbx" / "inside" / "f.gbx", framed_file(3));
  fs::create_directories(f.shared / kControlFile);
  ASSERT_EQ(::mkfifo((f.shared / "rounds" / "r00000001" / "h.gbx").c_str(), 0600), 0);
  for (int i = 0; i < 3; ++i) f.syncer->run_pass();
  const nlohmann::json s = f.stats();
  EXPECT_EQ(s["quarantined"], 4) << s.dump();
  EXPECT_EQ(s["flagged"], 0);  // nothing inside a directory named like a file is read
  std::set<std::string> reasons;
  for (const auto& q : s["quarantined_files"]) reasons.insert(q["reason"].get<std::string>().substr(0, 12));
  EXPECT_EQ(reasons, (std::set<std::string>{"a directory ", "a special fi"}));
  // The layout's own folders are not entries: a real file in one is flagged as always.
  write_bytes(f.shared / "rounds" / "r00000001" / "g-b-s0-y.gbx", framed_file(4));
  f.syncer->run_pass();
  EXPECT_EQ(f.stats()["flagged"], 1);
  EXPECT_EQ(f.stats()["quarantined"], 4);
}

TEST(SyncerFaults, AnAbsurdDeclaredSizeIsRejectedOnceNotRecheckedForever) {
  Fixture f("absurd", /*max_attempts=*/3, /*quarantine_after_s=*/1e9);
  wire::FileHeader header;
  header.set_run_id("t");
  header.mutable_heartbeat()->set_worker("x");
  const std::string payload(100000, 'p');
  std::string bytes = wire::frame(header, payload);
  {  // the same header declaring 2^60 bytes, its checksum made right
    wire::FileHeader h;
    ASSERT_TRUE(h.ParseFromString(bytes.substr(wire::kPreambleSize, *reinterpret_cast<const uint32_t*>(&bytes[12]))));
    h.set_payload_length(uint64_t{1} << 60);
    std::string hb;
    h.SerializeToString(&hb);
    const uint32_t len = static_cast<uint32_t>(hb.size());
    const uint64_t sum = checksum64(hb.data(), hb.size());
    bytes = bytes.substr(0, 12) + std::string(reinterpret_cast<const char*>(&len), 4) +
            std::string(reinterpret_cast<const char*>(&sum), 8) + hb + payload;
  }
  const wire::Verification v = wire::verify_head(bytes, bytes.size());
  EXPECT_EQ(v.state, wire::FileState::corrupt);
  EXPECT_TRUE(v.hopeless);
  write_bytes(f.shared / "rounds" / "r00000001" / "g-a-s0-x.gbx", bytes);
  f.syncer->run_pass();
  nlohmann::json s = f.stats();
  EXPECT_EQ(s["quarantined"], 1);
  EXPECT_NE(s["quarantined_files"][0]["reason"].get<std::string>().find("declares a payload of"), std::string::npos);
  const uint64_t looked = s["bytes_downloaded"].get<uint64_t>();
  EXPECT_LT(looked, 1000u);  // its head, never a whole copy
  for (int i = 0; i < 5; ++i) f.syncer->run_pass();
  s = f.stats();
  EXPECT_EQ(s["bytes_downloaded"].get<uint64_t>(), looked);  // never looked at again
  EXPECT_EQ(s["incomplete_seen"], 0);
}

TEST(SyncerFaults, AnOversizedControlFileIsNeverCopied) {
  Fixture f("control_big");
  SyncerOptions o = f.options();
  o.control_refresh_s = 0;
  f.start(o);
  const fs::path mirrored = f.local / kInboxDir / kControlFile;
  write_bytes(f.shared / kControlFile, R"({"dropout": 0.1})");
  f.syncer->run_pass();
  ASSERT_EQ(read_file(mirrored), R"({"dropout": 0.1})");
  const uint64_t before = f.stats()["bytes_downloaded"].get<uint64_t>();
  // Valid JSON, and 100 MB of it.
  write_bytes(f.shared / kControlFile, R"({"dropout": 0.2, "pad": ")" + std::string(100 << 20, 'x') + "\"}");
  for (int i = 0; i < 3; ++i) f.syncer->run_pass();
  EXPECT_EQ(read_file(mirrored), R"({"dropout": 0.1})");
  EXPECT_EQ(f.stats()["control_rejected"], 1);  // one warning for the size
  EXPECT_LT(f.stats()["bytes_downloaded"].get<uint64_t>() - before, mirror::kMaxControlBytes);
}

// Note [A full disk]: /dev/full refuses every write with ENOSPC, as a full disk does.
TEST(SyncerFaults, ACopyOntoAFullDiskIsADiskFullErrorNamingTheFile) {
  const fs::path from = fresh_dir("disk_full_copy") / "a.gbx";
  write_bytes(from, framed_file(1));
  try {
    copy_file_bytes(from, "/dev/full");
    FAIL() << "a copy onto /dev/full went through";
  } catch (const DiskFullError& e) {
    EXPECT_EQ(e.path(), "/dev/full");
    EXPECT_NE(std::string(e.what()).find("/dev/full: cannot write: the disk is full"), std::string::npos) << e.what();
  }
}

TEST(SyncerFaults, OnlyAFullDiskUnderTheLocalFolderStopsTheSyncer) {
  Fixture f("disk_full_where");
  auto full = [](const fs::path& path) { return DiskFullError(path.string(), path.string() + ": the disk is full"); };
  EXPECT_FALSE(f.syncer->note_if_disk_full(BackendError("rclone copyto exited 1: timeout")));
  // The shared folder out of space (a full Drive), or a folder beside the local one: not ours.
  EXPECT_TRUE(f.syncer->note_if_disk_full(full(f.shared / "r1" / "a.gbx")));
  EXPECT_TRUE(f.syncer->note_if_disk_full(full(f.root / "local2" / "x")));
  EXPECT_FALSE(f.syncer->local_disk_full());
  // Ours, as std::filesystem reports it; the first one is kept.
  const fs::path dir = f.local / kInboxDir / "r2";
  EXPECT_TRUE(f.syncer->note_if_disk_full(
      fs::filesystem_error("cannot create directories", dir, std::make_error_code(std::errc::no_space_on_device))));
  EXPECT_TRUE(f.syncer->note_if_disk_full(full(f.local / kSyncerStatsFile)));
  ASSERT_TRUE(f.syncer->local_disk_full());
  EXPECT_NE(f.syncer->local_disk_full()->find(dir.string()), std::string::npos) << *f.syncer->local_disk_full();
}

}  // namespace
}  // namespace gradbox::syncer

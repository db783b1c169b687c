// The shared folder vanishing mid-run, as an unmounted Drive does: the mounted backend never
// recreates it, the engine counts each failed call, logs one warning per outage, and its passes
// stand still until the folder lists again; then everything held back goes through. Driven one
// pass at a time on a fixed clock; the outage is a rename of the folder away and back.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/atomic_file.h"
#include "common/error.h"
#include "common/log.h"
#include "syncer/mounted_backend.h"
#include "syncer/syncer.h"
#include "test_util.h"
#include "wire/envelope.h"

namespace gradbox::syncer {
namespace {

using namespace testing;

struct Outage {
  fs::path root, shared, away, local;
  std::unique_ptr<Syncer> syncer;
  explicit Outage(const std::string& name) {
    root = fresh_dir(name);
    shared = root / "drive" / "run";
    away = root / "away";
    local = root / "local";
    fs::create_directories(shared);
    SyncerOptions o{local, "me"};
    o.now = [] { return std::chrono::steady_clock::time_point{}; };
    syncer = std::make_unique<Syncer>(std::make_unique<MountedBackend>(shared), o);
  }
  void unmount() { fs::rename(shared, away); }
  void remount() { fs::rename(away, shared); }
  nlohmann::json stats() const { return nlohmann::json::parse(read_file(local / kSyncerStatsFile)); }
  void publish(const std::string& rel, const std::string& bytes) const {
    fs::create_directories((local / kOutboxDir / rel).parent_path());
    write_file_atomic(local / kOutboxDir / rel, bytes);
  }
};

// How many lines of `file` contain `needle`.
int count_lines(const fs::path& file, const std::string& needle) {
  std::istringstream in(read_file(file));
  int n = 0;
  for (std::string line; std::getline(in, line);) n += line.find(needle) != std::string::npos;
  return n;
}

TEST(MountedBackend, NeverCreatesAMissingSharedFolder) {
  const fs::path root = fresh_dir("backend_gone"), shared = root / "run", local = root / "a.bin";
  write_bytes(local, framed_file(1));
  MountedBackend backend(shared);  // never created
  try {
    backend.list();
    FAIL() << "list() of a missing folder returned";
  } catch (const SharedFolderGone& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(shared.string()), std::string::npos) << what;
    EXPECT_NE(what.find("gone or unmounted"), std::string::npos) << what;
  }
  EXPECT_THROW(backend.upload(local, "a.bin", UploadMode::create_new), SharedFolderGone);
  EXPECT_THROW(backend.upload(local, "r1/deep/a.bin", UploadMode::create_new), SharedFolderGone);
  EXPECT_THROW(backend.upload(local, "r1/a.bin", UploadMode::complete_own_partial), SharedFolderGone);
  EXPECT_THROW(backend.stat("a.bin"), SharedFolderGone);  // not "absent"
  EXPECT_THROW(backend.remove("a.bin"), SharedFolderGone);  // not "already deleted"
  EXPECT_THROW(backend.download("a.bin", root / "copy"), SharedFolderGone);
  backend.remove_empty_dirs("r1");  // best effort: nothing to do, nothing made
  EXPECT_FALSE(fs::exists(shared));

  // A file where the folder should be is no folder either.
  write_bytes(shared, "not a folder");
  EXPECT_THROW(backend.list(), SharedFolderGone);
  EXPECT_THROW(backend.upload(local, "r1/a.bin", UploadMode::create_new), SharedFolderGone);
  fs::remove(shared);

  // Below an existing root, sub-folders are made as needed.
  fs::create_directory(shared);
  backend.upload(local, "r1/deep/a.bin", UploadMode::create_new);
  EXPECT_EQ(read_file(shared / "r1" / "deep" / "a.bin"), read_file(local));
  EXPECT_EQ(backend.stat("r1/deep/a.bin"), fs::file_size(local));
  EXPECT_EQ(backend.stat("r1/b.bin"), std::nullopt);
  EXPECT_NO_THROW(backend.remove("r1/b.bin"));  // already gone: not an error
  ASSERT_EQ(backend.list().size(), 1u);
}

TEST(SharedFolderOutage, NothingIsRecreatedCountersFreezeAndHeldBackWorkGoesThroughAfter) {
  Outage f("outage");
  const std::string a = framed_file(1), b = framed_file(2), peer = framed_file(3);
  f.publish("r1/a.me", a);
  f.syncer->run_pass();
  ASSERT_TRUE(fs::exists(f.shared / "r1" / "a.me"));
  auto s = f.stats();
  EXPECT_EQ(s["passes"], 1);
  EXPECT_EQ(s["settled_passes"], 1);
  EXPECT_EQ(s["transfer_errors"], 0);

  f.unmount();
  // During the outage: a new file is published and an uploaded one withdrawn.
  f.publish("r2/b.me", b);
  fs::remove(f.local / kOutboxDir / "r1" / "a.me");
  for (int i = 1; i <= 3; ++i) {
    f.syncer->run_pass();
    EXPECT_FALSE(fs::exists(f.shared)) << "pass " << i << " recreated the shared folder";
    s = f.stats();
    EXPECT_EQ(s["passes"], 1) << "pass " << i;
    EXPECT_EQ(s["settled_passes"], 1) << "pass " << i;
    // Each pass: the upload of b, the deletion of a and the listing fail.
    EXPECT_EQ(s["transfer_errors"], 3 * i) << "pass " << i;
  }
  EXPECT_EQ(s["uploaded"], 1);
  EXPECT_EQ(s["deleted"], 0);
  EXPECT_FALSE(fs::exists(f.local / kOutboxDir / "r2" / sent_of("b.me")));
  EXPECT_TRUE(fs::exists(f.local / kOutboxDir / "r1" / sent_of("a.me")));  // a is not deleted yet
  EXPECT_EQ(files_under(f.away), std::vector<std::string>{"r1/a.me"});  // untouched meanwhile

  // A peer's file lands while this worker cannot see the folder.
  write_bytes(f.away / "r2" / "c.peer", peer);
  f.remount();
  f.syncer->run_pass();
  s = f.stats();
  EXPECT_EQ(s["passes"], 2);
  EXPECT_EQ(s["settled_passes"], 2);
  EXPECT_EQ(s["transfer_errors"], 9);  // no new failures
  EXPECT_EQ(s["uploaded"], 2);
  EXPECT_EQ(s["deleted"], 1);
  EXPECT_EQ(s["flagged"], 1);
  EXPECT_EQ(read_file(f.shared / "r2" / "b.me"), b);
  EXPECT_TRUE(fs::exists(f.local / kOutboxDir / "r2" / sent_of("b.me")));
  EXPECT_FALSE(fs::exists(f.shared / "r1"));
  EXPECT_FALSE(fs::exists(f.local / kOutboxDir / "r1" / sent_of("a.me")));
  EXPECT_EQ(read_file(f.local / kInboxDir / "r2" / "c.peer"), peer);
  EXPECT_TRUE(fs::exists(f.local / kInboxDir / "r2" / flag_of("c.peer")));
  f.syncer->run_pass();
  EXPECT_EQ(f.stats()["settled_passes"], 3);  // and on it goes
}

// A download planned before the outage settles its pass once tried (it failed: still tried), but
// no new pass starts until the folder lists again; then the file is planned and flagged.
TEST(SharedFolderOutage, InFlightDownloadSettlesItsPassButNoNewPassStarts) {
  Outage f("outage_in_flight");
  const std::string bytes = framed_file(4);
  write_bytes(f.shared / "x.bin", bytes);
  std::vector<Task> first = f.syncer->plan_downloads();
  ASSERT_EQ(first.size(), 1u);
  f.unmount();
  EXPECT_TRUE(f.syncer->plan_downloads().empty());
  EXPECT_EQ(f.syncer->stats().passes, 1u);
  EXPECT_EQ(f.syncer->stats().settled_passes, 0u);
  f.syncer->execute(first[0]);
  EXPECT_EQ(f.syncer->stats().settled_passes, 1u);
  EXPECT_EQ(f.syncer->stats().transfer_errors, 2u);
  EXPECT_FALSE(fs::exists(f.local / kInboxDir / flag_of("x.bin")));
  EXPECT_TRUE(f.syncer->plan_downloads().empty());
  EXPECT_EQ(f.syncer->stats().passes, 1u);
  EXPECT_FALSE(fs::exists(f.shared));
  f.remount();
  std::vector<Task> again = f.syncer->plan_downloads();
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(f.syncer->stats().passes, 2u);
  EXPECT_EQ(f.syncer->stats().settled_passes, 1u);
  f.syncer->execute(again[0]);
  EXPECT_EQ(f.syncer->stats().settled_passes, 2u);
  EXPECT_EQ(read_file(f.local / kInboxDir / "x.bin"), bytes);
  EXPECT_EQ(f.syncer->stats().transfer_errors, 3u);
}

// One warning when an outage starts (whatever fails first), one line when it ends, nothing per
// poll in between; a second outage is reported again.
TEST(SharedFolderOutage, OneWarningPerOutage) {
  Outage f("outage_log");
  const fs::path log_file = f.root / "syncer.log";
  log::setup(log::Level::info, log_file);
  f.publish("a.me", framed_file(5));
  f.unmount();
  for (int i = 0; i < 5; ++i) f.syncer->run_pass();  // an upload and a listing fail each pass
  f.remount();
  f.syncer->run_pass();
  f.syncer->run_pass();
  f.unmount();
  f.syncer->run_pass();
  f.syncer->run_pass();
  f.remount();
  f.syncer->run_pass();
  log::setup(log::Level::info);  // closes (and flushes) the file
  EXPECT_EQ(f.syncer->stats().transfer_errors, 12u);
  EXPECT_EQ(count_lines(log_file, " W [syncer] "), 2) << read_file(log_file);
  EXPECT_EQ(count_lines(log_file, "gone or unmounted"), 2) << read_file(log_file);
  EXPECT_EQ(count_lines(log_file, "lists again after"), 2) << read_file(log_file);
}

// The mounted backend's transfers carry every byte: a new upload and a download (links here,
// on one file system), the tail of an interrupted upload (a copy: read/write, since the kernel's
// copy refuses an O_APPEND target).
TEST(MountedBackend, CopiesEveryByteWhetherCreatingCompletingOrDownloading) {
  const fs::path root = fresh_dir("mounted_copies");
  fs::create_directories(root / "shared" / "r1");
  MountedBackend backend(root / "shared");
  std::string bytes((3 << 20) + 17, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>((i * 2654435761u) >> 13);
  write_file_atomic(root / "whole.bin", bytes);
  backend.upload(root / "whole.bin", "r1/new.bin", UploadMode::create_new);
  EXPECT_EQ(read_file(root / "shared" / "r1" / "new.bin"), bytes);
  write_file_atomic(root / "shared" / "r1" / "partial.bin", bytes.substr(0, 1 << 20));
  backend.upload(root / "whole.bin", "r1/partial.bin", UploadMode::complete_own_partial);
  EXPECT_EQ(read_file(root / "shared" / "r1" / "partial.bin"), bytes);
  backend.download("r1/new.bin", root / "down.bin");
  EXPECT_EQ(read_file(root / "down.bin"), bytes);
}

struct ::stat stat_of(const fs::path& path) {
  struct ::stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return st;
}

// Note [Hard-linked transfers]: on one file system an upload and a download are links to the
// same bytes (no copy), an upload still never replaces a name, and a download that is edited in
// place afterwards (the link shares the edit) fails the verification every read goes through.
TEST(MountedBackend, OnOneFileSystemTransfersAreLinksThatStillNeverReplaceOrGoUnverified) {
  const fs::path root = fresh_dir("mounted_links");
  fs::create_directories(root / "shared");
  MountedBackend backend(root / "shared");
  const std::string bytes = framed_file(7, 100000);
  write_file_atomic(root / "outbox.bin", bytes);

  backend.upload(root / "outbox.bin", "r1/a.gbx", UploadMode::create_new);
  const fs::path shared = root / "shared" / "r1" / "a.gbx";
  EXPECT_EQ(stat_of(shared).st_ino, stat_of(root / "outbox.bin").st_ino);
  EXPECT_EQ(stat_of(shared).st_nlink, 2u);
  write_file_atomic(root / "other.bin", framed_file(8, 100));
  EXPECT_THROW(backend.upload(root / "other.bin", "r1/a.gbx", UploadMode::create_new), BackendError);
  EXPECT_EQ(read_file(shared), bytes);  // write-once: the name kept its bytes

  backend.download("r1/a.gbx", root / "inbox.bin");
  EXPECT_EQ(stat_of(root / "inbox.bin").st_ino, stat_of(shared).st_ino);
  EXPECT_EQ(wire::verify_file(root / "inbox.bin").state, wire::FileState::complete);
  {
    std::fstream edit(shared, std::ios::in | std::ios::out | std::ios::binary);  // in place, as a hostile writer
    edit.seekp(static_cast<std::streamoff>(bytes.size() - 5));
    edit.put(static_cast<char>(bytes[bytes.size() - 5] ^ 0x40));
  }
  EXPECT_EQ(wire::verify_file(root / "inbox.bin").state, wire::FileState::corrupt);
  EXPECT_THROW(wire::parse(read_file(root / "inbox.bin"), "inbox.bin"), wire::WireError);
}

// Across file systems (here /dev/shm, a tmpfs, against the test folder's disk) the same calls
// copy: the bytes arrive whole in files of their own.
TEST(MountedBackend, AcrossFileSystemsTransfersAreCopies) {
  const fs::path root = fresh_dir("mounted_across");
  const fs::path other = fs::path("/dev/shm") / root.filename();
  std::error_code ec;
  fs::create_directories(other / "shared", ec);
  if (ec || stat_of(other).st_dev == stat_of(root).st_dev)
    GTEST_SKIP() << "no second file system at /dev/shm on this machine";
  MountedBackend backend(other / "shared");
  const std::string bytes = framed_file(9, 300000);
  write_file_atomic(root / "outbox.bin", bytes);
  backend.upload(root / "outbox.bin", "r1/a.gbx", UploadMode::create_new);
  EXPECT_EQ(stat_of(other / "shared" / "r1" / "a.gbx").st_nlink, 1u);
  EXPECT_EQ(read_file(other / "shared" / "r1" / "a.gbx"), bytes);
  backend.download("r1/a.gbx", root / "inbox.bin");
  EXPECT_EQ(stat_of(root / "inbox.bin").st_nlink, 1u);
  EXPECT_EQ(read_file(root / "inbox.bin"), bytes);
  fs::remove_all(other, ec);
}

}  // namespace
}  // namespace gradbox::syncer

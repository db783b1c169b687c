// The rclone backend, running the real rclone program against a local remote defined by
// environment variables (RCLONE_CONFIG_GBTEST_TYPE=local).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <nlohmann/json.hpp>

#include "common/atomic_file.h"
#include "syncer/rclone_backend.h"
#include "syncer/subprocess.h"
#include "syncer/syncer.h"
#include "test_util.h"

namespace gradbox::syncer {
namespace {

using namespace testing;

bool have_rclone() {
  try {
    return run_subprocess({"rclone", "version"}, 30).exit_code == 0;
  } catch (const BackendError&) {
    return false;
  }
}

// Two syncers through one remote, every operation; `rclone` is the program they run.
void upload_download_delete_cycle(const std::string& rclone, const std::string& dir_name) {
  ::setenv("RCLONE_CONFIG_GBTEST_TYPE", "local", 1);
  fs::path root = fresh_dir(dir_name);
  fs::path shared = root / "shared";
  fs::create_directories(shared);
  std::string remote = "gbtest:" + shared.string();
  Syncer a(std::make_unique<RcloneBackend>(remote, rclone), SyncerOptions{root / "a", "a"});
  Syncer b(std::make_unique<RcloneBackend>(remote, rclone), SyncerOptions{root / "b", "b"});

  EXPECT_TRUE(b.backend().list().empty());
  std::string bytes = framed_file(21, 5000);
  write_bytes(root / "a" / kOutboxDir / "round_1" / "g.a", bytes);
  a.run_pass();
  EXPECT_EQ(read_file(shared / "round_1" / "g.a"), bytes);
  EXPECT_TRUE(fs::exists(root / "a" / kOutboxDir / "round_1" / sent_of("g.a")));
  EXPECT_EQ(a.backend().stat("round_1/g.a"), bytes.size());
  EXPECT_EQ(a.backend().stat("round_1/nope"), std::nullopt);
  EXPECT_THROW(a.backend().stat("round_1"), BackendError);  // a folder is not a file
  EXPECT_EQ(files_under(root / "a" / kInboxDir), std::vector<std::string>{});  // own file

  b.run_pass();
  EXPECT_EQ(read_file(root / "b" / kInboxDir / "round_1" / "g.a"), bytes);
  EXPECT_TRUE(fs::exists(root / "b" / kInboxDir / "round_1" / flag_of("g.a")));

  // Write-once through rclone too: a different file under a taken name is refused.
  write_bytes(root / "b" / kOutboxDir / "round_1" / "g.a", framed_file(22, 9000));
  b.run_pass();
  EXPECT_EQ(read_file(shared / "round_1" / "g.a"), bytes);
  EXPECT_EQ(b.stats().upload_conflicts, 1u);

  fs::remove(root / "a" / kOutboxDir / "round_1" / "g.a");
  a.run_pass();
  EXPECT_FALSE(fs::exists(shared / "round_1" / "g.a"));
  EXPECT_FALSE(fs::exists(shared / "round_1"));
  EXPECT_FALSE(fs::exists(root / "a" / kOutboxDir / "round_1" / sent_of("g.a")));
  EXPECT_EQ(a.stats().deleted, 1u);
  EXPECT_EQ(a.stats().transfer_errors, 0u);
}

TEST(RcloneBackend, UploadDownloadDeleteCycle) {
  if (!have_rclone()) GTEST_SKIP() << "rclone is not installed";
  upload_download_delete_cycle("rclone", "rclone");
}

// rclone before 1.55 (Debian 11's and Ubuntu 22.04's 1.53, what Kaggle's apt installs) has no
// `lsjson --stat`: every upload failed there. This rclone refuses the flag as 1.53 does.
TEST(RcloneBackend, UploadDownloadDeleteCycleWithAnRcloneWithoutLsjsonStat) {
  if (!have_rclone()) GTEST_SKIP() << "rclone is not installed";
  const fs::path old_rclone = fresh_dir("rclone_1_53_bin") / "rclone";
  write_bytes(old_rclone,
              "#!/bin/sh\n"
              "for a in \"$@\"; do [ \"$a\" = --stat ] && { echo 'Fatal error: unknown flag: --stat' >&2; exit 1; }; done\n"
              "exec rclone \"$@\"\n");
  fs::permissions(old_rclone, fs::perms::owner_all);
  upload_download_delete_cycle(old_rclone.string(), "rclone_1_53");
}

TEST(RcloneBackend, FailureNamesTheCommand) {
  if (!have_rclone()) GTEST_SKIP() << "rclone is not installed";
  RcloneBackend backend("nosuchremote_gb:/x");
  try {
    backend.list();
    FAIL() << "listing an undefined remote must fail";
  } catch (const BackendError& e) {
    EXPECT_NE(std::string(e.what()).find("rclone lsjson"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace gradbox::syncer

// The adaptive contribution deadline and the heartbeat reader of elastic membership.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>

#include "common/atomic_file.h"
#include "exchange/membership.h"
#include "wire/envelope.h"

namespace gradbox::exchange {
namespace {

namespace fs = std::filesystem;

TEST(LagDeadline, HoldsTheCeilingUntilEnoughLagsAreSeen) {
  LagDeadline d(/*floor=*/0.5, /*ceiling=*/30, /*k=*/4, /*min_samples=*/8);
  EXPECT_EQ(d.deadline(), 30);
  for (int i = 0; i < 7; ++i) d.observe(1.0);
  EXPECT_EQ(d.deadline(), 30);
  d.observe(1.0);
  EXPECT_EQ(d.deadline(), 1.0);  // no spread: the median itself
}

TEST(LagDeadline, IsTheMedianPlusKSpreadsWithinFloorAndCeiling) {
  LagDeadline d(0.5, 30, 4, 5);
  for (double lag : {1.0, 2.0, 3.0, 4.0, 100.0}) d.observe(lag);  // one straggler barely moves it
  // median 3, deviations {2,1,0,1,97} -> MAD 1 -> spread 1.4826
  EXPECT_NEAR(d.deadline(), 3 + 4 * 1.4826, 1e-9);
  LagDeadline fast(2.0, 30, 4, 5);
  for (int i = 0; i < 5; ++i) fast.observe(0.01);
  EXPECT_EQ(fast.deadline(), 2.0);  // a local folder: the floor
  LagDeadline slow(2.0, 30, 4, 5);
  for (double lag : {10.0, 20.0, 30.0, 40.0, 50.0}) slow.observe(lag);
  EXPECT_EQ(slow.deadline(), 30);  // Drive on a bad day: the ceiling
}

TEST(LagDeadline, ForgetsLagsOutsideItsWindow) {
  LagDeadline d(0.1, 100, 0, 3, /*window=*/3);
  for (double lag : {50.0, 50.0, 50.0}) d.observe(lag);
  EXPECT_EQ(d.deadline(), 50);
  for (double lag : {1.0, 1.0, 1.0}) d.observe(lag);
  EXPECT_EQ(d.deadline(), 1);
  EXPECT_EQ(d.samples(), 3u);
}

void write_heartbeat(const fs::path& inbox, const std::string& run, const std::string& worker, int64_t ms,
                     const std::string& state, uint64_t round, bool flagged = true) {
  wire::FileHeader header;
  header.set_run_id(run);
  header.set_created_unix_ms(ms);
  wire::Heartbeat* hb = header.mutable_heartbeat();
  hb->set_worker(worker);
  hb->set_sequence(static_cast<uint64_t>(ms));
  hb->set_state(state);
  hb->set_applied_round(round);
  char name[32];
  std::snprintf(name, sizeof name, "hb-%013lld.gbx", static_cast<long long>(ms));
  const fs::path path = inbox / "members" / worker / name;
  fs::create_directories(path.parent_path());
  write_file_atomic(path, wire::frame(header, {}));
  if (flagged) write_file_atomic(path.string() + ".flag", "");
}

TEST(PeerHeartbeats, NewestFlaggedBeatOfThisRunPerPeerAndOlderOnesDropped) {
  const fs::path inbox = fs::temp_directory_path() / ("gradbox_membership_" + std::to_string(::getpid()));
  fs::remove_all(inbox);
  const int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch()).count();
  write_heartbeat(inbox, "run", "a", now - 9000, "live", 5);
  write_heartbeat(inbox, "run", "a", now - 2000, "ready", 7);
  write_heartbeat(inbox, "run", "a", now - 100, "left", 8, /*flagged=*/false);  // still arriving
  write_heartbeat(inbox, "run", "b", now - 1000, "joining", 3);
  write_heartbeat(inbox, "other-run", "c", now - 1000, "live", 3);
  write_heartbeat(inbox, "run", "me", now, "live", 9);

  const std::map<std::string, PeerBeat> beats = read_peer_heartbeats(inbox, "run", "me");
  ASSERT_EQ(beats.size(), 2u);  // not "me", not another run's
  EXPECT_EQ(beats.at("a").state, "ready");
  EXPECT_EQ(beats.at("a").applied_round, 7u);
  EXPECT_NEAR(beats.at("a").age_s, 2.0, 1.0);
  EXPECT_EQ(beats.at("b").state, "joining");
  char older[32];
  std::snprintf(older, sizeof older, "hb-%013lld.gbx", static_cast<long long>(now - 9000));
  EXPECT_FALSE(fs::exists(inbox / "members" / "a" / older));  // an older mirror goes
  fs::remove_all(inbox);
}

}  // namespace
}  // namespace gradbox::exchange

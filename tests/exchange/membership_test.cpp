// The adaptive contribution deadline and the heartbeat reader of elastic membership.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>

#include "common/atomic_file.h"
#include "exchange/exchange_context.h"
#include "exchange/folder_names.h"
#include "exchange/membership.h"
#include "exchange/run_status.h"
#include "mirror/memory_mirror.h"
#include "mirror/virtual_clock.h"
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

std::string heartbeat(const std::string& run, const std::string& worker, int64_t written_ms, const std::string& state,
                      uint64_t round, uint64_t incarnation = 7) {
  wire::FileHeader header;
  header.set_run_id(run);
  header.set_created_unix_ms(written_ms);
  wire::Heartbeat* hb = header.mutable_heartbeat();
  hb->set_worker(worker);
  hb->set_sequence(static_cast<uint64_t>(written_ms));
  hb->set_state(state);
  hb->set_applied_round(round);
  hb->set_incarnation(incarnation);
  return wire::frame(header, {});
}

// Newest per worker by arrival; ages from arrival on the reader's clock, whatever the writer's
// clock says; another session under the reader's own name is reported apart.
TEST(Heartbeats, NewestBeatOfThisRunPerPeerAgedByArrival) {
  mirror::Simulation sim;
  mirror::FolderFaults faults;
  faults.lag_median_s = faults.lag_p90_s = 0.5;  // every file arrives 0.5 s after it is written
  mirror::SimFolder folder(sim, 1, faults);
  folder.disk("me");  // its syncer runs from the start
  const int64_t start = sim.unix_ms();
  auto put = [&](double t, const std::string& rel, std::string bytes) {
    sim.at(t, [&folder, rel, bytes] { folder.inject(rel, bytes); });
  };
  put(1, "members/a/hb-0000000000001-x.gbx", heartbeat("run", "a", start + 1000, "live", 5));
  // Written "10 minutes from now" by a clock that runs ahead: it still ages from its arrival.
  put(8, "members/a/hb-0000000000002-x.gbx", heartbeat("run", "a", start + 608000, "ready", 7));
  put(9, "members/b/hb-0000000000003-x.gbx", heartbeat("run", "b", start + 9000, "joining", 3));
  put(9, "members/c/hb-0000000000004-x.gbx", heartbeat("other-run", "c", start + 9000, "live", 3));
  put(9, "members/me/hb-0000000000005-x.gbx", heartbeat("run", "me", start + 9000, "live", 9, 1234));
  FolderExchangeConfig config;
  config.run_id = "run";
  config.worker = "me";
  std::map<std::string, PeerBeat> peers;
  std::optional<PeerBeat> namesake;
  bool forgot_older = false;
  sim.spawn("me", [&](mirror::Clock& clock) {
    clock.sleep_s(10.5);
    ExchangeContext context(config, folder.disk("me"), clock);
    Heartbeats beats(context);
    beats.refresh();
    peers = beats.peers();
    namesake = beats.namesake();
    forgot_older = folder.disk("me").list("members/a").size() == 1;
  });
  sim.run_until(20);
  ASSERT_EQ(peers.size(), 2u);  // not "me", not another run's
  EXPECT_EQ(peers.at("a").state, "ready");
  EXPECT_EQ(peers.at("a").applied_round, 7u);
  EXPECT_NEAR(peers.at("a").age_s, 2.0, 0.01);  // arrived at 8.5, read at 10.5
  EXPECT_EQ(peers.at("b").state, "joining");
  EXPECT_NEAR(peers.at("b").age_s, 1.0, 0.01);
  ASSERT_TRUE(namesake.has_value());
  EXPECT_EQ(namesake->incarnation, 1234u);
  EXPECT_TRUE(forgot_older);  // the older mirrored beat is dropped
  sim.kill_all();
}

// gradbox status reads a folder once, with no memory: a heartbeat dated in the future by a clock
// that runs ahead must not look fresh for as long as that clock is ahead.
TEST(RunStatus, AHeartbeatFromTheFutureAgesFromWhenItGotHere) {
  const fs::path dir = fs::temp_directory_path() / ("gradbox_status_skew_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch()).count();
  auto put = [&](const std::string& worker, double got_here_s_ago) {
    const fs::path file = dir / "members" / worker / "hb-0000000000001-x.gbx";
    fs::create_directories(file.parent_path());
    write_file_atomic(file, heartbeat("run", worker, now + 600'000, "live", 3));  // "written" 10 minutes from now
    fs::last_write_time(file, fs::file_time_type::clock::now() - std::chrono::milliseconds(static_cast<int64_t>(got_here_s_ago * 1000)));
  };
  put("dead", 120);  // arrived two minutes ago, nothing since
  put("alive", 1);
  const RunStatus status = read_run_status(dir, 60);
  ASSERT_EQ(status.members.size(), 2u);
  const MemberStatus& alive = status.members[0];
  const MemberStatus& dead = status.members[1];
  EXPECT_EQ(dead.worker, "dead");
  EXPECT_EQ(dead.state, "stale");
  EXPECT_NEAR(dead.age_s, 120, 5);
  EXPECT_NEAR(dead.clock_ahead_s, 600, 5);
  EXPECT_EQ(alive.state, "live");
  EXPECT_GE(alive.age_s, 0);
  EXPECT_NE(format_run_status(status).find("clock runs "), std::string::npos) << format_run_status(status);
  fs::remove_all(dir);
}

// A worker silent for 90 s is stale to a run started with --stale-after 30; status called it live
// by its own 120 s. Now status takes the run's value from its run configs unless told one.
TEST(RunStatus, CallsAWorkerStaleByTheRunsStaleAfter) {
  const fs::path dir = fs::temp_directory_path() / ("gradbox_status_stale_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch()).count();
  const fs::path beat = dir / "members" / "quiet" / "hb-0000000000001-x.gbx";
  fs::create_directories(beat.parent_path());
  write_file_atomic(beat, heartbeat("run", "quiet", now - 90'000, "live", 3));
  fs::last_write_time(beat, fs::file_time_type::clock::now() - std::chrono::seconds(90));
  EXPECT_EQ(read_run_status(dir, std::nullopt).members.at(0).state, "live");  // no run config: status's 120 s

  wire::FileHeader header;
  header.set_run_id("run");
  header.mutable_run_config()->set_worker("quiet");
  header.mutable_run_config()->set_stale_after_s(30);
  fs::create_directories(dir / kRunConfigDir);
  write_file_atomic(dir / run_config_name("quiet", "x"), wire::frame(header, {}));
  const RunStatus status = read_run_status(dir, std::nullopt);
  EXPECT_EQ(status.members.at(0).state, "stale");
  EXPECT_NE(format_run_status(status).find("stale: no heartbeat for 30 s (the run's --stale-after)"), std::string::npos)
      << format_run_status(status);
  EXPECT_EQ(read_run_status(dir, 120.0).members.at(0).state, "live");  // as told
  fs::remove_all(dir);
}

// When each worker reaches Drive's daily upload cap at the rate it uploads (issue "A shared
// folder is hostile territory": quota awareness).
TEST(RunStatus, SaysWhenEachWorkerReachesTheUploadCap) {
  constexpr uint64_t GB = 1000ull * 1000 * 1000;
  EXPECT_EQ(seconds_to_upload_cap(800 * GB, 1e6, 750 * GB), 0.0);             // over it already
  EXPECT_FALSE(seconds_to_upload_cap(10 * GB, 750.0 * GB / 86400 * 0.99, 750 * GB).has_value());  // never, at this rate
  EXPECT_NEAR(*seconds_to_upload_cap(50 * GB, 1e7, 750 * GB), 700e9 / 1e7, 1e-6);  // 19.4 h

  const fs::path dir = fs::temp_directory_path() / ("gradbox_status_cap_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch()).count();
  // fast: 20 MB/s for its hour of life (72 GB, all in the last day); slow: 1 MB/s; full: at the cap.
  auto put = [&](const std::string& worker, uint64_t uploaded, uint64_t day) {
    wire::FileHeader header;
    header.set_run_id("run");
    header.set_created_unix_ms(now);
    wire::Heartbeat* hb = header.mutable_heartbeat();
    hb->set_worker(worker);
    hb->set_sequence(1);
    hb->set_state("live");
    hb->set_started_unix_ms(now - 3600'000);
    hb->set_bytes_uploaded(uploaded);
    hb->set_bytes_uploaded_24h(day);
    const fs::path file = dir / "members" / worker / "hb-0000000000001-x.gbx";
    fs::create_directories(file.parent_path());
    write_file_atomic(file, wire::frame(header, {}));
  };
  put("fast", 72 * GB, 72 * GB);
  put("slow", 3600ull * 1000 * 1000, 3600ull * 1000 * 1000);
  put("full", 760 * GB, 760 * GB);
  const RunStatus status = read_run_status(dir, 60);
  ASSERT_EQ(status.members.size(), 3u);
  EXPECT_NEAR(status.members[0].upload_bytes_per_s, 2e7, 1e5);  // "fast" sorts first
  const std::string text = format_run_status(status);
  auto line_of = [&](const std::string& worker) {
    const size_t at = text.find("\n" + worker + " ");
    return text.substr(at + 1, text.find('\n', at + 1) - at - 1);
  };
  EXPECT_NE(line_of("fast").find("reaches the daily upload cap in 9.4 h"), std::string::npos) << text;  // 678 GB at 20 MB/s
  EXPECT_EQ(line_of("slow").find("cap in"), std::string::npos) << text;
  EXPECT_NE(line_of("full").find("AT THE DAILY UPLOAD CAP"), std::string::npos) << text;
  // A smaller cap (--upload-cap-gb 100): the fast one is there in 0.4 h.
  EXPECT_NE(format_run_status(read_run_status(dir, 60, {}, 100 * GB)).find("cap in 0.4 h"), std::string::npos);
  fs::remove_all(dir);
}

// A worker warns as its last day's uploads near --upload-cap-gb and when they reach it: once each.
TEST(ExchangeContext, UploadsNearingTheDailyCapAreWarnedOnce) {
  mirror::Simulation sim;
  mirror::SimFolder folder(sim, 1);
  uint64_t warnings_at_79 = 0, warnings_at_85 = 0, warnings_at_120 = 0;
  sim.spawn("me", [&](mirror::Clock& clock) {
    FolderExchangeConfig config;
    config.run_id = "run";
    config.worker = "me";
    config.upload_cap_bytes = 1000;
    ExchangeContext context(config, folder.disk("me"), clock);
    const std::string ten(10, 'x');
    for (int i = 0; i < 79; ++i) context.publish("f/" + std::to_string(i), ten);
    warnings_at_79 = context.stats.upload_cap_warnings;
    for (int i = 79; i < 85; ++i) context.publish("f/" + std::to_string(i), ten);
    warnings_at_85 = context.stats.upload_cap_warnings;
    for (int i = 85; i < 120; ++i) context.publish("f/" + std::to_string(i), ten);
    warnings_at_120 = context.stats.upload_cap_warnings;
  });
  sim.run_until(10);
  EXPECT_EQ(warnings_at_79, 0u);
  EXPECT_EQ(warnings_at_85, 1u);   // past 80%
  EXPECT_EQ(warnings_at_120, 2u);  // at the cap, and not again for every file after it
  sim.kill_all();
}

// A worker that looks at the folder less often than the blind-spell threshold (a slow poll; a
// DiLoCo worker between inner steps) and finds new listings at every look was never blind; one
// whose looks find the listings standing still was, from its last good look on. Found by
// `gradbox simulate` at H=20: every owner waited for ever to see the folder "long enough".
TEST(ExchangeContext, SlowLooksAtAGrowingFolderAreNotABlindSpell) {
  mirror::Simulation sim;
  mirror::FolderFaults faults;
  faults.pass_s = 0.5;
  mirror::SimFolder folder(sim, 1, faults);
  FolderExchangeConfig config;
  config.run_id = "run";
  config.worker = "me";
  std::vector<double> seen_since;
  double blind_after_outage = -1;
  sim.spawn("me", [&](mirror::Clock& clock) {
    ExchangeContext context(config, folder.disk("me"), clock);
    clock.sleep_s(1);  // the syncer's first listings
    for (int look = 0; look < 6; ++look) {
      context.listings();
      seen_since.push_back(context.seen_since_s());
      clock.sleep_s(5);  // > kListingStallS between looks
    }
    // The folder out of sight for 20 s: looks within it find nothing new.
    folder.outage("me", clock.now_s(), clock.now_s() + 20);
    for (int look = 0; look < 5; ++look) {
      clock.sleep_s(5);
      context.listings();
    }
    blind_after_outage = context.seen_since_s();
  });
  sim.run_until(200);
  ASSERT_EQ(seen_since.size(), 6u);
  for (size_t i = 1; i < seen_since.size(); ++i) EXPECT_EQ(seen_since[i], seen_since[0]) << "look " << i;
  EXPECT_GT(blind_after_outage, 51.0);  // seen again only since the outage ended (at 51 s)
  sim.kill_all();
}

}  // namespace
}  // namespace gradbox::exchange

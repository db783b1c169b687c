#include "mirror/memory_mirror.h"

#include <gtest/gtest.h>

#include "common/error.h"  // str

#include <algorithm>
#include <stdexcept>

namespace gradbox::mirror {
namespace {

constexpr int64_t kStart = 1'700'000'000'000;  // Simulation's default start

// Lags without spread, so arrival times are exact: land + 0.1 s.
FolderFaults fixed_lag() {
  FolderFaults f;
  f.lag_median_s = f.lag_p90_s = 0.1;
  f.upload_s = 0.01;
  f.pass_s = 0.05;
  return f;
}

std::vector<std::string> names(const std::vector<Arrival>& arrivals) {
  std::vector<std::string> out;
  for (const Arrival& a : arrivals) out.push_back(a.name);
  return out;
}

using Names = std::vector<std::string>;

TEST(MemoryMirror, PublishLandsAfterUploadTimeAndIsWrittenOnce) {
  Simulation sim;
  SimFolder folder(sim, 1, fixed_lag());
  MemoryMirror& a = folder.disk("a");
  EXPECT_EQ(&folder.disk("a"), &a);
  a.publish("r/x", "hello");
  EXPECT_TRUE(a.published("r/x"));
  EXPECT_FALSE(a.published("r/y"));
  EXPECT_EQ(a.read_published("r/x"), "hello");
  EXPECT_EQ(a.list_published("r"), Names{"x"});
  EXPECT_EQ(a.list_published("r/"), Names{"x"});
  EXPECT_FALSE(a.landed("r/x"));
  sim.run_until(0.009);
  EXPECT_FALSE(a.landed("r/x"));
  EXPECT_FALSE(folder.shared_file("r/x"));
  sim.run_until(0.0101);
  EXPECT_TRUE(a.landed("r/x"));
  EXPECT_EQ(folder.shared_file("r/x"), "hello");
  EXPECT_EQ(folder.counters().landed, 1u);
  EXPECT_THROW(a.publish("r/x", "other"), std::logic_error);
  EXPECT_EQ(a.where("r/x"), "mem://a/r/x");
  sim.run_until(1);
  EXPECT_FALSE(a.read("r/x"));  // own files are never mirrored back
  EXPECT_TRUE(a.list("r").empty());
}

// A file is visible to a viewer a lag after it landed, whenever the viewer starts looking: a
// disk created later, or an on-demand file requested later, gets what landed long ago at once
// (a joiner's checkpoint parts), and what landed a moment ago a lag after its landing.
TEST(MemoryMirror, WhatLandedLongAgoIsThereAtOnceForALaterViewer) {
  Simulation sim;
  FolderFaults f = fixed_lag();
  f.on_demand_prefixes = {"part-"};
  SimFolder folder(sim, 1, f);
  MemoryMirror& a = folder.disk("a");
  a.publish("r/old", "o");
  a.publish("ck/part-0001.gbx", "p");
  sim.run_until(10);
  MemoryMirror& b = folder.disk("b");  // a new session, 10 s after both landed
  a.publish("r/new", "n");             // lands at 10.01
  sim.run_until(10.001);
  EXPECT_EQ(names(b.list("r")), Names{"old"});
  EXPECT_TRUE(b.list("ck").empty()) << "on demand: not before it is requested";
  b.request("ck/part-");
  sim.run_until(10.002);
  EXPECT_EQ(names(b.list("ck")), Names{"part-0001.gbx"});
  sim.run_until(10.105);
  EXPECT_EQ(names(b.list("r")), Names{"old"});
  sim.run_until(10.111);
  EXPECT_EQ(names(b.list("r")), (Names{"new", "old"}));
}

// Links with a bandwidth: uploads queue on the writer's link, downloads on each reader's, and
// a file is charged its nominal size (the speed-up simulator's large model).
TEST(MemoryMirror, LinksQueueTransfersAndChargeNominalSizes) {
  Simulation sim;
  FolderFaults f = fixed_lag();
  f.upload_bytes_per_s = 1000;
  f.download_bytes_per_s = 4000;
  f.nominal_bytes = [](const std::string& rel, uint64_t bytes) { return rel.starts_with("big/") ? 2000 : bytes; };
  SimFolder folder(sim, 1, f);
  MemoryMirror &a = folder.disk("a"), &b = folder.disk("b");
  a.publish("big/x", "X");       // 2000 nominal bytes: up at 0.01 + 2 s
  a.publish("big/y", "Y");       // after x on a's link: 2.01 + 0.01 + 2 s
  a.publish("small/z", "zzzz");  // 4 bytes after both: 4.02 + 0.01 + 0.004 s
  sim.run_until(2.009);
  EXPECT_FALSE(a.landed("big/x"));
  sim.run_until(2.0101);
  EXPECT_TRUE(a.landed("big/x"));
  EXPECT_FALSE(a.landed("big/y"));
  sim.run_until(4.0201);
  EXPECT_TRUE(a.landed("big/y"));
  sim.run_until(4.0339);
  EXPECT_FALSE(a.landed("small/z"));
  sim.run_until(4.0341);
  EXPECT_TRUE(a.landed("small/z"));
  // b sees each 0.1 s after it landed and downloads x and y in 0.5 s each; z, seen at 4.134
  // while y still comes down, waits for it on b's link.
  sim.run_until(4.6205);
  const std::vector<Arrival> big = b.list("big");
  ASSERT_EQ(big.size(), 2u);
  EXPECT_EQ(big[0].arrived_unix_ms, kStart + 2610);  // 2.01 + 0.1 + 0.5
  EXPECT_EQ(big[1].arrived_unix_ms, kStart + 4620);  // 4.02 + 0.1 + 0.5
  EXPECT_FALSE(b.read("small/z"));
  sim.run_until(5);
  EXPECT_EQ(b.read("small/z"), "zzzz");
  EXPECT_EQ(b.list("small")[0].arrived_unix_ms, kStart + 4621);  // 4.62 + 0.001
}

// Checkpoint parts are background traffic on a link, as the syncer sends them (Note [Upload
// order]): one at a time while nothing else waits, so a round's file published behind ten
// parts waits for the one part in flight, not for all ten.
TEST(MemoryMirror, CheckpointPartsGiveWayToOtherUploads) {
  Simulation sim;
  FolderFaults f = fixed_lag();
  f.upload_bytes_per_s = 1000;
  f.nominal_bytes = [](const std::string& rel, uint64_t bytes) { return rel.starts_with("checkpoints/") ? 1000 : bytes; };
  SimFolder folder(sim, 1, f);
  MemoryMirror& a = folder.disk("a");
  for (int i = 0; i < 10; ++i) a.publish(str("checkpoints/s1-e0-a/part-000", i, ".gbx"), "P");  // 1 s each
  sim.run_until(0.5);
  a.publish("rounds/r1/g-s0-a.gbx", "g");  // after part 0 (up at 1.01): 1.01 + 0.01 + 0.001 s
  sim.run_until(1.0205);
  EXPECT_TRUE(a.landed("checkpoints/s1-e0-a/part-0000.gbx"));
  EXPECT_FALSE(a.landed("rounds/r1/g-s0-a.gbx"));
  sim.run_until(1.0215);
  EXPECT_TRUE(a.landed("rounds/r1/g-s0-a.gbx"));
  EXPECT_FALSE(a.landed("checkpoints/s1-e0-a/part-0001.gbx"));
  // The parts go on back to back after it: the last lands at 1.021 + 9 x 1.01 s.
  sim.run_until(10.10);
  EXPECT_FALSE(a.landed("checkpoints/s1-e0-a/part-0009.gbx"));
  sim.run_until(10.12);
  EXPECT_TRUE(a.landed("checkpoints/s1-e0-a/part-0009.gbx"));
}

TEST(MemoryMirror, DownloadsQueueOnTheReadersLink) {
  Simulation sim;
  FolderFaults f = fixed_lag();
  f.download_bytes_per_s = 100;
  SimFolder folder(sim, 1, f);
  MemoryMirror &a = folder.disk("a"), &b = folder.disk("b"), &c = folder.disk("c");
  a.publish("r/x", std::string(100, 'x'));  // lands at 0.01, seen at 0.11: down in 1 s
  c.publish("r/y", std::string(50, 'y'));   // seen by b at 0.11 too, after x on b's link
  sim.run_until(10);
  std::vector<Arrival> got = b.list("r");
  std::sort(got.begin(), got.end(), [](const Arrival& p, const Arrival& q) { return p.name < q.name; });
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].arrived_unix_ms, kStart + 1110);  // x: 0.11 + 1
  EXPECT_EQ(got[1].arrived_unix_ms, kStart + 1610);  // y: queued behind x, + 0.5
  EXPECT_EQ(c.list("r")[0].arrived_unix_ms, kStart + 1110);  // c's own link is free
}

TEST(MemoryMirror, DeliversToEveryOtherDiskAfterTheLag) {
  Simulation sim;
  SimFolder folder(sim, 1, fixed_lag());
  MemoryMirror &a = folder.disk("a"), &b = folder.disk("b"), &c = folder.disk("c");
  a.publish("rounds/r1/w-a", "A");
  sim.run_until(0.109);
  EXPECT_FALSE(b.read("rounds/r1/w-a"));
  EXPECT_TRUE(b.list("rounds/r1").empty());
  EXPECT_TRUE(b.list_dirs("").empty());
  sim.run_until(0.2);
  EXPECT_EQ(b.read("rounds/r1/w-a"), "A");
  const std::vector<Arrival> listed = b.list("rounds/r1");
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].name, "w-a");
  EXPECT_EQ(listed[0].arrived_unix_ms, kStart + 110);
  EXPECT_EQ(c.read("rounds/r1/w-a"), "A");
  EXPECT_TRUE(b.list("rounds").empty());  // directly in dir only
  EXPECT_EQ(b.list_dirs(""), Names{"rounds"});
  EXPECT_EQ(b.list_dirs("rounds"), Names{"r1"});
  EXPECT_EQ(a.list_dirs("rounds/"), Names{"r1"});  // from the outbox
  EXPECT_EQ(folder.counters().deliveries, 2u);
}

// b's arrival times (ms after landing) of 300 files a publishes at t = 0, default faults.
std::vector<int64_t> lags_ms(uint64_t seed) {
  Simulation sim;
  SimFolder folder(sim, seed, FolderFaults{});
  MemoryMirror &a = folder.disk("a"), &b = folder.disk("b");
  for (int i = 0; i < 300; ++i) a.publish(str("f/", 1000 + i), "x");
  sim.run_until(10);
  std::vector<int64_t> lags;
  for (const Arrival& arrival : b.list("f")) lags.push_back(arrival.arrived_unix_ms - kStart - 10);
  return lags;
}

TEST(MemoryMirror, LagsAreLogNormalOutOfOrderAndSeeded) {
  const std::vector<int64_t> lags = lags_ms(42);
  ASSERT_EQ(lags.size(), 300u);
  EXPECT_EQ(lags_ms(42), lags);
  EXPECT_NE(lags_ms(43), lags);
  EXPECT_FALSE(std::is_sorted(lags.begin(), lags.end()));  // arrivals out of publish order
  std::vector<int64_t> sorted = lags;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_GT(sorted[150], 35);  // median 50 ms
  EXPECT_LT(sorted[150], 70);
  EXPECT_GT(sorted[270], 140);  // p90 200 ms
  EXPECT_LT(sorted[270], 290);
  EXPECT_LE(sorted.back(), 2000);  // capped at 10x p90
}

TEST(MemoryMirror, WriteOnceFirstLandingKeepsTheName) {
  Simulation sim;
  SimFolder folder(sim, 1, fixed_lag());
  MemoryMirror &a = folder.disk("a"), &b = folder.disk("b"), &c = folder.disk("c"), &d = folder.disk("d");
  a.publish("x", "A");
  sim.run_until(0.005);
  b.publish("x", "B");
  d.publish("x", "A");
  sim.run_until(1);
  EXPECT_EQ(folder.shared_file("x"), "A");
  EXPECT_TRUE(a.landed("x"));
  EXPECT_FALSE(b.landed("x"));
  EXPECT_TRUE(d.landed("x"));  // the same bytes: as good as uploaded
  EXPECT_EQ(folder.counters().conflicts, 1u);
  EXPECT_EQ(folder.counters().landed, 2u);
  EXPECT_FALSE(b.read("x"));  // b published x: it never mirrors that name
  EXPECT_FALSE(d.read("x"));
  EXPECT_EQ(c.read("x"), "A");

  folder.inject("y", "S");  // a stranger squats y
  a.publish("y", "mine");
  folder.inject("y", "T");
  folder.inject("y", "S");  // the same bytes again: nothing happens
  sim.run_until(2);
  EXPECT_EQ(folder.shared_file("y"), "S");
  EXPECT_FALSE(a.landed("y"));
  EXPECT_EQ(folder.counters().conflicts, 3u);
  EXPECT_FALSE(a.read("y"));
  EXPECT_EQ(b.read("y"), "S");
  EXPECT_EQ(c.list("")[1].arrived_unix_ms, kStart + 1100);  // {x, y}: y injected at 1 s
}

TEST(MemoryMirror, OnDemandFilesComeOnlyWhenRequested) {
  Simulation sim;
  SimFolder folder(sim, 1, fixed_lag());
  MemoryMirror &a = folder.disk("a"), &b = folder.disk("b"), &c = folder.disk("c");
  a.publish("ckpt/part-0", "P0");
  a.publish("ckpt/manifest", "M");
  sim.run_until(1);
  EXPECT_EQ(b.read("ckpt/manifest"), "M");
  EXPECT_FALSE(b.read("ckpt/part-0"));
  b.request("ckpt/part-0");   // landed long ago: there at once
  c.request("ckpt/part-1");   // not there yet: landing + lag
  a.publish("ckpt/part-1", "P1");
  sim.run_until(1.001);
  EXPECT_EQ(b.read("ckpt/part-0"), "P0");
  EXPECT_FALSE(c.read("ckpt/part-1"));
  sim.run_until(1.2);
  EXPECT_EQ(b.read("ckpt/part-0"), "P0");
  EXPECT_EQ(b.list("ckpt")[1].arrived_unix_ms, kStart + 1000);  // {manifest, part-0}
  EXPECT_EQ(c.read("ckpt/part-1"), "P1");
  EXPECT_EQ(c.list("ckpt")[1].arrived_unix_ms, kStart + 1110);  // {manifest, part-1}
  sim.run_until(3);
  EXPECT_FALSE(b.read("ckpt/part-1"));
  EXPECT_FALSE(c.read("ckpt/part-0"));
}

TEST(MemoryMirror, OutageStopsUploadsArrivalsAndPassesThenCatchesUp) {
  Simulation sim;
  SimFolder folder(sim, 1, fixed_lag());
  MemoryMirror &a = folder.disk("a"), &b = folder.disk("b");
  folder.outage("a", 0, 1);
  b.publish("from-b", "B");  // lands at 0.01; due at a at 0.11, inside the outage
  b.publish("taken", "B");
  sim.run_until(0.2);
  a.publish("from-a", "A");
  a.publish("taken", "A");  // b's copy landed meanwhile: the name is no longer free
  sim.run_until(0.5);
  EXPECT_FALSE(a.landed("from-a"));
  EXPECT_FALSE(folder.shared_file("from-a"));
  EXPECT_FALSE(a.read("from-b"));
  EXPECT_EQ(a.settled_passes(), 0u);
  EXPECT_EQ(b.settled_passes(), 10u);
  sim.run_until(1.06);
  EXPECT_TRUE(a.landed("from-a"));  // 1 + upload_s
  EXPECT_FALSE(a.landed("taken"));
  EXPECT_EQ(folder.counters().conflicts, 1u);
  EXPECT_FALSE(a.read("from-b"));
  EXPECT_EQ(a.settled_passes(), 1u);
  sim.run_until(1.2);
  EXPECT_EQ(a.read("from-b"), "B");
  EXPECT_EQ(a.list("")[0].arrived_unix_ms, kStart + 1100);  // outage end + a fresh lag
  EXPECT_EQ(b.read("from-a"), "A");
  EXPECT_EQ(b.list("")[0].arrived_unix_ms, kStart + 1110);
  EXPECT_EQ(b.settled_passes(), 24u);
  EXPECT_EQ(a.settled_passes(), 4u);

  folder.outage("a", 1.3, 2);
  sim.run_until(1.4);
  a.withdraw("from-a");  // the deletion waits for the folder too
  sim.run_until(2.005);
  EXPECT_EQ(folder.shared_file("from-a"), "A");
  EXPECT_EQ(a.settled_passes(), 6u);  // 0.3 s outside outages since 1.0
  sim.run_until(2.011);
  EXPECT_FALSE(folder.shared_file("from-a"));
}

TEST(MemoryMirror, WithdrawDeletesTheSharedCopyNotDeliveredOnes) {
  Simulation sim;
  SimFolder folder(sim, 1, fixed_lag());
  MemoryMirror &a = folder.disk("a"), &b = folder.disk("b"), &c = folder.disk("c");
  folder.outage("c", 0, 5);  // c's copy is still on its way when a withdraws
  a.publish("r/x", "X");
  a.publish("r/sub/y", "Y");
  a.publish("gone", "never lands");
  a.withdraw("gone");  // before landing: never uploaded
  sim.run_until(0.2);
  EXPECT_EQ(b.read("r/sub/y"), "Y");
  a.withdraw("r");  // the folder
  EXPECT_FALSE(a.published("r/x"));
  EXPECT_FALSE(a.landed("r/x"));
  EXPECT_TRUE(a.list_published("r").empty());
  EXPECT_TRUE(a.list_dirs("").empty());
  EXPECT_EQ(folder.shared_file("r/x"), "X");  // deleted upload_s later
  sim.run_until(0.22);
  EXPECT_FALSE(folder.shared_file("r/x"));
  EXPECT_FALSE(folder.shared_file("r/sub/y"));
  EXPECT_FALSE(folder.shared_file("gone"));
  EXPECT_EQ(folder.counters().landed, 2u);
  EXPECT_EQ(b.read("r/x"), "X");  // delivered copies stay until forgotten
  a.publish("r/x", "X2");        // the name is free again
  sim.run_until(6);
  EXPECT_EQ(folder.shared_file("r/x"), "X2");
  EXPECT_EQ(c.read("r/x"), "X2");  // never X: it was deleted before c could see it
  EXPECT_FALSE(c.read("r/sub/y"));
  EXPECT_FALSE(c.read("gone"));
  EXPECT_EQ(b.read("r/x"), "X");  // b flagged r/x once: its syncer never fetches it again

  b.forget("r");
  EXPECT_FALSE(b.read("r/x"));
  EXPECT_FALSE(b.read("r/sub/y"));
  EXPECT_TRUE(b.list_dirs("").empty());
  c.forget("r/x");
  EXPECT_FALSE(c.read("r/x"));
  sim.run_until(10);
  EXPECT_FALSE(b.read("r/x"));
  EXPECT_FALSE(c.read("r/x"));
}

TEST(MemoryMirror, ForgetDropsRequests) {
  Simulation sim;
  SimFolder folder(sim, 1, fixed_lag());
  MemoryMirror &a = folder.disk("a"), &b = folder.disk("b");
  b.request("ck/part-0");
  b.request("ck/part-1");
  b.forget("ck");  // the worker changed its mind before the parts existed
  b.request("ck/part-1");
  a.publish("ck/part-0", "0");
  a.publish("ck/part-1", "1");
  sim.run_until(1);
  EXPECT_FALSE(b.read("ck/part-0"));
  EXPECT_EQ(b.read("ck/part-1"), "1");
}

TEST(MemoryMirror, ControlReachesEachDiskAfterALag) {
  Simulation sim;
  SimFolder folder(sim, 1, fixed_lag());
  MemoryMirror &a = folder.disk("a"), &b = folder.disk("b");
  EXPECT_FALSE(a.control());
  folder.set_control(R"({"v":1})");
  sim.run_until(0.09);
  EXPECT_FALSE(a.control());
  sim.run_until(0.11);
  EXPECT_EQ(a.control(), R"({"v":1})");
  EXPECT_EQ(b.control(), R"({"v":1})");
  EXPECT_TRUE(a.list("").empty());  // not a flagged file
  folder.outage("b", 0.5, 2);
  sim.run_until(1);
  folder.set_control(R"({"v":2})");
  sim.run_until(1.5);
  EXPECT_EQ(a.control(), R"({"v":2})");
  EXPECT_EQ(b.control(), R"({"v":1})");
  sim.run_until(2.09);
  EXPECT_EQ(b.control(), R"({"v":1})");
  sim.run_until(2.11);
  EXPECT_EQ(b.control(), R"({"v":2})");
  sim.run_until(3);
  MemoryMirror& late = folder.disk("late");
  EXPECT_FALSE(late.control());
  sim.run_until(3.11);
  EXPECT_EQ(late.control(), R"({"v":2})");
}

TEST(MemoryMirror, NewDiskFetchesWhatTheFolderHolds) {
  Simulation sim;
  SimFolder folder(sim, 1, fixed_lag());
  folder.disk("a").publish("x", "X");
  sim.run_until(1);
  MemoryMirror& b = folder.disk("b");
  EXPECT_EQ(b.settled_passes(), 0u);
  sim.run_until(1.001);
  EXPECT_EQ(b.read("x"), "X");  // landed a lag and more ago: in its first listing
  sim.run_until(1.52);
  EXPECT_EQ(b.settled_passes(), 10u);  // counted from its creation
}

TEST(MemoryMirror, PartialCopiesAndLostListingsDelayButDeliver) {
  Simulation sim;
  FolderFaults faults = fixed_lag();
  faults.partial = 1;
  SimFolder folder(sim, 1, faults);
  MemoryMirror &a = folder.disk("a"), &b = folder.disk("b");
  folder.disk("c");
  a.publish("x", "X");
  sim.run_until(0.2);
  EXPECT_FALSE(b.read("x"));  // partial: not flagged yet
  EXPECT_EQ(folder.counters().partial_copies, 2u);
  sim.run_until(0.22);
  EXPECT_EQ(b.read("x"), "X");  // one more lag
  EXPECT_EQ(folder.counters().partial_copies, 2u);  // only a first copy is partial
  EXPECT_EQ(folder.counters().deliveries, 2u);

  Simulation sim2;
  faults = FolderFaults{};
  faults.lost_listing = 0.5;
  SimFolder lossy(sim2, 9, faults);
  MemoryMirror &p = lossy.disk("p"), &q = lossy.disk("q");
  for (int i = 0; i < 50; ++i) p.publish(str("f/", i), "x");
  sim2.run_until(60);
  EXPECT_EQ(q.list("f").size(), 50u);
  EXPECT_GT(lossy.counters().lost_listings, 10u);
  EXPECT_EQ(lossy.counters().deliveries, 50u);
}

// Workers as simulated processes: each publishes its contribution to a round, then polls for
// its peers' until all came or a deadline passes. w2 is killed mid-run and restarted on the
// same disk, which still holds what it published before.
std::vector<std::string> round_trace() {
  Simulation sim;
  FolderFaults faults;
  faults.partial = 0.2;
  faults.lost_listing = 0.1;
  SimFolder folder(sim, 5, faults);
  std::vector<std::string> trace;
  auto worker = [&](std::string name) {
    return [&, name](Clock& clock) {
      MemoryMirror& disk = folder.disk(name);
      for (int r = 0; r < 6; ++r) {
        const std::string dir = str("rounds/r", r);
        if (!disk.published(dir + "/" + name)) disk.publish(dir + "/" + name, name);
        const double deadline = clock.now_s() + 1.5;
        while (disk.list(dir).size() < 3 && clock.now_s() < deadline) clock.sleep_s(0.01);
        trace.push_back(str(clock.unix_ms(), " ", name, " ", dir, " ", disk.list(dir).size()));
      }
    };
  };
  for (const char* name : {"w0", "w1", "w2", "w3"}) sim.spawn(name, worker(name));
  sim.at(0.3, [&] { sim.kill(2); });
  sim.at(1.0, [&] { sim.spawn("w2 again", worker("w2")); });
  sim.run_until(30);
  EXPECT_TRUE(sim.failures().empty());
  EXPECT_EQ(sim.processes_running(), 0u);
  return trace;
}

TEST(MemoryMirror, WorkersOnTheSimulationReplayExactly) {
  const std::vector<std::string> trace = round_trace();
  EXPECT_GE(trace.size(), 24u);
  EXPECT_EQ(round_trace(), trace);
}

TEST(MemoryMirror, ThousandsOfFilesStayCheap) {
  Simulation sim;
  SimFolder folder(sim, 3, FolderFaults{});
  std::vector<MemoryMirror*> disks;
  for (int w = 0; w < 20; ++w) disks.push_back(&folder.disk(str("w", w)));
  for (int step = 0; step < 100; ++step) {
    const std::string dir = str("rounds/r", step);
    for (int w = 0; w < 20; ++w) disks[w]->publish(str(dir, "/w", w), std::string(64, 'g'));
    for (int poll = 0; poll < 10; ++poll) {
      sim.run_until(sim.now_s() + 0.05);
      for (MemoryMirror* d : disks) (void)d->list(dir), (void)d->list_dirs("rounds");
    }
  }
  sim.run_until(sim.now_s() + 10);
  EXPECT_EQ(folder.counters().landed, 2000u);
  EXPECT_EQ(folder.counters().deliveries, 2000u * 19);
  EXPECT_EQ(disks[0]->list_dirs("rounds").size(), 100u);
  EXPECT_EQ(names(disks[0]->list("rounds/r7")).size(), 19u);  // peers only: own files stay in the outbox
}

}  // namespace
}  // namespace gradbox::mirror

// Note [Waking on changes]: what wakes a ChangeWatch and what does not. A wait that should end on
// a change is given 10 s and must say "changed" (the event, not the timeout, ended it); one that
// should not is given 100 ms and must time out.
#include "syncer/change_watch.h"

#include <gtest/gtest.h>

#include "common/atomic_file.h"
#include "test_util.h"

namespace gradbox::syncer {
namespace {

using namespace testing;
using std::chrono::milliseconds;

constexpr milliseconds kChange{10'000};   // ample: an event ends it long before
constexpr milliseconds kNothing{100};

TEST(ChangeWatch, AFileWrittenAnywhereUnderARootWakesAWaitAndNewFoldersAreWatched) {
  const fs::path root = fresh_dir("watch_tree");
  fs::create_directories(root / "rounds" / "r1");
  ChangeWatch watch({root});
  ASSERT_GE(watch.fd(), 0) << "inotify is not available here";
  EXPECT_EQ(watch.watched(), 3u);  // the root and both folders below it
  EXPECT_FALSE(watch.wait(kNothing));

  write_file_atomic(root / "rounds" / "r1" / "a.gbx", framed_file(1));  // a rename from a .tmp name
  EXPECT_TRUE(watch.wait(kChange));
  EXPECT_FALSE(watch.wait(kNothing)) << "one change, consumed once";

  // A folder made after the watch began is watched from its creation on, with what it already holds.
  fs::create_directories(root / "rounds" / "r2" / "deep");
  EXPECT_TRUE(watch.wait(kChange));
  EXPECT_EQ(watch.watched(), 5u);
  write_bytes(root / "rounds" / "r2" / "deep" / "b.gbx", framed_file(2));
  EXPECT_TRUE(watch.wait(kChange));

  fs::remove(root / "rounds" / "r1" / "a.gbx");  // a withdrawn file is a change too
  EXPECT_TRUE(watch.wait(kChange));
}

TEST(ChangeWatch, TemporaryNamesAndSentMarkersWakeNobody) {
  const fs::path root = fresh_dir("watch_quiet");
  ChangeWatch watch({root});
  ASSERT_GE(watch.fd(), 0);
  write_bytes(root / (std::string("a.gbx") + std::string(kTempMarker) + ".123"), "half");
  write_bytes(root / sent_of("a.gbx"), "");
  EXPECT_FALSE(watch.wait(kNothing));
  fs::rename(root / (std::string("a.gbx") + std::string(kTempMarker) + ".123"), root / "a.gbx");
  EXPECT_TRUE(watch.wait(kChange));
}

TEST(ChangeWatch, ARootMadeLaterIsWatchedFromTheNextWaitOn) {
  const fs::path base = fresh_dir("watch_later");
  ChangeWatch watch({base / "outbox"});
  EXPECT_EQ(watch.watched(), 0u);
  EXPECT_FALSE(watch.wait(kNothing));  // looks for the root again
  fs::create_directories(base / "outbox");
  EXPECT_FALSE(watch.wait(kNothing));  // now watched; nothing in it changed yet
  EXPECT_EQ(watch.watched(), 1u);
  write_bytes(base / "outbox" / "hb.json", "{}");
  EXPECT_TRUE(watch.wait(kChange));
}

}  // namespace
}  // namespace gradbox::syncer

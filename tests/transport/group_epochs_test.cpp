// Note [Group epochs] on a map store and a stepped clock: the registrar's window, one list for
// everyone, a late worker left out, a registrar that dies.
#include "transport/group_epochs.h"

#include <gtest/gtest.h>

#include <functional>
#include <map>

namespace gradbox::transport {
namespace {

class MapStore final : public KeyValueStore {
 public:
  void set(const std::string& key, const std::string& value) override { values[key] = value; }
  std::optional<std::string> get(const std::string& key) override {
    auto it = values.find(key);
    return it == values.end() ? std::nullopt : std::optional<std::string>(it->second);
  }
  int64_t add(const std::string& key, int64_t delta) override {
    const int64_t v = (values.count(key) ? std::stoll(values[key]) : 0) + delta;
    values[key] = std::to_string(v);
    return v;
  }
  std::string set_once(const std::string& key, const std::string& desired) override {
    return values.emplace(key, desired).first->second;
  }
  std::map<std::string, std::string> values;
};

// Time moves only when the protocol sleeps; `at` runs other workers' moves at given times.
class SteppedClock final : public mirror::Clock {
 public:
  double now_s() override { return t; }
  int64_t unix_ms() override { return static_cast<int64_t>(t * 1000); }
  void sleep_s(double s) override {
    t += s;
    for (auto it = moves.begin(); it != moves.end() && it->first <= t;) {
      it->second();
      it = moves.erase(it);
    }
  }
  double t = 0;
  std::multimap<double, std::function<void()>> moves;
};

EpochRequest request(const std::string& worker, uint64_t epoch = 0) {
  return {"run", worker, epoch, {"a", "b", "c"}, nullptr, 5.0, 2.0};
}

void register_only(MapStore& store, const std::string& worker, uint64_t epoch = 0) {
  store.set("run/e" + std::to_string(epoch) + "/in/" + worker, "1");
  store.add("run/e" + std::to_string(epoch) + "/count", 1);
}

TEST(GroupEpochs, TheRegistrarClosesTheListWhenEveryoneExpectedIsIn) {
  MapStore store;
  SteppedClock clock;
  clock.moves.emplace(1.0, [&] { register_only(store, "c"); });
  clock.moves.emplace(2.0, [&] { register_only(store, "b"); });
  const GroupEpoch group = form_group_epoch(store, clock, request("a"));
  EXPECT_EQ(group.members, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(group.rank, 0);
  EXPECT_GE(clock.t, 2.0);
  EXPECT_LT(clock.t, 2.1);  // it closed as soon as b came, not at the window
  EXPECT_EQ(*newest_group_epoch(store, "run")->members.rbegin(), "c");
  // b reads the same list, and is rank 1.
  EXPECT_EQ(form_group_epoch(store, clock, request("b")).rank, 1);
}

TEST(GroupEpochs, AfterTheWindowTheListHasWhoeverCameAndALateWorkerIsLeftOut) {
  MapStore store;
  SteppedClock clock;
  clock.moves.emplace(4.0, [&] { register_only(store, "b"); });
  const GroupEpoch group = form_group_epoch(store, clock, request("a"));
  EXPECT_EQ(group.members, (std::vector<std::string>{"a", "b"}));
  EXPECT_GE(clock.t, 5.0);
  EXPECT_LT(clock.t, 5.1);
  EXPECT_THROW(form_group_epoch(store, clock, request("c")), LeftOutOfGroup);
  // c enters the next epoch like anyone else.
  clock.moves.emplace(clock.t + 0.5, [&] { register_only(store, "a", 1); });
  clock.moves.emplace(clock.t + 0.7, [&] { register_only(store, "b", 1); });
  EXPECT_EQ(form_group_epoch(store, clock, request("c", 1)).members, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(newest_group_epoch(store, "run")->epoch, 0u);  // only rank 0 (a) moves the newest epoch on
}

TEST(GroupEpochs, ARegistrarThatDiesBeforeTheListLeavesTheOthersToTheNextEpoch) {
  MapStore store;
  SteppedClock clock;
  register_only(store, "a");  // a registered first, then died
  EXPECT_THROW(form_group_epoch(store, clock, request("b")), EpochNotFormed);
  EXPECT_GE(clock.t, 7.0);  // the window and the grace
  EXPECT_LT(clock.t, 7.1);
  EXPECT_FALSE(store.get("run/e0/members"));
}

TEST(GroupEpochs, TheRegistrarDoesNotWaitForAWorkerThatStoppedBeating) {
  MapStore store;
  SteppedClock clock;
  bool c_alive = true;
  clock.moves.emplace(0.5, [&] { register_only(store, "b"); });
  clock.moves.emplace(1.5, [&] { c_alive = false; });  // c's heartbeat went stale
  EpochRequest r = request("a");
  r.window_s = 60;
  r.alive = [&](const std::string& name) { return name != "c" || c_alive; };
  const GroupEpoch group = form_group_epoch(store, clock, r);
  EXPECT_EQ(group.members, (std::vector<std::string>{"a", "b"}));
  EXPECT_GE(clock.t, 1.5);
  EXPECT_LT(clock.t, 1.6);  // not the 60 s window
}

}  // namespace
}  // namespace gradbox::transport

#include "transport/group_epochs.h"

#include <algorithm>
#include <sstream>

#include "common/error.h"

namespace gradbox::transport {
namespace {

std::string epoch_key(const EpochRequest& r, const std::string& what) {
  return str(r.run_id, "/e", r.epoch, "/", what);
}

std::vector<std::string> split_names(const std::string& csv) {
  std::vector<std::string> names;
  std::string name;
  std::istringstream in(csv);
  while (std::getline(in, name, ','))
    if (!name.empty()) names.push_back(name);
  return names;
}

constexpr double kPollSeconds = 0.02;

}  // namespace

std::string join_member_names(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ",") + n;
  return out;
}

GroupEpoch form_group_epoch(KeyValueStore& store, mirror::Clock& clock, const EpochRequest& r) {
  const double start = clock.now_s();
  store.set(epoch_key(r, "in/" + r.worker), "1");
  const bool registrar = store.add(epoch_key(r, "count"), 1) == 1;
  const std::string members_key = epoch_key(r, "members");
  if (registrar) {
    std::vector<std::string> present;
    for (;;) {
      present = {r.worker};
      bool waiting = false;
      for (const std::string& name : r.expected) {
        if (name == r.worker) continue;
        if (store.get(epoch_key(r, "in/" + name))) present.push_back(name);
        else waiting = waiting || !r.alive || r.alive(name);
      }
      if (!waiting || clock.now_s() - start >= r.window_s) break;
      clock.sleep_s(kPollSeconds);
    }
    std::sort(present.begin(), present.end());
    store.set_once(members_key, join_member_names(present));
  }
  for (;;) {
    if (std::optional<std::string> list = store.get(members_key)) {
      GroupEpoch group{r.epoch, split_names(*list), -1};
      const auto me = std::find(group.members.begin(), group.members.end(), r.worker);
      if (me == group.members.end())
        throw LeftOutOfGroup(str("group epoch ", r.epoch, " formed without ", r.worker, " (members ", *list,
                                 "): it registered after the window closed"));
      group.rank = static_cast<int>(me - group.members.begin());
      // Monotonic: a late reader of an older epoch never moves it back.
      if (group.rank == 0) {
        const std::optional<std::string> newest = store.get(r.run_id + "/epoch");
        if (!newest || std::stoull(*newest) < r.epoch) store.set(r.run_id + "/epoch", std::to_string(r.epoch));
      }
      return group;
    }
    if (clock.now_s() - start >= r.window_s + r.grace_s)
      throw EpochNotFormed(str("group epoch ", r.epoch, ": no member list after ", r.window_s + r.grace_s,
                               " s (its registrar died?)"));
    clock.sleep_s(kPollSeconds);
  }
}

std::optional<GroupEpoch> newest_group_epoch(KeyValueStore& store, const std::string& run_id) {
  const std::optional<std::string> epoch = store.get(run_id + "/epoch");
  if (!epoch) return std::nullopt;
  GroupEpoch group;
  group.epoch = std::stoull(*epoch);
  if (std::optional<std::string> list = store.get(str(run_id, "/e", group.epoch, "/members")))
    group.members = split_names(*list);
  return group;
}

}  // namespace gradbox::transport

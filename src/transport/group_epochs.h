#pragma once
// Who is in the network group, agreed through a strongly consistent store (key_value_store.h).
//
// Note [Group epochs]
// The group is formed in numbered epochs. Epoch e is formed by whoever registers for it:
//     <run>/e<e>/in/<worker>    set by each worker that enters epoch e
//     <run>/e<e>/count         incremented by each; the worker that makes it 1 is the registrar
//     <run>/e<e>/members       the sorted member list, set once by the registrar
// The registrar waits until every expected worker (the founders for epoch 0, the previous
// epoch's members after a failure) that is still alive has registered, or until the window has
// passed since it registered, then sets the list. Everyone waits for the list; a worker that is not in it is
// out of the group (it came too late). Because the store is one consistent object (a locked
// file), every worker reads the same list and two groups never form for one epoch: no fork,
// whatever the timing. <run>/epoch holds the newest epoch formed (for status and for joiners).
// A registrar that dies before setting the list leaves the others waiting until the window
// and a grace period pass; they then form epoch e+1.
// Torch-free: the protocol runs over any store and any clock (tests use a virtual one).
#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "mirror/clock.h"
#include "transport/key_value_store.h"

namespace gradbox::transport {

struct EpochRequest {
  std::string run_id;
  std::string worker;
  uint64_t epoch = 0;
  std::vector<std::string> expected;  // who the registrar waits for (need not include worker)
  // The registrar stops waiting for an expected worker that is not alive (a stale heartbeat);
  // empty: it waits for all of them.
  std::function<bool(const std::string&)> alive;
  double window_s = 10;               // the longest the registrar waits for them
  double grace_s = 10;                // how long past the window the others wait for the list
};

struct GroupEpoch {
  uint64_t epoch = 0;
  std::vector<std::string> members;  // sorted: a member's rank is its index
  int rank = -1;
};

// This worker is not in the epoch's list: it came too late.
class LeftOutOfGroup : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
// No list appeared in time (the registrar died): the next epoch is formed instead.
class EpochNotFormed : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Registers for request.epoch and returns the agreed group (see Note [Group epochs]).
GroupEpoch form_group_epoch(KeyValueStore& store, mirror::Clock& clock, const EpochRequest& request);

// The newest epoch formed in the store for run_id (nullopt before the first).
std::optional<GroupEpoch> newest_group_epoch(KeyValueStore& store, const std::string& run_id);

std::string join_member_names(const std::vector<std::string>& names);

}  // namespace gradbox::transport

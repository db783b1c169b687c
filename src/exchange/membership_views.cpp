#include "exchange/membership_views.h"

#include <algorithm>
#include <set>

#include "common/error.h"

namespace gradbox::exchange {
namespace {

std::string join_names(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ",") + n;
  return out.empty() ? "(none)" : out;
}

bool contains(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

}  // namespace

const std::vector<std::string>* MembershipViews::expected(uint64_t round) const {
  auto it = expected_.find(round);
  return it == expected_.end() ? nullptr : &it->second;
}

const std::vector<std::string>* MembershipViews::applied(uint64_t round) const {
  auto it = applied_.find(round);
  return it == applied_.end() ? nullptr : &it->second;
}

void MembershipViews::learn(uint64_t round, const wire::RoundView& view) {
  if (view.members_size() == 0) return;  // an agreement without a view (older writer)
  applied_[round] = {view.members().begin(), view.members().end()};
  if (view.next_members_size() > 0) expected_[round + 1] = {view.next_members().begin(), view.next_members().end()};
  while (applied_.size() > 4096) applied_.erase(applied_.begin());
  while (expected_.size() > 4) expected_.erase(expected_.begin());
}

std::vector<std::string> MembershipViews::next_view(uint64_t round, const std::vector<std::string>& members,
                                                    const std::vector<Contributor>& contributors,
                                                    const Heartbeats& beats,
                                                    const std::function<bool(const std::string&)>& refused) {
  std::set<std::string> next;
  // One whose partial Δ stood in missed the deadline, as one left out did (Note [Partial deltas]).
  for (const Contributor& c : contributors)
    if (!refused(c.worker) && !c.partial) next.insert(c.worker);
  for (const auto& [worker, beat] : beats.peers()) {
    if (beat.state == "left") next.erase(worker);
    else if (beat.state == "ready" && beats.fresh(beat) && beat.applied_round + 2 >= round && !refused(worker))
      next.insert(worker);
  }
  std::vector<std::string> view(next.begin(), next.end());
  if (view != members) {
    for (const std::string& w : view)
      if (!contains(members, w)) ++context_.stats.members_added;
    for (const std::string& w : members)
      if (!contains(view, w)) ++context_.stats.members_dropped;
    context_.log().info(str("round ", round + 1, " members: ", join_names(view), " (round ", round, ": ",
                            join_names(members), ")"));
  }
  return view;
}

}  // namespace gradbox::exchange

#pragma once
// Who is expected in which round (Note [Elastic membership] in folder_exchange.h): the views
// learned from shard-0 agreements (V_r and V_{r+1}), the members of the rounds applied (the
// checkpoint publishers' order), and how the shard-0 owner builds the next view. Torch-free;
// uses protobuf.
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "exchange/exchange_context.h"
#include "exchange/membership.h"
#include "exchange/round_agreement.h"

namespace gradbox::exchange {

class MembershipViews {
 public:
  explicit MembershipViews(ExchangeContext& context) : context_(context) {}

  void expect(uint64_t round, std::vector<std::string> members) { expected_[round] = std::move(members); }
  void forget_expected() { expected_.clear(); }  // follow until an agreement lets this worker in
  const std::vector<std::string>* expected(uint64_t round) const;
  const std::vector<std::string>* applied(uint64_t round) const;
  // A shard-0 agreement of `round` was applied: remember its members and the next view.
  void learn(uint64_t round, const wire::RoundView& view);

  // The shard-0 owner's V_{r+1}: the contributors of round r, less those that announced "left"
  // or are refused, plus followers whose fresh heartbeat says "ready" with a recent round.
  std::vector<std::string> next_view(uint64_t round, const std::vector<std::string>& members,
                                     const std::vector<Contributor>& contributors, const Heartbeats& beats,
                                     const std::function<bool(const std::string&)>& refused);

 private:
  ExchangeContext& context_;
  std::map<uint64_t, std::vector<std::string>> expected_;
  std::map<uint64_t, std::vector<std::string>> applied_;
};

}  // namespace gradbox::exchange

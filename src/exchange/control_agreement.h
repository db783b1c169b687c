#pragma once
// Live control through the agreements (Note [Live control] in folder_exchange.h): the shard-0
// owner proposes the control every replica switches to, and every replica learns the control
// in force from each shard-0 agreement. The control file itself is parsed in one place:
// LiveControl::parse (live_control.h). Torch-free; uses protobuf.
//
// Note [Slowing down before the upload cap]
// Drive refuses an account's uploads for the rest of the day once it has uploaded ~750 GB
// (--upload-cap-gb), which for a worker is as bad as dying. So a shard-0 owner whose uploads of
// the last hour (ExchangeContext::upload_pace_bytes_per_day) would come to kActFraction of its
// cap in a day proposes the control with grad_accum doubled: every round then carries twice
// the tokens for the same bytes, and the run's pace halves. It goes through the agreement like
// a hand edit of control.json, so every replica switches at the same round; it is not proposed
// again until a whole pace window has passed since the last change, so that the pace it judges
// by is the slowed one. Members upload about the same bytes a round (contributions; agreements
// by turns), so the owner's pace stands for everyone's. The codec cannot change mid-run, which
// leaves longer rounds as the one lever; a hand edit of control.json wins over it (and, if it
// drops grad_accum, is slowed down again an hour later when still too fast). Time-boxed rounds
// (--round-seconds) last their box whatever grad_accum is: there the owner only says so.
#include <cstdint>
#include <optional>
#include <string>

#include "exchange/exchange_context.h"
#include "exchange/gradient_exchange.h"

namespace gradbox::exchange {

class ControlAgreement {
 public:
  explicit ControlAgreement(ExchangeContext& context) : context_(context) {}

  // What the owner of round r's shard 0 writes: a change is proposed only when this worker's
  // mirror of control.json changed since it last looked, so an owner with an older mirror never
  // undoes a newer change, or when the upload pace nears the cap (Note [Slowing down before the
  // upload cap]). A change takes effect from round r + 2. Otherwise the control in force, or
  // nothing while this replica has not learned it (just restarted, its mirror of control.json
  // not there yet): repeating the flags' "{}" then would undo the run's control for everyone.
  std::optional<AgreedControl> propose(uint64_t round);
  static constexpr double kActFraction = 0.9;
  // The control a shard-0 agreement says is in force (nullopt: it says nothing).
  std::optional<AgreedControl> learn(const wire::RoundView& view);

 private:
  std::optional<AgreedControl> slow_down_for_upload_cap(uint64_t round);

  ExchangeContext& context_;
  AgreedControl agreed_;
  std::string text_seen_;
  bool known_ = false;  // agreed_ is the run's control: learned from an agreement (its owner's own too)
  double changed_at_s_ = -1e300;  // when this replica last learned (or proposed) a new control
  bool cannot_slow_warned_ = false;  // time-boxed rounds, or grad_accum at its most: said once
};

}  // namespace gradbox::exchange

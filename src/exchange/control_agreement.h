#pragma once
// Live control through the agreements (Note [Live control] in folder_exchange.h): the shard-0
// owner proposes the control every replica switches to, and every replica learns the control
// in force from each shard-0 agreement. The control file itself is parsed in one place:
// LiveControl::parse (live_control.h). Torch-free; uses protobuf.
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
  // undoes a newer change. A change takes effect from round r + 2.
  AgreedControl propose(uint64_t round);
  // The control a shard-0 agreement says is in force (nullopt: it says nothing).
  std::optional<AgreedControl> learn(const wire::RoundView& view);

 private:
  ExchangeContext& context_;
  AgreedControl agreed_;
  std::string text_seen_;
};

}  // namespace gradbox::exchange

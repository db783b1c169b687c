#include "exchange/control_agreement.h"

#include "common/error.h"
#include "exchange/live_control.h"

namespace gradbox::exchange {

AgreedControl ControlAgreement::propose(uint64_t round) {
  const std::optional<std::string> text = context_.mirror.control();
  if (!text || *text == text_seen_) return agreed_;
  text_seen_ = *text;
  try {
    const std::string json = LiveControl::parse(*text, kLiveControlFile).to_json().dump();
    if (json == agreed_.json) return agreed_;
    AgreedControl proposal{agreed_.version + 1, round + 2, json};
    context_.log().info(str("live control changed (", kLiveControlFile, "): ", json, " from round ", proposal.from_round));
    return proposal;
  } catch (const std::exception& e) {
    context_.log().error(str(e.what(), "; the control stays ", agreed_.json));
    return agreed_;
  }
}

std::optional<AgreedControl> ControlAgreement::learn(const wire::RoundView& view) {
  if (view.control_json().empty()) return std::nullopt;
  const AgreedControl control{view.control_version(), view.control_from_round(), view.control_json()};
  if (control.json != agreed_.json) ++context_.stats.control_changes;
  agreed_ = control;
  return control;
}

}  // namespace gradbox::exchange

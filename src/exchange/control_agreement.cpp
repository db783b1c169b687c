#include "exchange/control_agreement.h"

#include "common/error.h"
#include "exchange/live_control.h"

namespace gradbox::exchange {

std::optional<AgreedControl> ControlAgreement::propose(uint64_t round) {
  const std::optional<std::string> text = context_.mirror.control();
  if (text && *text != text_seen_) {
    text_seen_ = *text;
    try {
      const std::string json = LiveControl::parse(*text, kLiveControlFile).to_json().dump();
      if (json != agreed_.json) {
        AgreedControl proposal{agreed_.version + 1, round + 2, json};
        context_.log().info(str("live control changed (", kLiveControlFile, "): ", json, " from round ", proposal.from_round));
        changed_at_s_ = context_.clock.now_s();
        return proposal;
      }
    } catch (const std::exception& e) {
      context_.log().error(str(e.what(), "; the control stays ", agreed_.json));
    }
  }
  if (std::optional<AgreedControl> slower = slow_down_for_upload_cap(round)) return slower;
  if (!known_) return std::nullopt;
  return agreed_;
}

std::optional<AgreedControl> ControlAgreement::slow_down_for_upload_cap(uint64_t round) {
  const double cap = static_cast<double>(context_.config.upload_cap_bytes);
  const double now = context_.clock.now_s();
  if (cap <= 0 || now - changed_at_s_ < ExchangeContext::kUploadPaceWindowS) return std::nullopt;
  const std::optional<double> pace = context_.upload_pace_bytes_per_day();
  if (!pace || *pace < kActFraction * cap) return std::nullopt;
  LiveControl control = LiveControl::parse(agreed_.json, "the agreed control");
  const int64_t accum = control.grad_accum.value_or(context_.config.grad_accum);
  const std::string pace_text = str("uploads at this pace come to ", *pace / 1e9, " GB a day, ",
                                    static_cast<int>(100 * *pace / cap), "% of --upload-cap-gb ", cap / 1e9);
  // Time-boxed rounds last their box whatever grad_accum is; a box is set by a flag.
  const char* stuck = context_.config.round_seconds > 0 ? ", and time-boxed rounds are as long as --round-seconds: restart "
                                                          "with a longer box, a smaller codec or more accounts"
                      : accum * 2 > LiveControl::kMaxGradAccum ? ", and grad_accum is at its most: use a smaller codec or more accounts"
                                                               : nullptr;
  if (stuck) {
    if (!cannot_slow_warned_) context_.log().error(pace_text + stuck);
    cannot_slow_warned_ = true;
    return std::nullopt;
  }
  control.grad_accum = accum * 2;
  const AgreedControl proposal{agreed_.version + 1, round + 2, control.to_json().dump()};
  context_.log().warn(str(pace_text, ": grad_accum ", accum, " -> ", accum * 2, " from round ", proposal.from_round,
                          " (rounds twice as long, half the bytes per token)"));
  ++context_.stats.upload_cap_slowdowns;
  changed_at_s_ = now;
  return proposal;
}

std::optional<AgreedControl> ControlAgreement::learn(const wire::RoundView& view) {
  if (view.control_json().empty()) return std::nullopt;
  const AgreedControl control{view.control_version(), view.control_from_round(), view.control_json()};
  if (control.json != agreed_.json) {
    ++context_.stats.control_changes;
    changed_at_s_ = context_.clock.now_s();
  }
  agreed_ = control;
  known_ = true;
  return control;
}

}  // namespace gradbox::exchange

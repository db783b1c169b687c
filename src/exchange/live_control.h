#pragma once
// The run's live control file: control.json at the root of the shared folder, edited by hand
// while the run goes on, e.g. {"micro_batch": 8, "lr_multiplier": 0.5}. It is the one shared file
// changed in place; gradbox-sync mirrors it to <local>/inbox/control.json. Every key is
// optional: an absent key keeps the run's flag value. Torch- and protobuf-free.
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace gradbox::exchange {

// The name in the shared folder and in the inbox (the syncer knows it as syncer::kControlFile).
inline constexpr const char* kLiveControlFile = "control.json";

struct LiveControl {
  std::optional<int64_t> micro_batch, grad_accum;
  std::optional<double> lr_multiplier, weight_decay, dropout;
  static constexpr int64_t kMaxGradAccum = 65536;

  bool empty() const;
  bool operator==(const LiveControl&) const = default;
  // Only the keys that are set, in sorted order: equal controls give equal text.
  nlohmann::json to_json() const;
  // Throws InputError naming origin and key: an unknown key, a wrong type, a value out of range
  // (micro_batch and grad_accum 1..65536, lr_multiplier (0, 100], weight_decay [0, 10],
  // dropout [0, 1)).
  static LiveControl from_json(const nlohmann::json& j, const std::string& origin);
  // As from_json; text that is not JSON is an InputError naming origin too.
  static LiveControl parse(const std::string& text, const std::string& origin);
  // "micro_batch 8, lr_multiplier 0.5"; "nothing set" when empty.
  std::string describe() const;
};

// What changed between two controls, for logs: "lr_multiplier 1 -> 0.5, dropout (flag) -> 0.1"
// ("(flag)": not set, so the run's flag value applies); "no change" when equal.
std::string describe_change(const LiveControl& before, const LiveControl& after);

}  // namespace gradbox::exchange

#include "model/activation_checkpointing.h"

#include <algorithm>
#include <charconv>

#include "common/error.h"

namespace gradbox::model {

namespace {

constexpr const char* kFlag = "--activation-checkpointing";
constexpr const char* kKnown = "none, alternate, first_last, all, custom:<layer>[,<layer>...]";

int64_t parse_layer(const std::string& spec, const std::string& item) {
  int64_t value = -1;
  const char* end = item.data() + item.size();
  auto [ptr, ec] = std::from_chars(item.data(), end, value);
  GB_REQUIRE(!item.empty() && ec == std::errc() && ptr == end && value >= 0,
             kFlag, ": '", spec, "': layer '", item, "' is not a non-negative integer");
  return value;
}

}  // namespace

bool ActivationCheckpointing::applies_to(int64_t layer, int64_t n_layer) const {
  switch (strategy) {
    case CheckpointStrategy::none: return false;
    case CheckpointStrategy::alternate: return layer % 2 == 0;
    case CheckpointStrategy::first_last: return layer == 0 || layer == n_layer - 1;
    case CheckpointStrategy::all: return true;
    case CheckpointStrategy::custom:
      return std::binary_search(layers.begin(), layers.end(), layer);
  }
  return false;
}

void ActivationCheckpointing::validate(int64_t n_layer) const {
  if (strategy != CheckpointStrategy::custom) return;
  for (int64_t layer : layers) {
    GB_REQUIRE(layer < n_layer, kFlag, ": '", to_string(), "': layer ", layer,
               " does not exist (the model has ", n_layer, " layers: 0..", n_layer - 1, ")");
  }
}

ActivationCheckpointing ActivationCheckpointing::parse(const std::string& spec) {
  ActivationCheckpointing ac;
  if (spec == "none") return ac;
  if (spec == "alternate") {
    ac.strategy = CheckpointStrategy::alternate;
  } else if (spec == "first_last") {
    ac.strategy = CheckpointStrategy::first_last;
  } else if (spec == "all") {
    ac.strategy = CheckpointStrategy::all;
  } else if (spec.rfind("custom:", 0) == 0) {
    ac.strategy = CheckpointStrategy::custom;
    const std::string list = spec.substr(7);
    GB_REQUIRE(!list.empty(), kFlag, ": '", spec, "': custom needs a list of layers, e.g. custom:0,3,5");
    size_t begin = 0;
    while (true) {
      size_t comma = list.find(',', begin);
      ac.layers.push_back(parse_layer(spec, list.substr(begin, comma - begin)));
      if (comma == std::string::npos) break;
      begin = comma + 1;
    }
    std::sort(ac.layers.begin(), ac.layers.end());
    GB_REQUIRE(std::adjacent_find(ac.layers.begin(), ac.layers.end()) == ac.layers.end(),
               kFlag, ": '", spec, "': a layer is listed twice");
  } else {
    throw InputError(str(kFlag, ": unknown strategy '", spec, "' (known: ", kKnown, ")"));
  }
  return ac;
}

std::string ActivationCheckpointing::to_string() const {
  switch (strategy) {
    case CheckpointStrategy::none: return "none";
    case CheckpointStrategy::alternate: return "alternate";
    case CheckpointStrategy::first_last: return "first_last";
    case CheckpointStrategy::all: return "all";
    case CheckpointStrategy::custom: {
      std::string out = "custom:";
      for (size_t i = 0; i < layers.size(); ++i) {
        if (i > 0) out += ',';
        out += std::to_string(layers[i]);
      }
      return out;
    }
  }
  return "none";
}

}  // namespace gradbox::model

#pragma once
// Which transformer blocks recompute their activations in backward instead of keeping them.
// The source run found "alternate" (every other layer) the best balance of memory and speed;
// "all" roughly halves activation memory for about 30% more step time.
// No LibTorch here: the CLI and the trainer's config code parse it without torch.
#include <cstdint>
#include <string>
#include <vector>

namespace gradbox::model {

enum class CheckpointStrategy { none, alternate, first_last, all, custom };

struct ActivationCheckpointing {
  CheckpointStrategy strategy = CheckpointStrategy::none;
  std::vector<int64_t> layers;  // for custom: sorted, unique, >= 0

  // alternate: layers 0, 2, 4, ...; first_last: 0 and n_layer-1; custom: the listed layers.
  bool applies_to(int64_t layer, int64_t n_layer) const;
  // Throws InputError naming --activation-checkpointing when a custom layer is >= n_layer.
  void validate(int64_t n_layer) const;
  // "none" | "alternate" | "first_last" | "all" | "custom:0,3,5".
  static ActivationCheckpointing parse(const std::string& spec);
  std::string to_string() const;  // parse(to_string()) round-trips
};

}  // namespace gradbox::model

#pragma once
// Streaming DiLoCo's fragments (Note [Streaming fragments] in worker/outer_optimizer.h): the
// flat parameters cut into F groups that take turns to go through the exchange. Torch-free:
// a partition of the flat buffer's element ranges.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "worker/parameter_segment.h"

namespace gradbox::worker {

struct Fragment {
  std::vector<std::pair<int64_t, int64_t>> ranges;  // [begin, end) of the flat buffer, ascending
  int64_t numel = 0;
};

// f(begin of a range in the flat buffer, its length, its place in the fragment's concatenation),
// for each of the fragment's ranges in order.
template <typename F>
void for_each_range(const Fragment& fragment, F&& f) {
  int64_t at = 0;
  for (const auto& [begin, end] : fragment.ranges) {
    f(begin, end - begin, at);
    at += end - begin;
  }
}

// Layer l's parameters go to fragment l % F (a strided group of layers: each fragment spans the
// depth of the model, and a layer's tensors stay together); the others (embeddings, final norm,
// head) fill the fragments up to one level, largest first into the one with the most room,
// cut at an element where a tensor does not fit, so the fragments are as even as the layers
// allow (equal, to an element, when the others can fill the gaps). A model with fewer layers
// than F has all its tensors placed that way instead. Every element is in exactly one fragment.
std::vector<Fragment> partition_fragments(const std::vector<ParameterSegment>& segments, int64_t fragments);

// The layer a parameter belongs to: the first all-digit component of its name
// ("transformer.h.3.attn.c_attn.weight" -> 3); -1 for one outside the layers.
int64_t layer_of(const std::string& parameter_name);

}  // namespace gradbox::worker

#include "worker/fragments.h"

#include <algorithm>
#include <numeric>

#include "common/error.h"

namespace gradbox::worker {

int64_t layer_of(const std::string& parameter_name) {
  size_t start = 0;
  while (start <= parameter_name.size()) {
    const size_t end = std::min(parameter_name.find('.', start), parameter_name.size());
    const std::string part = parameter_name.substr(start, end - start);
    if (!part.empty() && part.size() < 10 && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return std::stoll(part);
    start = end + 1;
  }
  return -1;
}

std::vector<Fragment> partition_fragments(const std::vector<ParameterSegment>& segments, int64_t fragments) {
  GB_REQUIRE(fragments >= 1, "--fragments: must be >= 1, got ", fragments);
  std::vector<Fragment> out(static_cast<size_t>(fragments));
  int64_t layers = 0;
  for (const ParameterSegment& s : segments) layers = std::max(layers, layer_of(s.name) + 1);
  const bool by_layer = layers >= fragments;
  std::vector<const ParameterSegment*> others;
  for (const ParameterSegment& s : segments) {
    const int64_t layer = layer_of(s.name);
    if (layer < 0 || !by_layer) {
      others.push_back(&s);
      continue;
    }
    Fragment& f = out[static_cast<size_t>(layer % fragments)];
    f.ranges.emplace_back(s.offset, s.offset + s.numel);
    f.numel += s.numel;
  }
  std::stable_sort(others.begin(), others.end(),
                   [](const ParameterSegment* a, const ParameterSegment* b) { return a->numel > b->numel; });
  for (const ParameterSegment* s : others) {
    Fragment& smallest = *std::min_element(out.begin(), out.end(),
                                           [](const Fragment& a, const Fragment& b) { return a.numel < b.numel; });
    smallest.ranges.emplace_back(s->offset, s->offset + s->numel);
    smallest.numel += s->numel;
  }
  for (Fragment& f : out) {
    std::sort(f.ranges.begin(), f.ranges.end());
    // Neighbouring segments of one fragment become one range: fewer, longer copies.
    std::vector<std::pair<int64_t, int64_t>> merged;
    for (const auto& r : f.ranges) {
      if (!merged.empty() && merged.back().second == r.first) merged.back().second = r.second;
      else merged.push_back(r);
    }
    f.ranges = std::move(merged);
  }
  return out;
}

}  // namespace gradbox::worker

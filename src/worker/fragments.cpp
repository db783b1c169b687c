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

namespace {

// How many elements of the tensors outside the layers each fragment takes: the water level L
// with sum_f max(0, L - layers_f) = others, so the fragments end as even as the layers allow.
std::vector<int64_t> others_share(const std::vector<Fragment>& fragments, int64_t others) {
  auto need = [&](int64_t level) {
    int64_t sum = 0;
    for (const Fragment& f : fragments) sum += std::max<int64_t>(0, level - f.numel);
    return sum;
  };
  int64_t low = 0, high = others;
  for (const Fragment& f : fragments) high = std::max(high, f.numel + others);
  while (low < high) {  // the lowest level that holds them all
    const int64_t mid = low + (high - low) / 2;
    if (need(mid) >= others) high = mid;
    else low = mid + 1;
  }
  std::vector<int64_t> share;
  for (const Fragment& f : fragments) share.push_back(std::max<int64_t>(0, low - f.numel));
  // The integer level overshoots by less than one element per fragment below it: the last ones give it back.
  int64_t excess = need(low) - others;
  for (auto it = share.rbegin(); it != share.rend() && excess > 0; ++it)
    if (*it > 0) --*it, --excess;
  return share;
}

}  // namespace

std::vector<Fragment> partition_fragments(const std::vector<ParameterSegment>& segments, int64_t fragments) {
  GB_REQUIRE(fragments >= 1, "--fragments: must be >= 1, got ", fragments);
  std::vector<Fragment> out(static_cast<size_t>(fragments));
  int64_t layers = 0;
  for (const ParameterSegment& s : segments) layers = std::max(layers, layer_of(s.name) + 1);
  const bool by_layer = layers >= fragments;
  std::vector<const ParameterSegment*> others;
  int64_t others_numel = 0;
  for (const ParameterSegment& s : segments) {
    const int64_t layer = layer_of(s.name);
    if (layer < 0 || !by_layer) {
      others.push_back(&s);
      others_numel += s.numel;
      continue;
    }
    Fragment& f = out[static_cast<size_t>(layer % fragments)];
    f.ranges.emplace_back(s.offset, s.offset + s.numel);
    f.numel += s.numel;
  }
  // Largest first, each into the fragment with the most room left, cut where it does not fit:
  // a tied embedding (most of a small model, ~8% of GPT-2-Large) must not make one fragment's
  // round the burst that fragments exist to avoid.
  std::vector<int64_t> room = others_share(out, others_numel);
  std::stable_sort(others.begin(), others.end(),
                   [](const ParameterSegment* a, const ParameterSegment* b) { return a->numel > b->numel; });
  for (const ParameterSegment* s : others) {
    int64_t begin = s->offset;
    const int64_t end = s->offset + s->numel;
    while (begin < end) {
      const size_t p = static_cast<size_t>(std::max_element(room.begin(), room.end()) - room.begin());
      const int64_t take = std::min(end - begin, room[p]);
      GB_CHECK(take > 0, "fragment partition: no room left for ", s->name);
      out[p].ranges.emplace_back(begin, begin + take);
      out[p].numel += take;
      room[p] -= take;
      begin += take;
    }
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

#include "transport/round_plan.h"

#include <algorithm>

#include "common/checksum.h"
#include "common/error.h"

namespace gradbox::transport {

RoundPlan plan_round(size_t n, const std::vector<exchange::Span>& parts, size_t bucket_floats) {
  GB_CHECK(bucket_floats > 0, "round plan: zero bucket size");
  RoundPlan plan;
  plan.n = n;
  plan.part_buckets.resize(parts.size());
  std::vector<bool> covered(parts.size(), false);
  size_t total = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    const exchange::Span part = parts[i];
    GB_CHECK(part.begin <= part.end && part.end <= n, "round plan: part ", i, " [", part.begin, ", ", part.end,
             ") is outside [0, ", n, ")");
    total += part.end - part.begin;
    for (size_t begin = part.begin; begin < part.end; begin += bucket_floats) {
      const exchange::Span chunk{begin, std::min(part.end, begin + bucket_floats)};
      exchange::Span* last = plan.buckets.empty() ? nullptr : &plan.buckets.back();
      const size_t merged = last ? std::max(last->end, chunk.end) - std::min(last->begin, chunk.begin) : 0;
      const bool contiguous = last && (last->end == chunk.begin || chunk.end == last->begin);
      if (contiguous && merged <= bucket_floats) {
        *last = {std::min(last->begin, chunk.begin), std::max(last->end, chunk.end)};
        ++plan.chunks_in_bucket.back();
      } else {
        plan.buckets.push_back(chunk);
        plan.chunks_in_bucket.push_back(1);
      }
      plan.part_buckets[i].push_back(plan.buckets.size() - 1);
    }
  }
  // Parts that tile [0, n): their lengths add up to n and no two overlap.
  std::vector<exchange::Span> sorted = parts;
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < sorted.size(); ++i)
    GB_CHECK(sorted[i - 1].end <= sorted[i].begin, "round plan: parts overlap at ", sorted[i].begin);
  GB_CHECK(total == n, "round plan: the parts cover ", total, " of ", n, " elements");
  std::vector<uint64_t> words{n};
  for (const exchange::Span& b : plan.buckets) words.insert(words.end(), {b.begin, b.end});
  plan.fingerprint = static_cast<uint32_t>(checksum64(words.data(), words.size() * sizeof(uint64_t)) & 0xffffu);
  return plan;
}

RoundPlan plan_round(size_t n, size_t bucket_floats) { return plan_round(n, {exchange::Span{0, n}}, bucket_floats); }

}  // namespace gradbox::transport

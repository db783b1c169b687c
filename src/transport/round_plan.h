#pragma once
// Note [Round plan]
// How one round of the network transport cuts the caller's vector into buckets, and in what
// order it all-reduces them. Every member must issue the same collectives in the same order
// (a collective of rank a meeting another bucket of rank b sums unrelated bytes, silently), so
// the order is fixed up front, never by which bucket happens to be ready first:
//   - the caller gives parts, ranges of its vector in the order it expects them to be final
//     (for a per-step gradient: its parameters, last layer first, as backward finishes them);
//   - a part longer than a bucket is cut in bucket-sized chunks; adjacent chunks are merged
//     while contiguous and within the bucket size, so a bucket is one collective over one range;
//   - buckets are all-reduced in plan order, each once it and every bucket before it are ready.
// A bucket that becomes ready early waits for the ones before it (DDP does the same); the
// expected order only decides how much of the traffic overlaps backward, never what is summed.
// Members compare a fingerprint of their plans in the round's header (network_exchange.h).
// Torch-free.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "exchange/gradient_exchange.h"

namespace gradbox::transport {

struct RoundPlan {
  size_t n = 0;
  std::vector<exchange::Span> buckets;              // in all-reduce order
  std::vector<std::vector<size_t>> part_buckets;    // part i → the buckets it has a chunk in (repeats allowed)
  std::vector<size_t> chunks_in_bucket;             // how many parts' chunks each bucket waits for
  uint32_t fingerprint = 0;                         // 16 bits of the plan's checksum, for the header
};

// `parts` must tile [0, n) (checked: a bad tiling is a bug in the caller).
RoundPlan plan_round(size_t n, const std::vector<exchange::Span>& parts, size_t bucket_floats);
// The plan of a vector with no parts: [0, n) in ascending buckets.
RoundPlan plan_round(size_t n, size_t bucket_floats);

}  // namespace gradbox::transport

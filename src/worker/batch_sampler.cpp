#include "worker/batch_sampler.h"

#include "common/error.h"

namespace gradbox::worker {
namespace {

// splitmix64: a tiny, well-mixed counter-based generator.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

uint64_t stream_id(const std::string& name) {
  uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a, then mixed
  for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ULL;
  return mix(h);
}

BatchSampler::BatchSampler(const data::TokenFile& file, int64_t block_size, uint64_t seed, uint64_t stream)
    : file_(file), block_size_(block_size), seed_(seed), stream_(stream) {
  GB_CHECK(block_size >= 1, "block_size ", block_size);
  GB_REQUIRE(file.size() > block_size, "token file holds ", file.size(), " tokens, fewer than block_size + 1 = ",
             block_size + 1, ": prepare more text or lower --block-size");
}

Batch BatchSampler::batch(int64_t index, int64_t batch_size, int64_t block) const {
  if (block == 0) block = block_size_;
  GB_CHECK(block >= 1 && block <= block_size_, "block ", block, " outside [1, ", block_size_, "]");
  const int64_t span = block + 1;
  const uint64_t positions = static_cast<uint64_t>(file_.size() - span + 1);
  torch::Tensor rows = torch::empty({batch_size, span}, torch::kInt64);
  int64_t* out = rows.data_ptr<int64_t>();
  for (int64_t row = 0; row < batch_size; ++row) {
    const uint64_t key = mix(mix(mix(seed_ ^ stream_) + static_cast<uint64_t>(index)) + static_cast<uint64_t>(row));
    file_.read(static_cast<int64_t>(key % positions), span, out + row * span);
  }
  return {rows.narrow(1, 0, block), rows.narrow(1, 1, block)};
}

}  // namespace gradbox::worker

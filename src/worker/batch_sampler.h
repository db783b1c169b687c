#pragma once
// Random windows of block_size + 1 tokens from a token file, as nanoGPT samples them, but
// counter-based: the rows of batch `index` depend only on (seed, stream, index). Resuming at
// step s therefore replays exactly the batches an uninterrupted run would have seen, with no
// sampler state to save, and each worker gets its own stream without any coordination.
#include <torch/torch.h>

#include <cstdint>

#include "data/token_dataset.h"

namespace gradbox::worker {

struct Batch {
  torch::Tensor inputs;   // (B, T) int64
  torch::Tensor targets;  // (B, T) int64: inputs shifted by one token
};

class BatchSampler {
 public:
  // Throws InputError naming the file when it holds fewer than block_size + 1 tokens.
  BatchSampler(const data::TokenFile& file, int64_t block_size, uint64_t seed, uint64_t stream);

  // Rows of `block` tokens (0: block_size(); at most block_size(): a curriculum's shorter
  // sequences, Note [Curriculum] in worker/curriculum.h).
  Batch batch(int64_t index, int64_t batch_size, int64_t block = 0) const;
  int64_t block_size() const { return block_size_; }

 private:
  const data::TokenFile& file_;
  int64_t block_size_;
  uint64_t seed_;
  uint64_t stream_;
};

// A stable 64-bit hash of a name (a worker's name picks its data stream).
uint64_t stream_id(const std::string& name);

}  // namespace gradbox::worker

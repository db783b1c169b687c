#pragma once
// Note [Memory plan]
// What a training step keeps alive, part by part, from the model's shape and the run's options,
// so that a user learns whether GPT-2-Large fits a 15 GB T4 before a session's hour is spent
// finding out (`gradbox train ... --memory-report`). The model, per part:
//   - fp32 master parameters, fp32 flat gradients: 4 bytes each per parameter;
//   - optimizer state: AdamW and LAMB two fp32 moments (8 bytes), with --moments int8 two codes
//     and per-256 block ranges (2.06 bytes; Note [8-bit moments]), SGD none;
//   - autocast's 16-bit copies of the weights, cached for the step on CUDA: 2 bytes;
//   - activations kept for backward, per token and layer, in the compute dtype: GPT-2 16 x
//     n_embd (ln_1 in and out, qkv, attention out, ln_2 in and out, fc out, gelu out); LLaMA
//     7 x n_embd + 3 x kv_dim + 4 x ffn (norms, q, k, v and their rotations, attention out, gate,
//     up, silu, product). Fused attention (SDPA) keeps no T x T scores. A checkpointed layer
//     keeps only its input, plus one layer's full set while it is recomputed;
//   - the LM head: 12 bytes per token x vocabulary unchunked (the logits, their fp32 softmax,
//     its gradient); chunked (Note [Chunked LM head]), chunk x vocabulary x 8 plus the saved
//     gradients of the hidden states and of the head's weight;
//   - on the host (with a GPU; on the CPU everything is): DiLoCo's outer state (global weights and momentum, 8 bytes), and the host
//     copies of a GPU's gradient the exchange works on (4 bytes; twice with --overlap).
// Not counted: the CUDA context (~0.3-0.5 GB) and the allocator's fragmentation, which the
// verdict leaves 10% of the device for. Torch-free.
#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"
#include "worker/train_config.h"

namespace gradbox::worker {

struct MemoryPlanInputs {
  model::ModelConfig model;
  int64_t micro_batch = 1;
  int64_t block_size = 1024;
  bool cuda = false;
  Precision precision = Precision::fp32;  // resolved
  OptimizerKind optimizer = OptimizerKind::adamw;
  MomentStorage moments = MomentStorage::fp32;
  int64_t checkpointed_layers = 0;
  int64_t lm_head_chunk = 0;
  bool diloco = false;
  bool exchange = false;  // a many-worker run (host copies of the gradient on CUDA)
  bool overlap = false;
};

struct MemoryPart {
  std::string name;
  double bytes = 0;
  bool on_device = true;
};

struct MemoryPlan {
  std::vector<MemoryPart> parts;
  double device_bytes = 0;
  double host_bytes = 0;
};

MemoryPlan plan_memory(const MemoryPlanInputs& in);
// The table, and against `capacity_bytes` of `device` (0: unknown) whether it fits, with the
// options that would shrink the largest parts when it does not.
std::string format_memory_plan(const MemoryPlan& plan, const MemoryPlanInputs& in, double capacity_bytes,
                               const std::string& device);
bool memory_plan_fits(const MemoryPlan& plan, double capacity_bytes);

}  // namespace gradbox::worker

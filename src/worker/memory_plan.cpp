#include "worker/memory_plan.h"

#include <cstdio>

#include "common/error.h"
#include "kernels/adamw_q8.h"

namespace gradbox::worker {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr double kHeadroom = 0.9;  // of the device, for the allocator's fragmentation

double activation_floats_per_token_layer(const model::ModelConfig& m) {
  if (m.arch == model::Arch::gpt2) return 16.0 * static_cast<double>(m.n_embd);
  return 7.0 * static_cast<double>(m.n_embd) + 3.0 * static_cast<double>(m.kv_dim()) +
         4.0 * static_cast<double>(m.ffn_dim());
}

}  // namespace

MemoryPlan plan_memory(const MemoryPlanInputs& in) {
  const double p = static_cast<double>(in.model.parameter_count());
  const double tokens = static_cast<double>(in.micro_batch * in.block_size);
  const bool half = in.cuda && (in.precision == Precision::fp16 || in.precision == Precision::bf16);
  const double act_bytes = half ? 2.0 : 4.0;
  const double vocab = static_cast<double>(in.model.vocab_size);
  const double embd = static_cast<double>(in.model.n_embd);
  MemoryPlan plan;
  auto add = [&](std::string name, double bytes, bool on_device = true) {
    if (bytes <= 0) return;
    on_device = on_device || !in.cuda;  // on the CPU the host is the device
    plan.parts.push_back({std::move(name), bytes, on_device});
    (on_device ? plan.device_bytes : plan.host_bytes) += bytes;
  };
  add("parameters (fp32 master)", 4 * p);
  add("gradients (fp32, flat)", 4 * p);
  if (in.optimizer != OptimizerKind::sgd && in.moments == MomentStorage::int8)
    add("optimizer moments (2 x int8, a range per 256)",
        static_cast<double>(kernels::q8_moment_bytes(in.model.parameter_count())));
  else
    add(in.optimizer == OptimizerKind::sgd ? "optimizer state (none)" : "optimizer moments (2 x fp32)",
        in.optimizer == OptimizerKind::sgd ? 0 : 8 * p);
  if (half) add("autocast's 16-bit weight copies", 2 * p);
  const double per_layer = tokens * activation_floats_per_token_layer(in.model) * act_bytes;
  const int64_t layers = in.model.n_layer;
  const int64_t checkpointed = std::min(in.checkpointed_layers, layers);
  add("activations of " + std::to_string(layers - checkpointed) + " layers kept for backward",
      static_cast<double>(layers - checkpointed) * per_layer);
  if (checkpointed > 0)
    add("activations of " + std::to_string(checkpointed) + " checkpointed layers (inputs, one recomputed)",
        static_cast<double>(checkpointed) * tokens * embd * act_bytes + per_layer);
  if (in.lm_head_chunk > 0) {
    const double rows = std::min(static_cast<double>(in.lm_head_chunk), tokens);
    add("LM head, chunked (" + std::to_string(in.lm_head_chunk) + " rows of logits, saved gradients)",
        rows * vocab * 8 + tokens * embd * 4 + vocab * embd * 4);
  } else {
    add("LM head logits, fp32 softmax and gradient (unchunked)", tokens * vocab * 12);
  }
  if (in.diloco) add("DiLoCo outer state (global weights, momentum)", 8 * p, false);
  if (in.exchange && in.cuda) add("host copies of the gradient for the exchange", (in.overlap ? 8 : 4) * p, false);
  return plan;
}

bool memory_plan_fits(const MemoryPlan& plan, double capacity_bytes) {
  return capacity_bytes <= 0 || plan.device_bytes <= kHeadroom * capacity_bytes;
}

std::string format_memory_plan(const MemoryPlan& plan, const MemoryPlanInputs& in, double capacity_bytes,
                               const std::string& device) {
  std::string out = str("memory plan: ", in.model.parameter_count() / 1'000'000, "M parameters, micro-batch ",
                        in.micro_batch, " x block ", in.block_size, ", ", to_string(in.precision), " on ", device, "\n");
  char line[160];
  for (const MemoryPart& part : plan.parts) {
    std::snprintf(line, sizeof line, "  %-70s %8.2f GiB%s\n", part.name.c_str(), part.bytes / kGiB,
                  part.on_device ? "" : "  (host)");
    out += line;
  }
  std::snprintf(line, sizeof line, "  %-70s %8.2f GiB\n", str("total on ", device).c_str(), plan.device_bytes / kGiB);
  out += line;
  if (plan.host_bytes > 0) {
    std::snprintf(line, sizeof line, "  %-70s %8.2f GiB\n", "total on the host", plan.host_bytes / kGiB);
    out += line;
  }
  if (capacity_bytes <= 0) return out;
  const bool fits = memory_plan_fits(plan, capacity_bytes);
  std::snprintf(line, sizeof line, "  %s: %.2f GiB of %.2f GiB usable (90%% of %.2f GiB)\n", fits ? "fits" : "DOES NOT FIT",
                plan.device_bytes / kGiB, kHeadroom * capacity_bytes / kGiB, capacity_bytes / kGiB);
  out += line;
  if (!fits) {
    out += "  to shrink it:";
    if (in.lm_head_chunk <= 0) out += " --lm-head-chunk 256;";
    if (in.checkpointed_layers < in.model.n_layer) out += " --activation-checkpointing all;";
    if (in.micro_batch > 1) out += " a smaller --micro-batch with --grad-accum;";
    if (in.optimizer != OptimizerKind::sgd && in.moments == MomentStorage::fp32)
      out += " --moments int8 (the moments take 2 bytes a parameter instead of 8);";
    out += "\n";
  }
  return out;
}

}  // namespace gradbox::worker

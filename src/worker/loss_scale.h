#pragma once
// Note [Mixed precision]
// --precision auto: bf16 autocast on Ampere and newer GPUs, fp16 autocast with this dynamic
// loss scale on older ones (a T4, compute 7.5, has no bf16 tensor cores), fp32 on the CPU.
// YaLM's fp32 islands, and who keeps each:
//   - norms (LayerNorm, RMSNorm), softmax, log_softmax and nll_loss (the cross-entropy): LibTorch's
//     CUDA autocast policy runs them in fp32 (AT_FORALL_FP32 and AT_FORALL_FP32_SET_OPT_DTYPE in
//     the wheel's ATen/autocast_mode.h: layer_norm, rms_norm, softmax, log_softmax, nll_loss,
//     sum). CPU autocast does not (measured: bf16 out), and needs not here: see the next line.
//   - residual additions: gradbox's own. The embeddings are fp32 and x + f(x) promotes a 16-bit
//     f(x) to fp32, so the residual stream, and with it every norm's input, stays fp32 on any
//     device (tests/model/mixed_precision_test.cpp).
//   - the attention softmax: inside scaled_dot_product_attention, whose flash and
//     memory-efficient kernels accumulate in fp32 (not measured here: no GPU).
//   - the LM head's softmax and cross-entropy with --lm-head-chunk: in fp32 by construction
//     (Note [Chunked LM head]).
//   - the gradient reduction and the optimizer: fp32 master weights, gradients, moments and
//     exchange arithmetic throughout.
// The loss scale's rule is the same on every replica and runs on what replicas agree on: a
// round that any contributor overflowed is skipped by all (RoundResult::skip) and halves every
// scale; a round applied grows every replica's count of good steps. Per-step replicas therefore
// hold the same scale at every round, and a joiner takes it from the checkpoint it loads. Torch-free.
#include <cstdint>

namespace gradbox::worker {

class LossScaler {
 public:
  static constexpr double kInitialFp16 = 65536;  // 2^16, as torch.amp.GradScaler starts
  static constexpr int64_t kGrowthInterval = 2000;
  static constexpr double kMin = 1.0, kMax = 16777216;  // 2^24

  explicit LossScaler(bool dynamic) : dynamic_(dynamic), scale_(dynamic ? kInitialFp16 : 1.0) {}

  double scale() const { return scale_; }
  int64_t good_steps() const { return good_steps_; }
  bool dynamic() const { return dynamic_; }
  // A step (or agreed round) skipped for a non-finite gradient: back off.
  void overflowed();
  // A step (or agreed round) applied.
  void applied();
  void restore(double scale, int64_t good_steps);  // from a checkpoint

 private:
  bool dynamic_ = false;
  double scale_ = 1.0;
  int64_t good_steps_ = 0;
};

}  // namespace gradbox::worker

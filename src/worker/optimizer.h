#pragma once
// AdamW, LAMB and plain SGD over FlatParameters (see Note [Flat parameters]). On CPU the fused kernels of
// src/kernels run over thread-parallel ranges; on other devices the same update is a handful of
// whole-buffer tensor ops.
#include <torch/torch.h>

#include "worker/flat_parameters.h"
#include "worker/train_config.h"

namespace gradbox::worker {

// fused_cpu: src/kernels loops on thread-parallel ranges (CPU tensors only).
// tensor_ops: whole-buffer LibTorch ops, for GPUs; also the reference the fused path is tested against.
enum class OptimizerBackend { automatic, fused_cpu, tensor_ops };

struct OptimizerHyper {
  OptimizerKind kind = OptimizerKind::adamw;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
};

class Optimizer {
 public:
  Optimizer(FlatParameters& flat, OptimizerHyper hyper, OptimizerBackend backend = OptimizerBackend::automatic);

  // One update from the gradients in flat.grads(), each first multiplied by grad_scale
  // (clipping and loss-scale unscaling folded into one factor). Weight decay applies to the
  // decayed range only.
  void step(double lr, double weight_decay, double grad_scale);

  int64_t step_count() const { return step_; }
  const OptimizerHyper& hyper() const { return hyper_; }

  // State for checkpoints: the moments as flat buffers, and the step count.
  torch::Tensor& exp_avg() { return exp_avg_; }
  torch::Tensor& exp_avg_sq() { return exp_avg_sq_; }
  void set_step_count(int64_t step) { step_ = step; }

 private:
  void sgd(double lr, double weight_decay, double grad_scale);  // no state; for exactness checks
  void adamw_cpu(float lr, float weight_decay, float grad_scale);
  void adamw_tensor_ops(double lr, double weight_decay, double grad_scale);
  void lamb_cpu(double lr, double weight_decay, double grad_scale);
  void lamb_tensor_ops(double lr, double weight_decay, double grad_scale);

  FlatParameters& flat_;
  OptimizerHyper hyper_;
  bool fused_ = false;
  torch::Tensor exp_avg_;
  torch::Tensor exp_avg_sq_;
  torch::Tensor lamb_update_;  // scratch, LAMB only
  int64_t step_ = 0;
};

// Global L2 norm of all gradients, as a double (one reduction over the flat buffer).
double gradient_norm(const FlatParameters& flat);

}  // namespace gradbox::worker

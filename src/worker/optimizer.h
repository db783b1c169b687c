#pragma once
// AdamW, LAMB and plain SGD over FlatParameters (see Note [Flat parameters]). On CPU the fused kernels of
// src/kernels run over thread-parallel ranges; on other devices the same update is a handful of
// whole-buffer tensor ops.
#include <torch/torch.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "kernels/adamw_q8.h"
#include "worker/flat_parameters.h"
#include "worker/train_config.h"

namespace gradbox::worker {

// fused_cpu: src/kernels loops on thread-parallel ranges (CPU tensors only).
// tensor_ops: whole-buffer LibTorch ops, for GPUs; also the reference the fused path is tested against.
// automatic: fused_cpu on the CPU; on CUDA, int8 moments take the fused CUDA kernel where it was
// built (GRADBOX_CUDA_KERNELS), everything else tensor_ops.
enum class OptimizerBackend { automatic, fused_cpu, tensor_ops };

struct OptimizerHyper {
  OptimizerKind kind = OptimizerKind::adamw;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  MomentStorage moments = MomentStorage::fp32;  // int8: AdamW only (Note [8-bit moments])
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

  // The moments as checkpoints keep them, named CPU tensors: fp32 storage as "exp_avg" and
  // "exp_avg_sq"; int8 storage as its codes and block ranges ("exp_avg.q8_codes", ".q8_lo",
  // ".q8_hi", the same for exp_avg_sq), so that a resumed run goes on bit for bit and the
  // moments take a quarter of the bytes.
  using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;
  NamedTensors moment_tensors() const;
  // Loads either form into either storage (decoding or encoding across). The tensors come from
  // a file: InputError naming `where` when they are missing, mis-sized, mistyped or not finite.
  void load_moment_tensors(const std::map<std::string, torch::Tensor>& tensors, const std::string& where);
  // The moments as fp32 flat buffers (int8 storage decoded into new CPU tensors), and loading
  // them (int8 storage encoded).
  struct Moments {
    torch::Tensor exp_avg, exp_avg_sq;
  };
  Moments moments() const;
  void load_moments(const torch::Tensor& exp_avg, const torch::Tensor& exp_avg_sq);
  // The fp32 moments themselves (fp32 storage only: the DiLoCo emulation swaps replicas' in).
  torch::Tensor& exp_avg();
  torch::Tensor& exp_avg_sq();
  void set_step_count(int64_t step) { step_ = step; }
  // Bytes the moments take on their device.
  int64_t moment_bytes() const;

 private:
  kernels::AdamWStep adamw_step(float lr, float weight_decay, float grad_scale) const;  // this step's scalars
  void sgd(double lr, double weight_decay, double grad_scale);  // no state; for exactness checks
  void adamw_cpu(float lr, float weight_decay, float grad_scale);
  void adamw_tensor_ops(double lr, double weight_decay, double grad_scale);
  void adamw_q8_cpu(float lr, float weight_decay, float grad_scale);
  void adamw_q8_tensor_ops(double lr, double weight_decay, double grad_scale);
  void adamw_q8_cuda(float lr, float weight_decay, float grad_scale);
  void lamb_cpu(double lr, double weight_decay, double grad_scale);
  void lamb_tensor_ops(double lr, double weight_decay, double grad_scale);

  FlatParameters& flat_;
  OptimizerHyper hyper_;
  bool fused_ = false;
  bool cuda_kernel_ = false;  // int8 moments on CUDA with the fused kernel (kernels/adamw_q8_cuda.h)
  torch::Tensor exp_avg_;     // fp32 storage
  torch::Tensor exp_avg_sq_;
  // int8 storage (Note [8-bit moments]): codes (uint8, one a parameter) and per-block log2
  // ranges (fp32), for m and v.
  struct Q8State {
    torch::Tensor codes, lo, hi;
  };
  Q8State m_q8_, v_q8_;
  torch::Tensor lamb_update_;  // scratch, LAMB only
  int64_t step_ = 0;
};

// Note [8-bit moments] with tensor ops, on any device: values [begin, begin + len) decoded from
// codes and per-block ranges, and encoded into them (begin on a block boundary).
torch::Tensor q8_decode_range(const torch::Tensor& codes, const torch::Tensor& lo, const torch::Tensor& hi,
                              int64_t begin, int64_t len, kernels::Q8Sign sign);
void q8_encode_range(const torch::Tensor& values, torch::Tensor& codes, torch::Tensor& lo, torch::Tensor& hi,
                     int64_t begin, kernels::Q8Sign sign);

// Global L2 norm of all gradients, as a double (one reduction over the flat buffer).
double gradient_norm(const FlatParameters& flat);

}  // namespace gradbox::worker

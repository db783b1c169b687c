#pragma once
// Note [Flat parameters]
// All trainable parameters of a model live in one contiguous fp32 buffer, and their gradients
// in a second one; every parameter (and its .grad) is a view into them. This is what DDP calls
// "gradient as bucket view", taken to its end:
//  - the optimizer is one fused pass over memory instead of a loop over ~150 tensors;
//  - clipping needs one norm, zeroing one memset;
//  - the gradient exchange ships one blob, and its element ranges are stable across workers.
// Parameters that get weight decay come first, so decay is a single range [0, decay_numel).
#include <torch/torch.h>

#include <functional>
#include <string>
#include <vector>

#include "worker/parameter_segment.h"

namespace gradbox::worker {

class FlatParameters {
 public:
  // Moves every parameter of `model` into the flat buffers (on the parameters' device).
  // The model must not be moved to another device afterwards.
  FlatParameters(torch::nn::Module& model, const std::function<bool(const std::string&)>& is_no_decay);

  torch::Tensor& params() { return params_; }
  torch::Tensor& grads() { return grads_; }
  const torch::Tensor& params() const { return params_; }
  const torch::Tensor& grads() const { return grads_; }
  const std::vector<ParameterSegment>& segments() const { return segments_; }
  int64_t numel() const { return params_.numel(); }
  int64_t decay_numel() const { return decay_numel_; }

  void zero_grad() { grads_.zero_(); }

 private:
  torch::Tensor params_;
  torch::Tensor grads_;
  std::vector<ParameterSegment> segments_;
  int64_t decay_numel_ = 0;
};

}  // namespace gradbox::worker

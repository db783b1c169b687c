#pragma once
// Causal self-attention over already projected heads, shared by both architectures.
#include <torch/torch.h>

namespace gradbox::model {

// q (B, nh, T, hs), k and v (B, nkv, T, hs) with nkv dividing nh -> (B, nh, T, hs).
// Goes through at::scaled_dot_product_attention with is_causal, so GPUs get the flash or
// memory-efficient kernels. dropout_p applies to the attention weights; pass 0 outside training.
torch::Tensor causal_attention(const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, double dropout_p);

}  // namespace gradbox::model

#pragma once
// Note [Chunked LM head]
// The LM head and its cross-entropy are the largest tensors of a step at GPT-2's vocabulary:
// (B*T) x 50,257 logits, then an fp32 copy for the softmax, then their gradient, all alive at
// once (at block 1024 x micro-batch 4 that is 0.8 GB per copy in fp32). Here they are made a
// block of `chunk_rows` rows at a time, and each block's gradient is taken in the same pass:
// the gradient of mean cross-entropy with respect to a row of logits is
// (softmax(row) - onehot(target)) / N, known as soon as the row's log-sum-exp is. So forward
// leaves only d(loss)/d(hidden) (N x C) and d(loss)/d(weight) (V x C, fp32), and backward
// scales them by the incoming gradient. Peak memory for the head: chunk_rows x V in fp32,
// instead of about three N x V tensors. The softmax and the sum run in fp32 whatever autocast
// does to the two matmuls (YaLM's fp32 island at the output).
// Bias-free heads only (GPT-2's and LLaMA's); every target must be a valid id.
//
// Note [Head gradient into the kept .grad]
// Handed back to autograd, d(loss)/d(weight) is a fresh V x C tensor every step (154 MB at
// GPT-2's vocabulary; on the CPU, with no caching allocator, fresh pages faulted and zeroed),
// then added to a tied embedding's gradient into another fresh one, then added into .grad.
// When the weight's .grad is a kept fp32 buffer (FlatParameters) and the caller keeps a
// V x C buffer for the head, forward fills that buffer and backward adds it, scaled, straight
// into .grad, as Megatron-LM's gradient-accumulation fusion does: no allocation, one pass.
// Autograd gets no gradient for the weight; its post-accumulate hooks (which streamed rounds
// use) still run once per backward.
#include <torch/torch.h>

namespace gradbox::model {

// Mean cross-entropy of linear(hidden, weight) against targets, chunk_rows rows at a time.
// hidden (..., C), weight (V, C), targets (...) int64 with hidden's leading shape.
// Gradients flow to hidden and weight; without grad mode only the loss is computed.
// `kept_grad` (optional): the caller's buffer for Note [Head gradient into the kept .grad],
// (re)allocated here to the weight's shape; used only while weight.grad() is a dense fp32
// tensor. A loss made with it can be differentiated once.
torch::Tensor chunked_lm_loss(const torch::Tensor& hidden, const torch::Tensor& weight, const torch::Tensor& targets,
                              int64_t chunk_rows, torch::Tensor* kept_grad = nullptr);

}  // namespace gradbox::model

#pragma once
// Activation checkpointing of one transformer block.
//
// Note [Activation checkpointing]
// checkpoint(fn, x) runs fn(x) without recording a graph, so none of fn's activations stay
// alive; only x is kept. In backward it reruns fn(x) with gradients on and backpropagates the
// incoming gradient through that rerun: the parameters fn uses get their .grad there (reentrant
// backward, like torch.utils.checkpoint with use_reentrant=True), and x gets its gradient from
// it. The rerun must compute exactly what the first run did, so the CPU RNG state (and the CUDA
// one of x's device) and the autocast state of the first run are restored around it; dropout
// masks are then identical, and so are the gradients, bit for bit on the CPU. The global RNG is
// put back afterwards, so checkpointing does not change the random stream the rest sees.
// Costs: one more forward per checkpointed block; saves all of its activations but x.
#include <torch/torch.h>

#include <functional>

namespace gradbox::model {

using BlockFn = std::function<torch::Tensor(const torch::Tensor&)>;

// fn must be a pure function of x and of module state that stays alive until backward.
// Without gradient recording, or when x does not require a gradient (then the rerun could not
// reach fn's parameters), it simply returns fn(x).
torch::Tensor checkpoint(const BlockFn& fn, const torch::Tensor& x);

}  // namespace gradbox::model

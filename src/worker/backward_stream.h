#pragma once
// Note [Backward overlap]
// A per-step round over a network need not wait for backward to end: DDP all-reduces buckets
// of the gradient while backward still computes the layers below them. gradbox does the same
// on its flat gradient (Note [Flat parameters]):
//   - every parameter is a part of the round, a range of the flat gradient; the parts go to the
//     exchange in the order backward is expected to finish them: each parameter group (decayed,
//     then not decayed) from its last parameter to its first, the reverse of the model's order;
//   - a post-accumulate-grad hook on each parameter (autograd runs it once per backward, when
//     the parameter's .grad is final, tied weights included) reports its part ready;
//   - the exchange (exchange::StreamedRound) groups parts into buckets and starts each bucket's
//     all-reduce as soon as it and the ones before it are ready (Note [Round plan] in
//     transport/round_plan.h), so the order can only cost overlap, never correctness.
// Only the last micro-batch's backward streams (earlier ones still add to the gradient), and
// only a gradient in host memory: on CUDA the round is sent after backward.
#include <torch/torch.h>

#include <vector>

#include "exchange/gradient_exchange.h"
#include "worker/flat_parameters.h"

namespace gradbox::worker {

class BackwardStream {
 public:
  BackwardStream(torch::nn::Module& model, const FlatParameters& flat);
  ~BackwardStream();
  BackwardStream(const BackwardStream&) = delete;
  BackwardStream& operator=(const BackwardStream&) = delete;

  // The flat gradient's parts, in the order backward is expected to finish them.
  const std::vector<exchange::Span>& parts() const { return parts_; }
  // While a round is attached, each parameter's hook reports its part to it.
  void attach(exchange::StreamedRound* round) { round_ = round; }
  void detach() { round_ = nullptr; }
  // Called by the hooks.
  void ready(size_t part) {
    if (round_) round_->part_ready(part);
  }

 private:
  std::vector<exchange::Span> parts_;
  std::vector<torch::Tensor> hooked_;
  exchange::StreamedRound* round_ = nullptr;
};

}  // namespace gradbox::worker

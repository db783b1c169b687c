// Note [Chunked LM head]: the chunked head gives the unchunked loss and gradients to fp32
// rounding, for chunks that divide the rows, that do not, and that exceed them, and a tied
// head's two gradients add up as autograd adds them. Note [Kept gradient buffers]: a model that
// adds into kept .grad buffers gets the same gradients, in those buffers, with every
// parameter's post-accumulate hook run once per backward.
#include "model/chunked_lm_loss.h"

#include <gtest/gtest.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/torch.h>

#include <map>

#include "model/causal_lm.h"

namespace gradbox::model {
namespace {

double max_relative(const torch::Tensor& a, const torch::Tensor& b) {
  return ((a - b).abs().max() / b.abs().max()).item<double>();
}

TEST(ChunkedLmLoss, MatchesTheUnchunkedLossAndGradientsForAnyChunk) {
  torch::manual_seed(3);
  const torch::Tensor hidden0 = torch::randn({2, 13, 16});
  const torch::Tensor weight0 = torch::randn({97, 16}) * 0.3;
  const torch::Tensor targets = torch::randint(97, {2, 13}, torch::kLong);
  torch::Tensor h = hidden0.clone().requires_grad_(), w = weight0.clone().requires_grad_();
  const torch::Tensor reference = language_model_loss(torch::nn::functional::linear(h, w), targets);
  reference.backward();
  for (int64_t chunk : {1, 5, 13, 26, 100}) {
    SCOPED_TRACE("chunk " + std::to_string(chunk));
    torch::Tensor hc = hidden0.clone().requires_grad_(), wc = weight0.clone().requires_grad_();
    const torch::Tensor loss = chunked_lm_loss(hc, wc, targets, chunk);
    (loss * 3.0).backward();  // the incoming gradient scales both
    EXPECT_NEAR(loss.item<double>(), reference.item<double>(), 1e-6 * reference.item<double>());
    EXPECT_LT(max_relative(hc.grad(), h.grad() * 3.0), 1e-5);
    EXPECT_LT(max_relative(wc.grad(), w.grad() * 3.0), 1e-5);
    torch::NoGradGuard no_grad;  // evaluation: the loss alone, the same value
    EXPECT_NEAR(chunked_lm_loss(hidden0, weight0, targets, chunk).item<double>(), loss.item<double>(), 1e-6);
  }
}

TEST(ChunkedLmLoss, AModelsChunkedLossMatchesItsLogitsLossIncludingTheTiedEmbedding) {
  for (const char* preset : {"gpt2-tiny", "llama-tiny"}) {
    SCOPED_TRACE(preset);
    ModelConfig config = ModelConfig::preset(preset);
    auto plain = make_model(config, 7);
    auto chunked = make_model(config, 7);
    const torch::Tensor data = torch::randint(config.vocab_size, {3, 33}, torch::kLong);
    using torch::indexing::Slice;
    const torch::Tensor idx = data.index({Slice(), Slice(0, 32)}), targets = data.index({Slice(), Slice(1)});
    const torch::Tensor a = plain->loss(idx, targets), b = chunked->loss(idx, targets, 40);
    a.backward();
    b.backward();
    EXPECT_NEAR(a.item<double>(), b.item<double>(), 1e-5);
    const auto pa = plain->named_parameters(), pb = chunked->named_parameters();
    for (const auto& item : pa) {
      const torch::Tensor ga = item.value().grad(), gb = pb[item.key()].grad();
      ASSERT_TRUE(gb.defined()) << item.key();
      EXPECT_LT(max_relative(gb, ga), 1e-4) << item.key();
    }
  }
}

class CountCalls final : public torch::autograd::PostAccumulateGradHook {
 public:
  explicit CountCalls(int& count) : count_(count) {}
  void operator()(const torch::autograd::Variable&) override { ++count_; }

 private:
  int& count_;
};

TEST(ChunkedLmLoss, KeptGradBuffersGetTheSameGradientsInPlaceAndRunEachHookOnce) {
  for (const char* preset : {"gpt2-tiny", "llama-tiny"}) {  // a tied head, an untied one
    SCOPED_TRACE(preset);
    ModelConfig config = ModelConfig::preset(preset);
    auto plain = make_model(config, 7);
    auto kept = make_model(config, 7);
    std::map<std::string, void*> buffers;
    std::map<std::string, int> hook_calls;
    for (const auto& item : kept->named_parameters()) {
      item.value().mutable_grad() = torch::zeros_like(item.value());
      buffers[item.key()] = item.value().grad().data_ptr();
      hook_calls[item.key()] = 0;
      torch::autograd::impl::set_post_acc_grad_hooks(item.value(),
                                                     std::make_unique<CountCalls>(hook_calls[item.key()]));
    }
    kept->set_kept_grad_buffers(true);
    using torch::indexing::Slice;
    // Two micro-batches, the second scaled as loss scaling and accumulation scale it.
    for (double scale : {1.0, 0.375}) {
      const torch::Tensor data = torch::randint(config.vocab_size, {3, 33}, torch::kLong);
      const torch::Tensor idx = data.index({Slice(), Slice(0, 32)}), targets = data.index({Slice(), Slice(1)});
      (plain->loss(idx, targets) * scale).backward();
      (kept->loss(idx, targets, 40) * scale).backward();
    }
    const auto pa = plain->named_parameters(), pb = kept->named_parameters();
    for (const auto& item : pa) {
      const torch::Tensor gb = pb[item.key()].grad();
      ASSERT_TRUE(gb.defined() && !gb.is_sparse()) << item.key();
      EXPECT_EQ(gb.data_ptr(), buffers[item.key()]) << item.key() << ": not the kept buffer";
      EXPECT_LT(max_relative(gb, item.value().grad()), 1e-4) << item.key();
      EXPECT_EQ(hook_calls[item.key()], 2) << item.key();
    }
    for (const auto& item : kept->named_parameters()) torch::autograd::impl::set_post_acc_grad_hooks(item.value(), nullptr);
  }
}

TEST(ChunkedLmLoss, ALossMadeWithAKeptBufferCannotBeDifferentiatedTwice) {
  ModelConfig config = ModelConfig::preset("gpt2-tiny");
  auto model = make_model(config, 7);
  for (const auto& p : model->parameters()) p.mutable_grad() = torch::zeros_like(p);
  model->set_kept_grad_buffers(true);
  const torch::Tensor data = torch::randint(config.vocab_size, {2, 17}, torch::kLong);
  using torch::indexing::Slice;
  const torch::Tensor loss = model->loss(data.index({Slice(), Slice(0, 16)}), data.index({Slice(), Slice(1)}), 8);
  loss.backward({}, /*retain_graph=*/true);
  EXPECT_THROW(loss.backward(), std::exception);
}

}  // namespace
}  // namespace gradbox::model

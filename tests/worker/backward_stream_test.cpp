// Note [Backward overlap]: the hooks report each parameter's part once per backward, when its
// gradient is final, for the model presets the trainer builds (tied embeddings, activation
// checkpointing included).
#include "worker/backward_stream.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <iostream>

#include "model/causal_lm.h"

namespace gradbox::worker {
namespace {

// Records each part as it is reported, with a copy of its gradient at that moment.
class RecordingRound final : public exchange::StreamedRound {
 public:
  RecordingRound(const torch::Tensor& grads, const std::vector<exchange::Span>& parts) : grads_(grads), parts_(parts) {}
  void part_ready(size_t i) noexcept override {
    order.push_back(i);
    const exchange::Span s = parts_[i];
    seen[i] = grads_.narrow(0, static_cast<int64_t>(s.begin), static_cast<int64_t>(s.end - s.begin)).clone();
  }
  exchange::RoundResult finish() override { return {}; }
  std::vector<size_t> order;
  std::map<size_t, torch::Tensor> seen;

 private:
  torch::Tensor grads_;
  std::vector<exchange::Span> parts_;
};

struct Case {
  const char* preset;
  const char* checkpointing;
};

class BackwardStreamTest : public ::testing::TestWithParam<Case> {};

TEST_P(BackwardStreamTest, EveryPartIsReportedOnceWithItsFinalGradient) {
  model::ModelConfig config = model::ModelConfig::preset(GetParam().preset);
  config.n_layer = 4;
  auto model = model::make_model(config, 3);
  model->set_activation_checkpointing(model::ActivationCheckpointing::parse(GetParam().checkpointing));
  FlatParameters flat(*model, [&](const std::string& name) { return model->is_no_decay(name); });
  BackwardStream stream(*model, flat);
  const std::vector<exchange::Span>& parts = stream.parts();
  ASSERT_EQ(parts.size(), flat.segments().size());
  size_t covered = 0;
  for (const exchange::Span& p : parts) covered += p.end - p.begin;
  EXPECT_EQ(covered, static_cast<size_t>(flat.numel()));

  torch::manual_seed(1);
  const torch::Tensor data = torch::randint(config.vocab_size, {2, 17}, torch::kLong);
  using torch::indexing::Slice;
  for (int step = 0; step < 2; ++step) {  // the hooks stay in place from one backward to the next
    SCOPED_TRACE("backward " + std::to_string(step));
    flat.zero_grad();
    RecordingRound round(flat.grads(), parts);
    stream.attach(&round);
    model::language_model_loss(model->forward(data.index({Slice(), Slice(0, 16)})), data.index({Slice(), Slice(1)}))
        .backward();
    stream.detach();
    ASSERT_EQ(round.order.size(), parts.size());
    for (size_t i = 0; i < parts.size(); ++i) {
      ASSERT_TRUE(round.seen.count(i)) << "part " << i << " never reported";
      const exchange::Span s = parts[i];
      EXPECT_TRUE(torch::equal(round.seen[i], flat.grads().narrow(0, static_cast<int64_t>(s.begin),
                                                                  static_cast<int64_t>(s.end - s.begin))))
          << "part " << i << " changed after it was reported";
    }
    EXPECT_GT(flat.grads().abs().sum().item<double>(), 0.0);
    // How well the expected order held: the share of elements whose part, when reported, had
    // every part before it in the plan reported too (it could go on the wire at once).
    std::vector<bool> ready(parts.size(), false);
    size_t prefix = 0, sendable = 0;
    for (size_t i : round.order) {
      ready[i] = true;
      if (i == prefix) sendable += parts[i].end - parts[i].begin;
      while (prefix < parts.size() && ready[prefix]) ++prefix;
    }
    std::cout << GetParam().preset << "/" << GetParam().checkpointing << ": "
              << 100.0 * static_cast<double>(sendable) / static_cast<double>(covered)
              << "% of the gradient was sendable in plan order as backward made it\n";
    EXPECT_GT(sendable, covered / 2) << "the expected order (each group last parameter first) no longer holds";
  }
  // Without a round attached the hooks do nothing.
  model::language_model_loss(model->forward(data.index({Slice(), Slice(0, 16)})), data.index({Slice(), Slice(1)}))
      .backward();
}

INSTANTIATE_TEST_SUITE_P(Presets, BackwardStreamTest,
                         ::testing::Values(Case{"gpt2-tiny", "none"}, Case{"gpt2-tiny", "all"},
                                           Case{"llama-tiny", "none"}),
                         [](const auto& info) {
                           std::string name = std::string(info.param.preset) + "_" + info.param.checkpointing;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

}  // namespace
}  // namespace gradbox::worker

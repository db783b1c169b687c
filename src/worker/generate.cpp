#include "worker/generate.h"

#include <ATen/CPUGeneratorImpl.h>

#include "common/error.h"

namespace gradbox::worker {

std::vector<int32_t> generate(model::CausalLM& model, const std::vector<int32_t>& prompt, const SamplingOptions& options) {
  GB_REQUIRE(options.temperature >= 0, "--temperature: must be >= 0, got ", options.temperature);
  GB_REQUIRE(options.top_k >= 0, "--top-k: must be >= 0, got ", options.top_k);
  GB_REQUIRE(!prompt.empty(), "--prompt: encodes to no tokens; give some text");
  const int64_t vocab = model.config().vocab_size;
  for (int32_t id : prompt) GB_CHECK(id >= 0 && id < vocab, "prompt token ", id, " outside vocabulary ", vocab);

  const torch::Device device = model.parameters().front().device();
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(options.seed);
  model.eval();
  torch::NoGradGuard no_grad;
  std::vector<int32_t> tokens = prompt;
  const int64_t block = model.config().block_size;
  for (int64_t i = 0; i < options.max_new_tokens; ++i) {
    const int64_t start = std::max<int64_t>(0, static_cast<int64_t>(tokens.size()) - block);
    std::vector<int64_t> context(tokens.begin() + start, tokens.end());
    torch::Tensor idx = torch::tensor(context, torch::kInt64).unsqueeze(0).to(device);  // (1, T)
    torch::Tensor logits = model.forward(idx).select(1, -1).squeeze(0).to(torch::kCPU, torch::kFloat32);  // (V)
    int64_t next;
    if (options.temperature == 0) {
      next = logits.argmax().item<int64_t>();
    } else {
      logits = logits / options.temperature;
      if (options.top_k > 0 && options.top_k < vocab) {
        const torch::Tensor kth = std::get<0>(logits.topk(options.top_k)).select(0, -1);
        logits = logits.masked_fill(logits < kth, -std::numeric_limits<float>::infinity());
      }
      next = torch::multinomial(torch::softmax(logits, 0), 1, false, generator).item<int64_t>();
    }
    tokens.push_back(static_cast<int32_t>(next));
    if (next == options.stop_token) break;
  }
  return tokens;
}

}  // namespace gradbox::worker

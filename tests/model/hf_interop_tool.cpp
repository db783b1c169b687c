// Helper for check_hf_export.py (not a unit test by itself):
//   hf_interop_tool export <dir>        writes <dir>/<case>/ for each case below: an exported
//                                       model (config.json, model.safetensors) and
//                                       reference.safetensors with input_ids and our logits.
//   hf_interop_tool check-import <dir>  imports the HF folder <dir> (written by transformers),
//                                       compares our logits with its reference.safetensors,
//                                       prints the max abs diff, exits 1 over the tolerance.
#include <torch/torch.h>

#include <cstdio>
#include <iostream>

#include "common/error.h"
#include "model/hf.h"
#include "model/safetensors.h"

namespace {

namespace fs = std::filesystem;
using namespace gradbox::model;

constexpr double kTolerance = 1e-4;

torch::Tensor logits_for(CausalLM& model, const torch::Tensor& ids) {
  model.eval();
  torch::NoGradGuard no_grad;
  return model.forward(ids);
}

void export_case(const fs::path& dir, ModelConfig config) {
  auto model = make_model(config, 17);
  {
    // Off the init values: unit norm gains and zero biases would hide layout mistakes.
    torch::NoGradGuard no_grad;
    for (auto& p : model->parameters()) p.add_(torch::randn_like(p) * 0.05);
  }
  export_hf(*model, dir);
  torch::Tensor ids = torch::randint(config.vocab_size, {2, 48}, torch::kLong);
  save_safetensors(dir / "reference.safetensors",
                   {{"input_ids", ids}, {"logits", logits_for(*model, ids)}},
                   {{"format", "pt"}, {"config", config.to_json().dump()}});
  std::cout << "exported " << dir.string() << " (" << config.parameter_count() << " parameters)\n";
}

int run_export(const fs::path& root) {
  torch::manual_seed(0);
  ModelConfig gpt2 = ModelConfig::preset("gpt2-tiny");
  gpt2.n_layer = 3;
  gpt2.norm_eps = 1e-5;
  export_case(root / "gpt2", gpt2);
  ModelConfig untied = ModelConfig::preset("llama-tiny");  // GQA: 4 query heads, 2 kv heads
  untied.n_layer = 3;
  untied.norm_eps = 1e-6;
  export_case(root / "llama_untied", untied);
  ModelConfig tied = untied;
  tied.tie_embeddings = true;
  tied.rope_theta = 500000.0;
  export_case(root / "llama_tied", tied);
  ModelConfig mqa = untied;  // one kv head, biases, explicit ffn size
  mqa.n_kv_head = 1;
  mqa.bias = true;
  mqa.ffn_hidden = 160;
  export_case(root / "llama_mqa_bias", mqa);
  return 0;
}

int run_check_import(const fs::path& dir) {
  auto model = import_hf(dir);
  const auto ref = load_safetensors(dir / "reference.safetensors");
  torch::Tensor logits = logits_for(*model, ref.at("input_ids"));
  const double diff = (logits - ref.at("logits")).abs().max().item<double>();
  std::printf("import %s: %s, max abs diff %.3g\n", dir.filename().c_str(),
              model->config().to_json().dump().c_str(), diff);
  return diff <= kTolerance ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s export|check-import <dir>\n", argv[0]);
    return 2;
  }
  try {
    const std::string mode = argv[1];
    if (mode == "export") return run_export(argv[2]);
    if (mode == "check-import") return run_check_import(argv[2]);
    std::fprintf(stderr, "unknown mode '%s'\n", argv[1]);
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}

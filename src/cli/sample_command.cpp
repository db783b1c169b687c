// gradbox sample: generate text from a run, a checkpoint or a Hugging Face folder.
#include <iostream>
#include <span>
#include <string>

#include "cli/commands.h"
#include "common/error.h"
#include "tokenizer/tokenizer.h"
#include "worker/generate.h"
#include "worker/model_loader.h"

namespace gradbox::cli {

void add_sample_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("sample", "Generate text from a run, checkpoint or Hugging Face folder");
  struct Options {
    std::string from;
    std::string prompt = "\n";
    std::string tokenizer_dir;
    worker::SamplingOptions sampling;
    int64_t samples = 1;
    bool past_end = false;
  };
  auto o = std::make_shared<Options>();
  cmd->add_option("--from", o->from, "Run folder, checkpoint folder or Hugging Face folder")->required();
  cmd->add_option("--prompt", o->prompt, "Text to continue (default: a new line, text from scratch)");
  cmd->add_option("--tokenizer", o->tokenizer_dir, "Tokenizer folder (default: the run's or the HF folder's)");
  cmd->add_option("--max-new-tokens", o->sampling.max_new_tokens, "Tokens to generate")->capture_default_str();
  cmd->add_option("--temperature", o->sampling.temperature, "Softmax temperature (0: greedy)")->capture_default_str();
  cmd->add_option("--top-k", o->sampling.top_k, "Sample among the k likeliest tokens (0: all)")->capture_default_str();
  cmd->add_option("--seed", o->sampling.seed, "Sampling seed")->capture_default_str();
  cmd->add_option("--samples", o->samples, "Number of samples")->capture_default_str();
  cmd->add_flag("--past-end-of-text", o->past_end,
                "Write on past the end-of-text token, one document after another (a new line each), to --max-new-tokens");
  cmd->callback([o] {
    worker::LoadedModel loaded = worker::load_model(o->from);
    const std::filesystem::path tokenizer_dir =
        o->tokenizer_dir.empty() ? loaded.tokenizer_dir : std::filesystem::path(o->tokenizer_dir);
    std::unique_ptr<tokenizer::Tokenizer> tok = tokenizer::load_tokenizer(tokenizer_dir);
    GB_REQUIRE(tok->vocab_size() <= loaded.model->config().vocab_size, tokenizer_dir.string(), ": tokenizer has ",
               tok->vocab_size(), " tokens, the model only ", loaded.model->config().vocab_size);
    std::vector<int32_t> prompt = tok->encode(o->prompt);
    worker::SamplingOptions sampling = o->sampling;
    sampling.stop_token = o->past_end ? -1 : tok->eot_id();
    for (int64_t i = 0; i < o->samples; ++i) {
      sampling.seed = o->sampling.seed + static_cast<uint64_t>(i);
      std::vector<int32_t> ids = worker::generate(*loaded.model, prompt, sampling);
      const bool ended = !o->past_end && ids.size() > prompt.size() && ids.back() == tok->eot_id();
      if (ended) ids.pop_back();
      // Documents written one after another: each end of text is a line break.
      std::string text;
      for (size_t from = 0; from < ids.size();) {
        size_t to = from;
        while (to < ids.size() && ids[to] != tok->eot_id()) ++to;
        text += tok->decode(std::span<const int32_t>(ids).subspan(from, to - from));
        if (to < ids.size()) text += "\n";
        from = to + 1;
      }
      std::cout << text << std::endl;
      // Why it stopped, on stderr (stdout stays the text): a short sample is the model's choice.
      std::cerr << "(" << ids.size() - prompt.size() << " new tokens: "
                << (ended ? "the model wrote its end-of-text token" : str("--max-new-tokens ", sampling.max_new_tokens, " reached"))
                << ")\n";
      if (i + 1 < o->samples) std::cout << "---\n";
    }
  });
}

}  // namespace gradbox::cli

#pragma once
// Finds a trained model wherever the user points: a run folder (its newest checkpoint), a
// checkpoint folder, or a Hugging Face folder (config.json + model.safetensors).
#include <filesystem>
#include <memory>

#include "model/causal_lm.h"

namespace gradbox::worker {

struct LoadedModel {
  std::shared_ptr<model::CausalLM> model;  // on CPU, fp32
  std::filesystem::path tokenizer_dir;     // where its tokenizer files are
  std::filesystem::path source;            // the checkpoint or HF folder actually read
};

LoadedModel load_model(const std::filesystem::path& from);

// Turns a Hugging Face folder into a run folder with a step-0 checkpoint, so that
// `gradbox train --out RUN --model RUN/model_config.json` continues training it.
void import_to_run(const std::filesystem::path& hf_dir, const std::filesystem::path& run_dir);

}  // namespace gradbox::worker

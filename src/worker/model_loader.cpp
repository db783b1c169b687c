#include "worker/model_loader.h"

#include "common/atomic_file.h"
#include "common/error.h"
#include "model/hf.h"
#include "tokenizer/tokenizer.h"
#include "worker/checkpoint.h"
#include "worker/flat_parameters.h"

namespace gradbox::worker {
namespace {

bool is_hf_folder(const std::filesystem::path& dir) {
  return std::filesystem::exists(dir / "config.json") && std::filesystem::exists(dir / "model.safetensors");
}

}  // namespace

LoadedModel load_model(const std::filesystem::path& from) {
  GB_REQUIRE(std::filesystem::exists(from), from.string(), ": no such run, checkpoint or Hugging Face folder");
  LoadedModel loaded;
  if (is_hf_folder(from)) {
    loaded.model = model::import_hf(from);
    loaded.tokenizer_dir = from;
    loaded.source = from;
    return loaded;
  }
  const std::filesystem::path dir = resolve_checkpoint(from);
  CheckpointData data = load_checkpoint(dir);
  model::ModelConfig config = model::ModelConfig::from_json(data.state.model_config, (dir / "state.json").string());
  loaded.model = model::make_model(config, /*seed=*/0);
  FlatParameters flat(*loaded.model, [&](const std::string& name) { return loaded.model->is_no_decay(name); });
  restore_parameters(data, flat, dir);
  loaded.tokenizer_dir = dir.parent_path().parent_path() / "tokenizer";
  loaded.source = dir;
  return loaded;
}

void import_to_run(const std::filesystem::path& hf_dir, const std::filesystem::path& run_dir) {
  GB_REQUIRE(is_hf_folder(hf_dir), hf_dir.string(), ": not a Hugging Face model folder (needs config.json and model.safetensors)");
  GB_REQUIRE(!find_latest_checkpoint(run_dir).has_value(), run_dir.string(),
             ": already holds a checkpoint; import into a new run folder");
  std::shared_ptr<model::CausalLM> model = model::import_hf(hf_dir);
  std::unique_ptr<tokenizer::Tokenizer> tokenizer = tokenizer::load_tokenizer(hf_dir);

  std::filesystem::create_directories(run_dir);
  FlatParameters flat(*model, [&](const std::string& name) { return model->is_no_decay(name); });
  CheckpointState state;
  state.model_config = model->config().to_json();
  state.train_config = nlohmann::json::object();
  const torch::Tensor zeros = torch::zeros_like(flat.params());
  save_checkpoint(run_dir, state, flat, {{"exp_avg", zeros}, {"exp_avg_sq", zeros}});
  write_file_atomic(run_dir / "model_config.json", model->config().to_json().dump(2));
  const std::filesystem::path tokenizer_dir = run_dir / "tokenizer";
  std::filesystem::create_directories(tokenizer_dir);
  tokenizer->save(tokenizer_dir);
}

}  // namespace gradbox::worker
